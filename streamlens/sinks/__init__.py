"""Sinks: where results go. `build_sink` turns a sink's config into a `Sink`."""

from __future__ import annotations

from collections.abc import Mapping

from ..config import SinkConfig
from .base import Sink


def build_sink(cfg: SinkConfig, stream_fps: Mapping[str, float], where: str | None = None) -> Sink:
    """The sink for one `sinks[i]` entry, made from its typed section (checked once, when the file
    was read). `stream_fps` gives each stream's frame rate (in the
    pipeline's order); `where` names the entry in the sink's errors (`sinks[1]`)."""
    if cfg.type == "jsonl":
        from .jsonl import JsonlSink

        sink: Sink = JsonlSink(cfg)
    elif cfg.type == "video":
        from .video import VideoSink

        sink = VideoSink(cfg, stream_fps=stream_fps)
    elif cfg.type == "rtsp":
        from .rtsp import RtspSink

        sink = RtspSink(cfg, stream_fps=stream_fps)
    elif cfg.type == "zmq":
        from .zmq import ZmqSink

        sink = ZmqSink(cfg)
    elif cfg.type == "mqtt":
        from .mqtt import MqttSink

        sink = MqttSink(cfg)
    elif cfg.type == "webhook":
        from .webhook import WebhookSink

        sink = WebhookSink(cfg)
    elif cfg.type == "history":  # runtime.history, written like a sink
        from ..history.sink import HistorySink

        sink = HistorySink(cfg)
    else:
        raise ValueError(f"unknown sink type {cfg.type!r}")
    sink.where = where
    return sink


__all__ = ["Sink", "build_sink"]
