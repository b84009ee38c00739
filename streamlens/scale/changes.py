"""Streams added to and removed from a run of several engines (`POST` and `DELETE /api/streams`):
`SupervisedChanges`, the part of `Supervisor` (scale/supervisor.py) that does it. A stream is
checked here as the pipeline file's are (config/added.py), within `runtime.max_streams`, placed on
the engine with the fewest open streams and told to it; that engine's `Pipeline` builds it as it
builds its own (graph/run/stream.py). A removal is told to the stream's engine, or, while that
engine is being started again, it starts without it."""

from __future__ import annotations

import logging

from ..config.added import added_source, check_room
from ..errors import NoSuchStream, StreamConflict
from ..graph.run.stats import StreamStats

log = logging.getLogger("streamlens.scale")


class SupervisedChanges:
    """Adds and removes streams of a `Supervisor` (see the module), under its `_lock`."""

    def add_stream(self, data, *, remote: bool = False) -> tuple[str, list[str]]:
        """Add a stream while running, on the engine with the fewest open streams (`data`: one
        mapping of `sources`, checked as the file's; `remote`: asked over HTTP): its name and
        warnings. Raises `ConfigError`, `StreamConflict` or `StreamLimit`, as `Pipeline.add_stream`
        does, checked outside the lock (a file is opened), the room and the name again inside it;
        the engine builds it (a failure there ends the stream with reason `error` and that engine's line)."""
        with self._lock:
            self._check_running()
            check_room(self._open_now(), self.config)
            taken = set(self._engine_of)
        source, warnings = added_source(data, self.config, taken, remote=remote)
        with self._lock:
            self._check_running()
            if source.name in self._engine_of:
                raise StreamConflict(f"a stream named {source.name!r} is already in this run")
            check_room(self._open_now(), self.config)
            engine = min(self._engines, key=lambda e: (sum(not self._ended(n) for n in e.streams), e.index))
            self._placeholders[source.name] = StreamStats(source.name, source.display_uri)
            self._engine_of[source.name] = engine
            self._listed += (source,)  # after the two above: `stats` reads them by its names
            engine.streams.append(source.name)
            engine.sources.append(source)
            if engine.running:  # else it starts with it
                self._launcher.tell(engine, ("add", source))
        log.info("stream %s added to engine %d (%s)", source.name, engine.index, source.display_uri)
        return source.name, warnings

    def remove_stream(self, name: str) -> None:
        """End stream `name` while running (its `eos`: reason `removed`). Raises `NoSuchStream` or
        `StreamConflict` (already ended, or the run is not running)."""
        with self._lock:
            engine = self._engine_of.get(name)
            if engine is None:
                raise NoSuchStream(f"no stream named {name!r}")
            if self._stopping:
                raise StreamConflict("the run is not running; streams can be changed while it runs")
            if self._ended(name):
                raise StreamConflict(f"stream {name!r} has already ended ({self.stats[name].reason or 'removed'})")
            self._removed.add(name)
            if engine.running:
                self._launcher.tell(engine, ("remove", name))
            else:  # its engine is being started again: it starts without it
                st = self._ended_stats[name] = StreamStats(name, self._placeholders[name].uri)
                st.end("removed", None)
        log.info("stream %s removed", name)

    def _check_running(self) -> None:
        if self._stopping or not any(e.running or e.restart_at is not None for e in self._engines):
            raise StreamConflict("the run is not running; streams can be changed while it runs")

    def _open_now(self) -> int:
        """Streams open: not ended, not removed (under the lock)."""
        return sum(1 for name, st in self.stats.items() if st.reason is None and name not in self._removed)

    def _ended(self, name: str) -> bool:
        st = self.stats.get(name)
        return name in self._removed or st is not None and st.reason is not None


__all__ = ["SupervisedChanges"]
