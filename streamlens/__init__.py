"""streamlens: real-time video analytics. Detect on keyframes, track in between, fan results out.

Embed it:
    >>> import streamlens                                              # doctest: +SKIP
    >>> pipe = streamlens.Pipeline.from_yaml("pipelines/quickstart.yaml")  # doctest: +SKIP
    >>> for result in pipe.results():                                  # doctest: +SKIP
    ...     print(result.frame.stream, result.seq, len(result.detections))

Names are imported on first use, so `streamlens validate` starts fast.
"""

from importlib import import_module

_EXPORTS = {
    "Pipeline": "graph.run.pipeline", "RunReport": "graph.run.stats",
    "PipelineConfig": "config", "load_pipeline": "config",
    "Frame": "frame", "FrameResult": "frame", "StreamEnd": "frame", "EndOfStream": "frame",
    "StreamlensError": "errors", "ConfigError": "errors", "SourceError": "errors",
    "SinkError": "errors", "DetectorError": "errors",
    "Subscriber": "wire.subscriber",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'streamlens' has no attribute {name!r}")
