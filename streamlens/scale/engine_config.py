"""What each engine of a supervised run runs: the pipeline's typed config, copied with only its
own sources and its sinks pointed at the supervisor (`engine_config`). Built and checked once, in
the supervisor; an engine receives it as it is (pickled across the process boundary)."""

from __future__ import annotations

import os
from collections.abc import Callable

from ..config import HttpConfig, PipelineConfig, SourceConfig, ZmqSinkConfig
from ..config.sinks import STREAM, video_path

#: the sinks written by the supervisor from what every engine pushes (one file, one MQTT client, one
#: webhook queue for the whole pipeline); zmq sinks are forwarded, video and rtsp sinks stay in the engines
WRITTEN_HERE = ("jsonl", "mqtt", "webhook", "history")


def engine_config(config: PipelineConfig, sources: list[SourceConfig], engines: int,
                  sink_endpoint: Callable[[int], str], remote: bool) -> PipelineConfig:
    """`config` as the engine of `sources` (its streams' source mappings) runs it, one of `engines`:

    - its sources only (named as in the whole file), one worker, no HTTP server, no cluster and
      no history of its own (its events are pushed to the supervisor, which writes the file);
    - each zmq sink bound on `sink_endpoint(j)` (sinks[j]; CurveZMQ stays with the supervisor's
      endpoint), each sink written by the supervisor (`WRITTEN_HERE`) a zmq push sink towards
      it there, each rtsp sink kept (each stream has a URL of its own), and each video sink kept: a
      path without `{stream}` gives the file's first stream `path` itself and every other
      `<stem>-<stream><suffix>` (`video_path`);
    - on one machine (`remote` False), an onnx or openvino detector without `threads` gets its share
      of the cores: the runtime's default (a thread per core) in each engine would put every
      engine's detector on every core at once; so does SAM's encoder without `segment.threads`.
    """
    first = config.sources[0].name in {s.name for s in sources}
    sinks = []
    for j, (_, sink) in enumerate(config.written()):  # runtime.history last: pushed here like a jsonl sink
        if sink.type == "zmq":
            sinks.append(sink.model_copy(update={"endpoint": sink_endpoint(j), "curve": None}))
        elif sink.type in WRITTEN_HERE:
            sinks.append(ZmqSinkConfig(type="zmq", mode="push", endpoint=sink_endpoint(j)))
        elif sink.type == "rtsp":
            sinks.append(sink)
        elif first or STREAM in str(sink.path):
            sinks.append(sink)
        else:
            sinks.append(sink.model_copy(update={"path": video_path(sink.path, STREAM, False)}))
    detector = config.detector
    if not remote and detector.backend in ("onnx", "openvino") and detector.threads is None:
        detector = detector.model_copy(update={"threads": max(1, (os.cpu_count() or 1) // engines)})
    segment = config.segment  # SAM's encoder likewise
    if not remote and segment is not None and segment.model is not None and segment.threads is None:
        segment = segment.model_copy(update={"threads": max(1, (os.cpu_count() or 1) // engines)})
    runtime = config.runtime.model_copy(update={"workers": 1, "http": HttpConfig(), "cluster": None, "history": None})
    return config.model_copy(update={"sources": list(sources), "sinks": sinks,
                                     "detector": detector, "segment": segment, "runtime": runtime})


__all__ = ["engine_config", "WRITTEN_HERE"]
