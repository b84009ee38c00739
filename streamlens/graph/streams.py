"""One stream's parts in a pipeline, and streams added to and removed from a running one.

Each stream of a `Pipeline` has a source (decoding on its own thread), a `Lane` in the engine (its
tracker and its frames in order), a keyframe schedule and an `Admission`, its figures
(`StreamStats`), and a `StreamStop` that ends its source. `lane_for` and `schedule_for` make the
first two the same way at the start and for a stream added later.

`StreamChanges` adds and removes streams while the pipeline runs (`POST` and `DELETE
/api/streams`, or `Pipeline.add_stream` / `remove_stream` in an embedding program):

- `add(data)`, on the caller's thread: the source mapping is checked as the pipeline file's
  `sources[i]` are (config/added.py: a mistake is `ConfigError`, one line in `validate`'s words;
  over HTTP, `remote=True`, also what the operator allows: config/remote.py), outside the
  pipeline's lock (a file is opened to check it). With `runtime.max_streams` streams open (listed,
  not ended, not being removed) it is `StreamLimit`, before anything is opened. Its figures are
  listed at once (state `starting`: `/api/streams` shows it), and its source is built there (a
  file is opened; a camera's connection is made by its own thread later). Then the rest is posted
  to the engine's mailbox and done on the engine thread, the only writer of the lanes: its
  figures, lane, schedule and admission join the others (a live stream joins the shared keyframe
  schedule and the budget controller, when the run has them: it has when its file has a live
  source), and its source thread starts. Nothing of the other streams waits: the engine does this
  between two of its frames.
- `remove(name)`: the stream's `StreamStop` is set (with reason `removed`), posted to the mailbox
  after any add of the same stream. Its source ends as at a Ctrl-C: the frames already decoded are
  processed and published, then its `eos` says `reason: "removed"`. Asked again, it is
  `StreamConflict` (being removed, or ended). Its name stays taken for the
  rest of the run (its figures and its `seq` stay what they were; a subscriber never sees a stream
  start again from 0).
- A run ends when its last stream ends by itself. When the last open stream is removed instead,
  the run waits for streams to be added (`Engine.hold_open`) until it is stopped (Ctrl-C).

The pipeline file stays what the next start runs: changes made here live as long as the run.

Example (an embedding program):
    >>> pipeline.add_stream({"uri": "rtsp://10.0.0.7/stream1", "name": "door"})   # doctest: +SKIP
    ('door', [])
    >>> pipeline.remove_stream("door")                                           # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading

from ..config import PipelineConfig, SourceConfig
from ..config.added import added_source, check_room
from ..errors import NoSuchStream, StreamConflict
from ..sources import Source, build_source, clips_spec
from ..track import build_tracker
from .admit import Admission, StreamStop, run_source
from .engine import Lane, Mail
from .keyframes import SceneCutDetector, build_scheduler, longest_gap
from .stats import StreamStats

log = logging.getLogger("streamlens")


def open_source(cfg: PipelineConfig, source: SourceConfig, stats: StreamStats, on_state) -> Source:
    """`source` built (a file is opened; a camera connects on its own thread once it runs), its
    length in `stats`, and its states (a camera's: streaming, reconnecting, ...) told to `on_state`."""
    built = build_source(source, export_mvs=cfg.tracker.motion == "mv", clips=clips_spec(cfg))
    stats.total = built.total_frames
    if hasattr(built, "on_state"):
        built.on_state = on_state
    return built


def lane_for(cfg: PipelineConfig, source: SourceConfig, fps: float | None, seq: int = 0) -> Lane:
    """The engine's lane of `source`: its tracker at the stream's rate `fps` (None: unknown), its
    longest keyframe gap, its staleness limit, and the `seq` its results start from."""
    tracker = build_tracker(cfg.tracker, fps, detector_conf=cfg.detector.conf, adaptive=cfg.keyframes.adaptive)
    return Lane(source.name, tracker, source.live, longest_gap(cfg.keyframes),
                max_staleness_s=source.max_staleness_ms / 1000 if source.max_staleness_ms else None,
                period_s=1 / (fps or 30.0), seq=seq)


def schedule_for(cfg: PipelineConfig, source: SourceConfig, shared: bool, offset: int):
    """What decides `source`'s keyframes at admission: with the shared schedule (`shared`), a live
    stream only tells scene cuts (the engine chooses); otherwise its own scheduler at `offset`."""
    return SceneCutDetector() if shared and source.live else build_scheduler(cfg.keyframes, offset)


class StreamChanges:
    """Streams added to and removed from a running `Pipeline` (see the module's docstring)."""

    def __init__(self, pipeline):
        self.p = pipeline
        self._removing: set[str] = set()  # asked to be removed (a second ask is a conflict)

    def add(self, data: dict | SourceConfig, *, remote: bool = False) -> tuple[str, list[str]]:
        """Check `data` (one source mapping, or a `SourceConfig` checked already), build its source
        and post the rest to the engine:
        (the stream's name, warnings). Raises `ConfigError` (a mistake in `data`, or a file that
        cannot be read as a video), `StreamConflict` (the run is not running), `StreamLimit` (it
        has `runtime.max_streams` open). `remote`: asked over HTTP (config/remote.py)."""
        p = self.p
        checked = isinstance(data, SourceConfig)  # by a supervisor (streamlens/scale), which counts them
        with p._lock:
            self._check_running()
            if not checked:
                check_room(self._open_now(), p.config)
            taken = set(p.stats)
        if checked:
            source, warnings = data, []
        else:  # outside the lock: a file is opened to check it
            source, warnings = added_source(data, p.config, taken, remote=remote)
        with p._lock:
            self._check_running()
            if source.name in p.stats:
                raise StreamConflict(f"a stream named {source.name!r} is already in this run")
            if not checked:
                check_room(self._open_now(), p.config)
            # listed at once (state `starting`), its name taken; readers copy `stats` before iterating
            st = p.stats[source.name] = StreamStats(source.name, source.display_uri)
        try:
            built = open_source(p.config, source, st, p._on_source_state)
        except BaseException:
            with p._lock:
                del p.stats[source.name]
            raise
        with p._lock:
            ending = p.stopping
            if ending:
                del p.stats[source.name]
            else:
                p._all_sources.append(built)  # closed with the run's, whatever happens next
        if ending:
            built.close()
            raise StreamConflict("the run is ending; no stream can be added")
        p._mail.put(Mail(lambda: self._join(source, built, st)), key=f"add:{source.name}")
        return source.name, warnings

    def remove(self, name: str) -> None:
        """End stream `name` (its eos: reason `removed`). Raises `NoSuchStream`, or `StreamConflict`
        when it has already ended."""
        p = self.p
        with p._lock:
            self._check_running()
            st = p.stats.get(name)
            if st is None:
                raise NoSuchStream(f"no stream named {name!r}")
            if st.reason is not None:
                raise StreamConflict(f"stream {name!r} has already ended ({st.reason})")
            if name in self._removing:
                raise StreamConflict(f"stream {name!r} is being removed already")
            self._removing.add(name)
        p._mail.put(Mail(lambda: self._leave(name)), key=f"remove:{name}")

    def _open_now(self) -> int:
        """Streams open: listed, not ended, not being removed (under the pipeline's lock)."""
        return sum(1 for name, st in list(self.p.stats.items()) if st.reason is None and name not in self._removing)

    def _check_running(self) -> None:
        p = self.p
        if p.stopping or p._engine_thread is None or not p._engine_thread.is_alive():
            raise StreamConflict("the run is not running (starting or ending); streams can be changed while it runs")

    # -- on the engine thread -------------------------------------------------------------------

    def _join(self, source: SourceConfig, built: Source, st: StreamStats) -> None:
        """The added stream's parts join the run's, and its source thread starts."""
        p = self.p
        name = source.name
        if p.stopping:  # the run is ending: its source is closed with the others
            st.end("stopped", None)
            return
        p.config.sources.append(source)
        lane = lane_for(p.config, source, built.fps)
        shedder = p.controller.add(name) if p.controller is not None and source.live else None
        if shedder is not None:
            shedder.attach(built)
        stop = StreamStop()
        admission = Admission(lane, schedule_for(p.config, source, p._chooser is not None, 0),
                              p._prepare, shedder.drop if shedder is not None else None, stop)
        p._sources[name], p._lanes[name], p._admissions[name] = built, lane, admission
        if not source.live:
            p._credited.add(name)
        for sink in p._out.sinks:  # a video sink encodes each stream at its own rate
            if isinstance(getattr(sink, "stream_fps", None), dict) and built.fps:
                sink.stream_fps[name] = built.fps
        p._engine.add_lane(lane)
        p._stops[name] = stop
        if p.stopping:  # stopped meanwhile: `Pipeline.stop` may not have seen this stream's stop
            stop.set()
        thread = threading.Thread(target=run_source, name=f"source-{name}", daemon=True, args=(
            built, admission, p._inbox, p._credits if not source.live else None, stop, source.live))
        p._threads.append(thread)
        thread.start()
        log.info("stream %s added (%s)", name, source.display_uri)

    def _leave(self, name: str) -> None:
        stop = self.p._stops.get(name)
        if stop is not None and not stop.is_set():
            stop.reason = "removed"
            stop.set()
            log.info("stream %s removed", name)


__all__ = ["StreamChanges", "lane_for", "schedule_for"]
