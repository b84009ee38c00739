"""The runtime: it builds the nodes of a pipeline, owns their threads and queues, and ends them.

    source threads (one per stream) --inbox--> engine thread --> fan-out: the sinks
                                                 |      ^
                                        keyframes v      | detections (a channel of their own)
                                               detector thread (batches across streams)

Each node does one job, in its own module: the engine (graph/engine.py: lanes, keyframe choice,
tracking, order), the detector's batching (graph/batcher.py), the fan-out to the sinks
(graph/fanout.py: each result serialised once; a frame's latency ends when the last sink has
published it), the budget controller (graph/control.py) and the run's figures (graph/stats.py).
This module wires them and owns their lifecycle:

- The inbox gives each stream its own share; a file source blocks when its share is full (nothing
  is lost), a live source drops its oldest frame (every drop counted).
- A file source holds a credit for every frame between its decoding and its publication
  (`file_credits`): however slow the detector, a file waits instead of filling the memory.
- `stop()` (Ctrl-C) ends the sources; what they already produced is processed and written, each
  stream gets its `eos`, and the sinks close. `abort()` (a second Ctrl-C) discards frames not yet
  processed, does not wait for a detector batch in hand, and still writes and closes what the
  sinks hold. An error in any node stops the rest the same way, and `run()` reports it.
  `close()` (and leaving a `with Pipeline(...)` block) aborts a run still going on another thread
  and waits for it to end.
- Every stream's end says how it ended and what it lost (`StreamStats.lost`, the `eos` message,
  the summary, `/metrics`): a file that ended before its declared length ends `truncated`, and
  the run then exits non-zero with one line naming it, whatever the other streams did.
- Deadlines and latencies run on `time.monotonic()` (`Frame.clock`); `ts` stays wall time for results.

Example:
    >>> from streamlens import Pipeline                    # doctest: +SKIP
    >>> with Pipeline.from_yaml("pipelines/quickstart.yaml") as pipeline:   # doctest: +SKIP
    ...     report = pipeline.run()
    >>> report.exit_code                                   # doctest: +SKIP
    0
"""

from __future__ import annotations

import gc
import logging
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
import numpy as np

from ..analytics.build import MediaClock, build_stream_analytics
from ..analytics.snapshots import Snapshots
from ..config import PipelineConfig, SourceConfig, load_pipeline, preflight_problems
from ..detect import build_detector
from ..errors import ConfigError, StreamlensError
from ..frame import EndOfStream, Event, FrameResult, StatsReport, StreamEnd
from ..http.server import MetricsServer
from ..sinks import Sink, build_sink
from ..sources import Source, build_source
from ..track import build_tracker
from .admit import Admission
from .channel import Channel, Credits
from .control import BudgetController
from .engine import DetectWorker, Engine, Lane
from .fanout import FanOut
from .stats import ENDED_STATES, RunReport, StreamStats
from .keyframes import SceneCutDetector, build_chooser, build_scheduler, longest_gap, stagger_offsets

log = logging.getLogger("streamlens")

#: Python's thread switch interval while a pipeline with live streams runs (seconds)
LIVE_SWITCH_S = 0.001
#: how long `run()` waits for its threads when it ends by an exception
ABORT_JOIN_S = 10.0
#: after `abort()`, how long the engine may wait for room in a stuck sink's queue before that queue
#: is closed (the sink then writes what it holds and closes; the engine ends)
ABORT_SINK_GRACE_S = 0.5


#: where PyAV's side data cycle could not be broken, a full garbage collection after this many
#: published frames (see `_CycleCollector`)
COLLECT_EVERY_FRAMES = 24


