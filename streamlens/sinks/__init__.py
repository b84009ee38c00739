"""Sinks: where results go. `build_sink` turns a sink's config into a `Sink`."""

from __future__ import annotations

from collections.abc import Mapping

from ..config import SinkConfig
from .base import Sink


def build_sink(cfg: SinkConfig, stream_fps: Mapping[str, float]) -> Sink:
    """The sink for one `sinks[i]` entry. `stream_fps` gives each stream's frame rate."""
    if cfg.type == "jsonl":
        from .jsonl import JsonlSink

        return JsonlSink(cfg.options["path"])
    if cfg.type == "video":
        from .video import VideoSink

        opts = {k: v for k, v in cfg.options.items() if k != "path"}
        return VideoSink(cfg.options["path"], stream_fps=stream_fps, **opts)
    if cfg.type == "zmq":
        from .zmq import ZmqSink

        return ZmqSink(**cfg.options)
    raise ValueError(f"unknown sink type {cfg.type!r}")


__all__ = ["Sink", "build_sink"]
