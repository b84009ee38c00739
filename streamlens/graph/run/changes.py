"""Streams added to and removed from a running pipeline (`POST` and `DELETE /api/streams`, or
`Pipeline.add_stream` / `remove_stream` in an embedding program): `StreamChanges`.

A stream is a `Stream` (graph/run/stream.py), made the same way as the pipeline file's:

- `add(data)`, on the caller's thread: the source mapping is checked as the pipeline file's
  `sources[i]` are (config/added.py: a mistake is `ConfigError`, one line in `validate`'s words;
  over HTTP, `remote=True`, also what the operator allows: config/remote.py), outside the run's
  lock (a file is opened to check it). With `runtime.max_streams` streams open (listed, not ended,
  not being removed) it is `StreamLimit`, before anything is opened. The stream is listed at once
  (state `starting`: `/api/streams` shows it), and its source is built there (a file is opened; a
  camera's connection is made by its own thread later). The rest is posted to the engine's
  mailbox and done on the engine thread, the only writer of the lanes (`StreamRun.join_running`):
  its lane, schedule, admission and shedder, as for the file's streams, then its source thread.
  Nothing of the other streams waits: the engine does this between two of its frames.
- `remove(name)`: the stream's `StreamStop` is set (with reason `removed`), posted to the mailbox
  after any add of the same stream. Its source ends as at a Ctrl-C: the frames already decoded are
  processed and published, then its `eos` says `reason: "removed"`. Asked again, it is
  `StreamConflict` (being removed, or ended). Its name stays taken for the rest of the run (its
  figures and its `seq` stay what they were; a subscriber never sees a stream start again from 0).
- A run ends when its last stream ends by itself. When the last open stream is removed instead,
  the run waits for streams to be added (`Engine.hold_open`) until it is stopped (Ctrl-C).

The pipeline file, and the validated config, stay what the next start runs: the run's streams are
its `StreamSet`.

Example (an embedding program):
    >>> pipeline.add_stream({"uri": "rtsp://10.0.0.7/stream1", "name": "door"})   # doctest: +SKIP
    ('door', [])
    >>> pipeline.remove_stream("door")                                           # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from ...config import PipelineConfig, SourceConfig
from ...config.added import added_source, check_room
from ...errors import NoSuchStream, StreamConflict
from .stream import Stream, StreamSet

log = logging.getLogger("streamlens")


class StreamRun(Protocol):
    """What `StreamChanges` asks of the run it changes (a `Pipeline`)."""

    config: PipelineConfig
    #: the run's streams
    streams: StreamSet

    @property
    def running(self) -> bool:
        """Whether streams may be changed now: started, and not stopping."""
        ...

    def open_stream(self, stream: Stream) -> None:
        """Build `stream`'s source (on the caller's thread)."""
        ...

    def post(self, fn: Callable[[], None], key: str) -> None:
        """Run `fn()` on the engine thread."""
        ...

    def join_running(self, stream: Stream) -> None:
        """On the engine thread: `stream` joins the running engine and its source thread starts."""
        ...

    def close_source(self, stream: Stream) -> None:
        """`stream`'s source will not run: close it (the run is ending)."""
        ...


class StreamChanges:
    """Streams added to and removed from a running pipeline (see the module's docstring)."""

    def __init__(self, run: StreamRun):
        self.run = run
        self._lock = threading.Lock()
        self._removing: set[str] = set()  # asked to be removed (a second ask is a conflict)

    def add(self, data: dict | SourceConfig, *, remote: bool = False) -> tuple[str, list[str]]:
        """Check `data` (one source mapping, or a `SourceConfig` checked already by a supervisor,
        which counts its streams itself), list the stream, build its source and post the rest to the
        engine: (the stream's name, warnings). Raises `ConfigError` (a mistake in `data`, or a file
        that cannot be read as a video), `StreamConflict` (the run is not running), `StreamLimit`
        (it has `runtime.max_streams` open). `remote`: asked over HTTP (config/remote.py)."""
        run = self.run
        checked = isinstance(data, SourceConfig)
        with self._lock:
            self._check_running()
            if not checked:
                check_room(self._open_now(), run.config)
            taken = {s.name for s in run.streams}
        if checked:
            source, warnings = data, []
        else:  # outside the lock: a file is opened to check it
            source, warnings = added_source(data, run.config, taken, remote=remote)
        stream = Stream.listed(source)
        with self._lock:
            self._check_running()
            if not checked:
                check_room(self._open_now(), run.config)
            if not run.streams.list(stream):  # listed at once (state `starting`), its name taken
                raise StreamConflict(f"a stream named {source.name!r} is already in this run")
        try:
            run.open_stream(stream)
        except BaseException:
            run.streams.drop(source.name)
            raise
        if not run.running:
            run.streams.drop(source.name)
            run.close_source(stream)
            raise StreamConflict("the run is ending; no stream can be added")
        run.post(lambda: self._join(stream), key=f"add:{source.name}")
        return source.name, warnings

    def remove(self, name: str) -> None:
        """End stream `name` (its eos: reason `removed`). Raises `NoSuchStream`, or `StreamConflict`
        when it has already ended or is being removed."""
        with self._lock:
            self._check_running()
            stream = self.run.streams.get(name)
            if stream is None:
                raise NoSuchStream(f"no stream named {name!r}")
            if stream.stats.reason is not None:
                raise StreamConflict(f"stream {name!r} has already ended ({stream.stats.reason})")
            if name in self._removing:
                raise StreamConflict(f"stream {name!r} is being removed already")
            self._removing.add(name)
        self.run.post(lambda: self._leave(stream), key=f"remove:{name}")

    def _open_now(self) -> int:
        """Streams open: listed, not ended, not being removed (under the lock)."""
        return sum(1 for s in self.run.streams if s.stats.reason is None and s.name not in self._removing)

    def _check_running(self) -> None:
        if not self.run.running:
            raise StreamConflict("the run is not running (starting or ending); streams can be changed while it runs")

    # -- on the engine thread -------------------------------------------------------------------

    def _join(self, stream: Stream) -> None:
        if not self.run.running:  # the run is ending: its source is closed with the others
            stream.stats.end("stopped", None)
            return
        self.run.join_running(stream)
        log.info("stream %s added (%s)", stream.name, stream.config.display_uri)

    @staticmethod
    def _leave(stream: Stream) -> None:
        if not stream.stop.is_set():
            stream.stop.reason = "removed"
            stream.stop.set()
            log.info("stream %s removed", stream.name)


__all__ = ["StreamChanges", "StreamRun"]