class _CycleCollector:
    """The fallback for a PyAV whose side data cycle `release_side_data` does not know how to break:
    a decoded picture whose motion vectors were read is then freed only by a full collection,
    which Python starts too rarely for pictures of megabytes. The engine then runs one after every
    `every` published frames (each takes milliseconds: a cost paid only on such a PyAV)."""

    def __init__(self, every: int = COLLECT_EVERY_FRAMES):
        self.every = every
        self._since = 0
        self.collections = 0

    def published(self) -> None:
        self._since += 1
        if self._since < self.every:
            return
        self._since = 0
        mvs = sys.modules.get("streamlens.sources.motion_vectors")  # imported once a source reads vectors
        if mvs is not None and mvs.SIDE_DATA_CYCLE:
            self.collections += 1
            gc.collect()


def file_credits(interval: int, max_batch: int) -> int:
    """Frames a file source may have between decoding and publication: enough for one full batch
    of its keyframes at the detector while the next one gathers.

    Example:
        >>> file_credits(5, 4)
        24
    """
    return (interval + 1) * max_batch


class _QueueSink(Sink):
    """Hands results to `Pipeline.results()`, in-process."""

    name = "results"

    def __init__(self, out: queue.Queue):
        self.out = out

    def write(self, item, message, payload) -> None:
        self.out.put(item)


_END = object()


_switch_lock = threading.Lock()
_switch_holders = 0
_switch_found = 0.005


def _live_switch_interval(hold: bool) -> None:
    """While a live pipeline runs, its threads hand the GIL over every LIVE_SWITCH_S, not every 5 ms: a
    frame waiting on a thread that holds it costs latency (p95 on 3 paced 720p streams with
    YOLOX-Nano on 2 cores: 57 ms at 5 ms, 18 ms at 1 ms). The interval is the process's: the first
    live pipeline to start sets it, the last to end restores the value it found."""
    global _switch_holders, _switch_found
    with _switch_lock:
        if hold:
            if _switch_holders == 0:
                _switch_found = sys.getswitchinterval()
                sys.setswitchinterval(LIVE_SWITCH_S)
            _switch_holders += 1
        else:
            _switch_holders -= 1
            if _switch_holders == 0:
                sys.setswitchinterval(_switch_found)


