"""What a running pipeline shows of itself, read from any thread (the HTTP server's `RunView`,
streamlens/http/run_view.py, the progress display, an embedding program): `RunFigures`, the part of
`Pipeline` that only reads. Every figure comes from the run's `StreamSet` (graph/run/stream.py), its
budget controller, its sinks and its result stages, never from a table of its own."""

from __future__ import annotations

from .stats import StreamStats
from .stream import StreamSet


class RunFigures:
    """The read side of a `Pipeline` (see the module); the pipeline sets the attributes below."""

    streams: StreamSet
    controller = None  # the budget controller (graph/overload/control.py), None without one
    _out = None  # the fan-out to the sinks (graph/publish/fanout.py), once running
    _stages = None  # the result stages (graph/publish/build.py `Stages`)
    _inbox = None  # the engine's inbox (graph/channel.py)

    @property
    def stats(self) -> dict[str, StreamStats]:
        """Each stream's figures by name, as they are now (a new dict: `streams` is the owner)."""
        return self.streams.stats()

    def source_configs(self) -> dict:
        """Every stream's source mapping by name: the file's and those added."""
        return {s.name: s.config for s in self.streams}

    def queue_depth(self, stream: str) -> int:
        """Frames of `stream` waiting for the engine."""
        return self._inbox.depth(stream)

    def endpoints(self) -> dict[str, str]:
        """Where the zmq sinks listen, by key path (`{"sinks[1]": "tcp://0.0.0.0:40213"}`); empty until open."""
        sinks = self._out.sinks if self._out is not None else []
        return {s.where: s.endpoint for s in sinks if s.where and s.endpoint is not None}

    def peer_refusals(self) -> dict[str, dict[str, int]]:
        """Peers each zmq sink refused or disconnected, by key path and reason (wire/peers.py)."""
        return self._out.refusals() if self._out is not None else {}

    def sink_losses(self) -> dict[str, int]:
        """Messages each sink could not deliver so far, by its entry (`sinks[2] (webhook)`), 0 included;
        a sink made in code, by its name, once it has dropped one."""
        sinks = self._out.sinks if self._out is not None else []
        return {f"{sink.where} ({sink.name})" if sink.where else f"{sink.name} sink": sum(drops.values())
                for sink in sinks if (drops := sink.drops()) or sink.where}

    def secondary_stats(self) -> dict:
        """Per `secondary` entry: looks answered (`calls`), tracks looked at, looks per track, crops
        computed and found in the cache, its hit rate, mean batch, ms per computed crop, crops dropped;
        and under `cache` the cache's own counters. Empty without secondary models."""
        return self._stages.secondary_stats()

    def segment_stats(self) -> dict:
        """The mask stage's figures (streamlens/segment/stage.py `stats`); empty without masks."""
        return self._stages.segment_stats()

    def embedding(self, stream: str, track: int, name: str | None = None):
        """The embedding kept for `track` of `stream` by the `embed` entry `name` (default: the
        first), a unit vector, or None; see streamlens/secondary."""
        secondary = self._stages.secondary
        return None if secondary is None else secondary.embedding(stream, track, name)

    def control_of(self, stream: str) -> tuple[float, bool, float] | None:
        """The budget controller's hold on `stream`: (interval stretch, whether keyframes wait for
        their detections, share of frames shed); None where no controller watches it."""
        control, owner = self.controller, self.streams.get(stream)
        if control is None or owner is None or owner.shedder is None:
            return None
        rungs = control.applied()
        return control.stretches[rungs.stretch_index], rungs.wait, owner.shedder.fraction


__all__ = ["RunFigures"]