class Pipeline:
    """A pipeline built from a `PipelineConfig`; `run()` it once. Its HTTP server reads it as a
    `streamlens.http.run_view.RunView`."""

    #: the live page shows this run's frames: they pass through this process (`preview`)
    shows_frames = True

    def __init__(self, config: PipelineConfig, *, sinks: list[Sink] | None = None,
                 first_seq: dict[str, int] | None = None, stats_extra: dict | None = None):
        """`sinks`: more sinks beside the file's (an embedding program's own); `first_seq`: the `seq`
        each stream's results start from (default 0): an engine restarted by its supervisor goes on
        past what its streams had already published (streamlens/scale); `stats_extra`: values added
        to every `stats` message (an engine's index and restarts)."""
        self.config = config
        self._extra_sinks = list(sinks or [])
        self._first_seq = dict(first_seq or {})
        self._stats_extra = dict(stats_extra or {})
        #: per stream: its analytics and their clock (made on its first frame), the next event's seq
        self._analytics: dict[str, tuple] = {}
        self._event_seq: dict[str, int] = {}
        self._secondary = None  # the secondary models (streamlens/secondary), when the file has some
        self._stop_sources = threading.Event()
        self._lock = threading.Lock()
        self._error: str | None = None
        self._interrupted = False
        self._aborted_at: float | None = None
        self._ran = False
        self._inbox = Channel(config.runtime.queue_size, "inbox")
        self._credits = Credits(file_credits(longest_gap(config.keyframes), config.detector.max_batch))
        self._credited = {s.name for s in config.sources if not s.live}
        self._collector = _CycleCollector() if config.tracker.motion == "mv" else None
        self._opening: list[Sink] = []  # sinks whose open() may wait (for subscribers): stop() ends it
        self.http_port: int | None = None  # where /metrics and /healthz listen, once running
        #: the live page's view of the run (streamlens/http/preview.py), when `runtime.http.page` is on
        self.preview = None
        self._engine: Engine | None = None
        self._sources: dict[str, Source] = {}
        self._lanes: dict[str, Lane] = {}
        self._schedules: dict[str, object] = {}
        #: the live streams' shared keyframe schedule (None: none live, or `keyframes.shared: false`)
        self._chooser = build_chooser(config.keyframes) if any(s.live for s in config.sources) else None
        self._out: FanOut | None = None  # every sink, once running
        self._finished = threading.Event()  # set when run() has returned
        self._ends_lock = threading.Lock()  # a stream's last stats and its eos, against the periodic stats
        self.stats = {s.name: StreamStats(s.name, s.display_uri) for s in config.sources}
        live = [s.name for s in config.sources if s.live]
        #: the budget controller, for the live streams (None: none live, or `runtime.control: false`)
        self.controller = (BudgetController(config.runtime.budget_ms, live, max_stretch=config.runtime.max_stretch,
                                            keyframe_wait=self._chooser is not None)
                           if live and config.runtime.control else None)

    @classmethod
    def from_yaml(cls, path: str | Path, **kwargs) -> Pipeline:
        """Load and validate a pipeline file (raises `ConfigError`), then build the pipeline."""
        return cls(load_pipeline(path), **kwargs)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, timeout: float | None = None) -> None:
        """End a run still going on another thread (as `abort()` does: sinks flush and close) and
        wait for it to return, at most `timeout` seconds (None: `ABORT_JOIN_S` and the sinks' grace).
        Nothing to do before `run()` or after it has returned; safe to call more than once."""
        if not self._ran or self._finished.is_set():
            return
        self.abort()
        self._finished.wait(ABORT_JOIN_S + ABORT_SINK_GRACE_S if timeout is None else timeout)

    # -- control ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Graceful stop: sources end now; what they produced is still processed and written."""
        self._interrupted = True
        self._stop_sources.set()
        for sink in self._opening:
            sink.interrupt_open()

    @property
    def stopping(self) -> bool:
        return self._stop_sources.is_set()

    def queue_depth(self, stream: str) -> int:
        """Frames of `stream` waiting for the engine."""
        return self._inbox.depth(stream)

    def endpoints(self) -> dict[str, str]:
        """Where the running pipeline's zmq sinks listen, by their key path (`{"sinks[1]": "tcp://0.0.0.0:40213"}`);
        empty until they are open."""
        sinks = self._out.sinks if self._out is not None else []
        return {s.where: s.endpoint for s in sinks if s.where and isinstance(getattr(s, "endpoint", None), str)}

    def secondary_stats(self) -> dict:
        """Per `secondary` entry: looks answered (`calls`), tracks looked at, looks per track, crops
        computed and found in the cache, its hit rate, mean batch, ms per computed crop, crops dropped;
        and under `cache` the cache's own counters. Empty without secondary models."""
        stage = self._secondary
        if stage is None:
            return {}
        out = stage.stats()
        if stage.cache is not None:  # and the values found there that this version cannot read
            out["cache"] = {**stage.cache.stats(), "foreign": stage.foreign}
        return out

    def embedding(self, stream: str, track: int, name: str | None = None):
        """The embedding kept for `track` of `stream` by the `embed` entry `name` (default: the
        first), a unit vector, or None; see streamlens/secondary."""
        return None if self._secondary is None else self._secondary.embedding(stream, track, name)

    def control_of(self, stream: str) -> tuple[float, bool, float] | None:
        """The budget controller's hold on `stream`: (interval stretch, whether keyframes wait for
        their detections, share of frames shed); None where no controller watches it."""
        control = self.controller
        if control is None or stream not in control.shedders:
            return None
        return control.stretch, control.wait, control.shedders[stream].fraction

    def abort(self) -> None:
        """Immediate stop: frames not yet processed are dropped, a detector batch in hand is not
        waited for, a sink blocked in a write is interrupted; sinks still flush and close."""
        if self._aborted_at is None:
            self._aborted_at = time.monotonic()
        self.stop()
        self._credits.close()
        self._inbox.close(discard=True)
        if self._out is not None:
            self._out.interrupt()

    def _fail(self, error: BaseException) -> None:
        line = str(error) if isinstance(error, StreamlensError) else f"{type(error).__name__}: {error}"
        with self._lock:
            if self._error is None:
                self._error = line
                if not isinstance(error, StreamlensError):
                    log.debug("unexpected error", exc_info=error)
        self._stop_sources.set()

    # -- running ------------------------------------------------------------------------------

    def run(self, on_tick: Callable[[Pipeline], None] | None = None, tick_s: float = 0.25,
            stats_every_s: float = 1.0) -> RunReport:
        """Run to the end of every stream, a stop, or an error. Raises `StreamlensError` when a
        node cannot be built (nothing has run then); otherwise returns a `RunReport`."""
        if self._ran:
            raise StreamlensError("a Pipeline runs once; build a new one")
        self._ran = True
        try:
            return self._run(on_tick, tick_s, stats_every_s)
        finally:
            self._finished.set()

    def _run(self, on_tick, tick_s: float, stats_every_s: float) -> RunReport:
        started = time.monotonic()
        sources, detector, sinks, http = self._build()
        live = any(s.live for s in self.config.sources)
        if live:
            _live_switch_interval(hold=True)
        self._sources = {src.name: src for src in sources}
        threads: list[threading.Thread] = []
        try:
            threads = self._start(sources, detector, sinks)
            next_stats = time.monotonic() + stats_every_s
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(tick_s / len(threads))
                self._refresh_drops()
                if self._aborted_at is not None and time.monotonic() - self._aborted_at > ABORT_SINK_GRACE_S:
                    self._out.close_queues()  # the engine may be stuck putting into one
                if time.monotonic() >= next_stats:
                    next_stats += stats_every_s
                    self._control()
                    self._publish_stats()
                if on_tick is not None:
                    on_tick(self)
        finally:
            if any(t.is_alive() for t in threads):
                # the loop above ended by an exception (Ctrl-C in an embedding program, a failing
                # `on_tick`): stop every node and let the sinks close before the detector goes away
                # under a thread still running it
                self.abort()
                engine = next((t for t in threads if t.name == "engine"), None)
                if engine is not None:
                    engine.join(ABORT_SINK_GRACE_S)
                if self._out is not None:
                    self._out.close_queues()
                deadline = time.monotonic() + ABORT_JOIN_S
                for t in threads:
                    t.join(max(0.0, deadline - time.monotonic()))
            if live:
                _live_switch_interval(hold=False)
            self._stop_sources.set()
            for src in sources:
                src.close()
            worker = self._engine.worker if self._engine is not None else None
            if worker is not None and worker.alive:  # aborted inside a batch: it ends with the batch
                worker.join(ABORT_JOIN_S)
            if worker is not None and worker.alive:
                # closing the model under the thread that runs it would crash the process
                log.debug("the detector is still inside a batch; it is left to end by itself")
            else:
                detector.close()
            if self._secondary is not None:
                self._secondary.close()
            if http is not None:
                http.close()
        self._refresh_drops()
        status = "failed" if self._error else "interrupted" if self._interrupted else "done"
        control = self.controller
        losses = {}
        for sink in self._out.sinks if self._out is not None else []:
            lost = sum(sink.drops().values())
            if lost:
                losses[f"{sink.where} ({sink.name})" if sink.where else f"{sink.name} sink"] = lost
        return RunReport(status, self._error, time.monotonic() - started, list(self.stats.values()),
                         list(control.actions) if control else [], control.level if control else 0,
                         control.steps if control else 0, losses, self.secondary_stats())

    def _on_source_state(self, name: str, state: str) -> None:
        st = self.stats[name]
        if st.state not in ENDED_STATES:
            st.state = state

    def _refresh_drops(self) -> None:
        """What each stream lost, by cause: packets the decoder rejected (`corrupt`), frames a decode
        worker dropped (`decoder`), pictures refused (`refused`: larger than `max_pixels`, or no room
        in shared memory for them), the oldest frames of a full inbox (`inbox`), frames too old for
        the source's reader or the engine (`stale`: past the source's `max_staleness_ms`, or past the
        budget controller's `max_wait_s`: they could no longer be published within the budget), and
        frames the budget controller gave up (`shed`). `dropped` is every frame lost before
        publication: all of them but `corrupt`."""
        shedders = self.controller.shedders if self.controller else {}
        for st in self.stats.values():
            src, lane = self._sources.get(st.name), self._lanes.get(st.name)
            found = src.losses() if src is not None else {}
            lost = {"corrupt": found.get("corrupt", 0), "decoder": found.get("decoder", 0),
                    "refused": found.get("refused", 0), "inbox": self._inbox.dropped[st.name],
                    "stale": found.get("stale", 0) + (lane.stale_dropped + lane.late_from_source if lane else 0),
                    "shed": shedders[st.name].dropped if st.name in shedders else 0}
            st.lost = lost
            st.shed = lost["shed"]
            st.dropped = sum(n for cause, n in lost.items() if cause != "corrupt")
            st.deferred_keyframes = lane.deferred_keyframes if lane else 0
            st.discarded_detections = lane.discarded_detections if lane else 0

    def _control(self) -> None:
        """One step of the budget controller, applied by the engine (lanes, shared schedule, keyframe
        wait, batching) and, for live streams with schedules of their own, to those schedules."""
        control = self.controller
        if control is None:
            return
        # what the engine could not carry: every frame lost but those shed, and those that came too
        # late from their source (a decoder behind its clock: shedding after it would not help)
        control.tick({st.name: st.dropped - st.shed - getattr(self._lanes.get(st.name), "late_from_source", 0)
                      for st in self.stats.values() if st.name in control.shedders})
        if self._chooser is None:
            for name in control.shedders:
                if name in self._schedules:
                    self._schedules[name].stretch = control.stretch
        if self._engine is not None:
            self._engine.apply_control(control.stretch, control.wait, control.throughput, control.max_wait_s)

    def _publish_stats(self, streams: list[str] | None = None) -> None:
        """Hand each stream's `stats` (or those of `streams`) to the sinks that want it, never
        waiting on a busy one. Called about once a second for the streams still going, and for each
        stream just before its `eos` (under `_ends_lock`, so no stats message follows an `eos`)."""
        if self._out is None or not self._out.wants_stats:
            return
        if streams is None:
            # never waits: a stream's eos may be stuck in a full sink queue, which this thread must
            # stay free to close on an abort; these figures come again in a second
            if not self._ends_lock.acquire(blocking=False):
                return
            try:
                self._publish_stats([name for name, st in self.stats.items() if st.reason is None])
            finally:
                self._ends_lock.release()
            return
        reports = []
        secondary = self.secondary_stats() if self._secondary is not None else None  # the same for every stream
        for name in streams:
            st = self.stats[name]
            values = st.report(self._inbox.depth(st.name))
            if self.controller is not None and st.name in self.controller.shedders:
                values["control"] = self.controller.state(st.name)
            if secondary is not None:
                values["secondary"] = secondary
            values.update(self._stats_extra)
            source_stats = getattr(self._sources.get(st.name), "stats", None)
            if callable(source_stats):  # a live source: reconnects, last error (URL masked)
                values.update({k: v for k, v in source_stats().items() if k not in ("state", "dropped")})
            reports.append(StatsReport(st.name, values))
        self._out.publish_stats(reports)

    def results(self) -> Iterator[FrameResult | StreamEnd]:
        """Run in the background and yield every `FrameResult` and `StreamEnd` as it is made.

        Leaving the loop early stops the pipeline. Raises `StreamlensError` if the run failed.
        """
        out: queue.Queue = queue.Queue(maxsize=2 * self.config.runtime.queue_size)
        self._extra_sinks.append(_QueueSink(out))
        box: dict[str, object] = {}

        def target() -> None:
            try:
                box["report"] = self.run()
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = e
            finally:
                out.put(_END)

        worker = threading.Thread(target=target, name="streamlens-run", daemon=True)
        worker.start()
        try:
            while (item := out.get()) is not _END:
                yield item
        finally:
            if worker.is_alive():
                self.abort()
                while worker.is_alive():  # keep the queue sink from blocking while it ends
                    try:
                        out.get(timeout=0.1)
                    except queue.Empty:
                        pass
            worker.join()
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        report = box["report"]
        if report.status == "failed":  # type: ignore[union-attr]
            raise StreamlensError(report.error)  # type: ignore[union-attr]

    def _build(self) -> tuple[list[Source], object, list[Sink], MetricsServer | None]:
        """Check what can be checked, then make the sources and the detector, start the HTTP
        server, and open the sinks last, so that nothing (a JSONL file of the last run) is truncated
        before everything that can fail at start has been tried. A failure closes what was made."""
        cfg = self.config
        problems = preflight_problems(cfg)
        if problems:
            raise ConfigError(problems)
        built: list = []
        try:
            mvs = cfg.tracker.motion == "mv"
            sources = []
            for s in cfg.sources:
                sources.append(build_source(s, export_mvs=mvs))
                built.append(sources[-1])
            for src in sources:
                self.stats[src.name].total = src.total_frames
                if hasattr(src, "on_state"):
                    src.on_state = self._on_source_state
            detector = build_detector(cfg.detector)
            built.append(detector)
            if cfg.secondary:
                from ..secondary.cache import build_cache
                from ..secondary.stage import SecondaryStage

                cache = cfg.runtime.cache
                self._secondary = SecondaryStage(cfg.secondary, build_cache(cache.items, cache.redis, cache.ttl_s))
                built.append(self._secondary)
            http = None
            if cfg.runtime.http_port is not None:
                http = MetricsServer(self, cfg.runtime.http_host, cfg.runtime.http_port)
                http.start()
                built.append(http)
                self.http_port = http.port
            fps = {s.name: s.fps for s in sources}  # every stream, its rate None where unknown
            sinks = [build_sink(s, fps, where=f"sinks[{i}]") for i, s in enumerate(cfg.sinks)] + self._extra_sinks
            if http is not None and cfg.runtime.http.page:
                from ..http.preview import PreviewSink

                self.preview = PreviewSink()  # what the live page shows: newest frames, results, events
                sinks.append(self.preview)
            for sink in sinks:
                self._opening = [sink]
                if self._stop_sources.is_set():  # stopped already: open, but wait for nothing
                    sink.interrupt_open()
                sink.open()
                built.append(sink)
            self._opening = []
        except BaseException:
            self._opening = []
            for thing in reversed(built):
                try:
                    thing.close()
                except Exception:  # noqa: BLE001 - the first error is the one to report
                    log.debug("closing after a failed start", exc_info=True)
            raise
        return sources, detector, sinks, http

    def _start(self, sources, detector, sinks) -> list[threading.Thread]:
        cfg = self.config
        self._out = FanOut(sinks, cfg.runtime.queue_size, on_published=self._on_published,
                           on_error=self._sink_failed, on_close_error=self._fail)
        threads = self._out.threads()
        fps = {src.name: src.fps for src in sources}
        lanes = [Lane(s.name, build_tracker(cfg.tracker, fps.get(s.name), detector_conf=cfg.detector.conf,
                                            adaptive=cfg.keyframes.adaptive), s.live, longest_gap(cfg.keyframes),
                      max_staleness_s=s.max_staleness_ms / 1000 if s.max_staleness_ms else None,
                      period_s=1 / (fps.get(s.name) or 30.0))
                 for s in cfg.sources]
        for lane in lanes:
            lane.seq = self._first_seq.get(lane.name, 0)
        self._lanes = {lane.name: lane for lane in lanes}
        if self._secondary is not None:
            self._secondary.start()
        threads.append(threading.Thread(target=self._run_engine, args=(detector, lanes), name="engine",
                                        daemon=True))
        by_name = {c.name: c for c in cfg.sources}
        offsets = stagger_offsets(cfg.keyframes.interval, len(sources))
        # a live stream of the shared schedule only tells scene cuts here: the engine chooses its keyframes
        self._schedules = {src.name: SceneCutDetector() if self._chooser is not None and by_name[src.name].live
                           else build_scheduler(cfg.keyframes, off) for src, off in zip(sources, offsets)}
        prepare = detector.prepare if getattr(detector, "prepare_ahead", False) else None
        shedders = self.controller.shedders if self.controller else {}
        threads += [threading.Thread(target=self._run_source, name=f"source-{src.name}", daemon=True, args=(
                        src, by_name[src.name], Admission(lane, self._schedules[src.name], prepare,
                                                          getattr(shedders.get(src.name), "drop", None),
                                                          self._stop_sources)))
                    for src, lane in zip(sources, lanes)]
        for t in threads:
            t.start()
        return threads

    def _run_source(self, source: Source, cfg: SourceConfig, admit: Admission) -> None:
        """Decode, admit (graph/admit.py: shedding, the keyframe decision, work made ahead) and queue.

        What goes wrong here is this stream's alone: it ends with reason `error` and one line naming
        it, the other streams go on, and the run exits non-zero at its end (`RunReport.incomplete`).
        A camera never gets here for its own trouble: it retries (sources/live.py)."""
        produced, reason, error = 0, "end", None
        credited = source.name in self._credited
        try:
            for frame in source.frames(self._stop_sources):
                if not admit(frame):
                    continue
                if credited and not self._credits.acquire(source.name):
                    break  # aborted: the engine gives back no more credits
                frame.timings["_queued"] = time.perf_counter()
                if not self._inbox.put(frame, key=source.name, drop_oldest=cfg.live):
                    break
                produced += 1
        except BaseException as e:  # noqa: BLE001 - any failure ends this stream, and only it
            reason = "error"
            error = str(e) if isinstance(e, StreamlensError) else f"{type(e).__name__}: {e}"
            log.warning("%s: %s; the other streams go on", source.name, error,
                        exc_info=None if isinstance(e, StreamlensError) else e)
        finally:
            source.close()
            if reason == "end" and self._stop_sources.is_set():
                reason = "stopped"
            elif reason == "end" and source.incomplete:
                # the other streams go on; the run exits non-zero and names this input (RunReport.incomplete)
                reason, error = "truncated", source.incomplete
            self._inbox.put(EndOfStream(source.name, produced, reason, error), key=source.name)

    def _run_engine(self, detector, lanes: list[Lane]) -> None:
        cfg = self.config
        # detections come back on a channel of their own, which the engine waits on with the inbox;
        # they never wait for room: their number is bounded by the keyframes in flight
        detections = Channel(1 << 20, "detections", share=self._inbox)
        live = any(s.live for s in cfg.sources)
        worker = DetectWorker(detector, detections.put,
                              max_batch=cfg.detector.max_batch, max_wait_ms=cfg.detector.max_wait_ms,
                              budget_ms=cfg.detector.budget_ms if live else None,
                              low_priority=live and not getattr(detector, "prepare_ahead", False))
        budget = cfg.detector.budget_ms
        self._engine = engine = Engine(self._inbox, detections, lanes, worker, self._publish,
                                       late_after_s=budget / 1000 if budget else float("inf"),
                                       on_detected=lambda done: self.stats[done.frame.stream].detected(
                                           done.batch_ms, done.detect_ms), chooser=self._chooser,
                                       on_keyframe=self._secondary.offer if self._secondary else None)
        try:
            engine.run()
        except BaseException as e:  # noqa: BLE001
            self._fail(e)
        finally:
            self._inbox.close(discard=True)  # sources blocked on a full inbox wake up and end,
            self._credits.close()  # and those waiting for a credit: frames discarded give none back
            reason = "error" if self._error else "stopped"
            for lane in engine.open_streams():
                self._publish(StreamEnd(lane.name, lane.seq, lane.seq, reason))
            self._out.close()

    def _publish(self, item: FrameResult | StreamEnd) -> None:
        st = self.stats[item.stream if isinstance(item, StreamEnd) else item.frame.stream]
        if isinstance(item, FrameResult):
            item.frame.timings["total"] = (time.monotonic() - item.frame.clock) * 1000
            st.count(item)
            if st.name in self._credited:
                self._credits.release(st.name)
            if self._collector is not None:
                self._collector.published()
            embeddings = self._secondary.apply(item) if self._secondary is not None else ()
            events = self._analyse(item) if self.config.analytics is not None else ()
            self._out.publish(item)
            for event in events:
                self._out.publish(event)
            for embedding in embeddings:
                self._out.publish(embedding)
            return
        with self._ends_lock:
            self._refresh_drops()
            capped = any(s.max_fps for s in self.config.sources if s.name == st.name)
            item.lost, item.expected = dict(st.lost), None if capped else st.total  # a cap delivers fewer
            st.reason, st.detail = item.reason, item.detail
            st.state = {"end": "ended"}.get(item.reason, item.reason)
            st.ended = time.monotonic()
            shots = self._analytics.get(st.name, (None, None, None))[2]
            if shots is not None:
                shots.forget()
            if self._secondary is not None:
                self._secondary.stream_ended(st.name)
            self._publish_stats([st.name])  # the stream's last figures, before its eos
            self._out.publish(item)

    def _analyse(self, item: FrameResult) -> list[Event]:
        """Run the stream's analytics on `item` (its zones, speeds and counts go into its message);
        the events it made, numbered by the stream's own event `seq`."""
        frame = item.frame
        if frame.stream not in self._analytics:
            self._analytics[frame.stream] = self._stream_analytics(frame)
        analytics, clock, shots = self._analytics[frame.stream]
        if analytics is None:
            return []
        det = item.detections
        ids = det.tracker_id if det.tracker_id is not None else np.full(len(det), -1)
        labels = det.data.get("class_name")
        labels = labels if labels is not None else [str(c) for c in det.class_id]
        scores = det.confidence if det.confidence is not None else np.ones(len(det))
        item.analytics = found = analytics.update(clock(frame), det.xyxy, ids, labels, scores, item.attributes)
        if shots is not None:
            for i in found.best:
                if shots.wants(str(labels[i])):
                    shots.seen(int(ids[i]), frame, det.xyxy[i], det, found)
        events = []
        for body in found.events:
            seq = self._event_seq.get(frame.stream, 0)
            self._event_seq[frame.stream] = seq + 1
            shot = None if shots is None else shots.take(body, seq, frame, det, found)
            events.append(Event(frame.stream, seq, body, item, shot))
        return events

    def _stream_analytics(self, frame) -> tuple:
        """A stream's analytics (None when no rule applies to it), their clock, and its snapshots
        (None when not asked for), made on its first frame."""
        cfg = self.config.analytics
        analytics = build_stream_analytics(cfg, frame.stream, frame.width, frame.height)
        shots = None
        if analytics is not None and cfg.snapshots is not None:
            draw = None
            if cfg.snapshots.kind == "frame":
                from ..sinks.draw import FrameAnnotator

                annotator = FrameAnnotator((frame.width, frame.height))
                draw = annotator.annotate
            shots = Snapshots(cfg.snapshots, frame.stream, draw)
        return analytics, MediaClock(), shots

    def _sink_failed(self, error: BaseException) -> None:
        """A sink could not write: the run ends with its error, and frames not yet processed are dropped."""
        self._fail(error)
        self._inbox.close(discard=True)

    def _on_published(self, item: FrameResult, publish_ms: float) -> None:
        """Every sink has published `item`, `publish_ms` after it was handed to them."""
        total_ms = (time.monotonic() - item.frame.clock) * 1000
        self.stats[item.frame.stream].published(item, publish_ms, total_ms)
        if self.controller is not None:
            self.controller.observe(item.frame.stream, total_ms)
