"""The runtime: it builds the nodes of a pipeline, owns their threads and queues, and ends them.

    source threads (one per stream: graph/admit.py run_source) --inbox--> engine thread
        engine (graph/engine.py) <--> detector thread (keyframes out, detections back)
        -> ResultRoute (graph/publish/route.py): the result stages in order, then the fan-out to the sinks
    the thread that called run(): the run's loop (`_loop`): budget controller, stats messages

Each node does one job, in its own module: admission (graph/admit.py), the engine (lanes, the
keyframe decision, tracking, order), the detector's batching (graph/schedule/batcher.py), the route
of a result and its stages (graph/publish/route.py, graph/publish/stages.py), the fan-out to the
sinks (graph/publish/fanout.py), the budget controller (graph/overload/control.py), loss accounting
(graph/run/losses.py), the `stats` and `eos` messages (graph/run/reports.py), the run's figures
(graph/run/stats.py), each stream and everything it has (graph/run/stream.py), streams added or
removed while running (graph/run/changes.py); graph/run/process.py holds what a run changes in the
whole process. This module wires them and owns their lifecycle (`_build`, `_start`, `_loop`,
`_close`):

- The inbox gives each stream its own share; a file source blocks when its share is full (nothing
  is lost), a live source drops its oldest frame (every drop counted).
- A file source holds a credit for every frame between its decoding and its publication
  (`file_credits`): however slow the detector, a file waits instead of filling the memory.
- Other threads reach what the engine thread owns through its mailbox (`Engine.post`,
  `Engine.control`): the controller's rung, and the stats' refresh, which run on its thread.
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

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ...config import PipelineConfig, load_pipeline, preflight_problems
from ...cpu import machine_idle, process_cpu_s
from ...detect import build_detector
from ...errors import ConfigError, StreamlensError
from ...frame import FrameResult, StreamEnd
from ...http.server import MetricsServer
from ...sinks import Sink, build_sink
from ...track import weak_floor
from ..channel import Channel, Credits, file_credits
from ..order import media_orders
from ..engine import Control, DetectWorker, Engine, Lane, Mail, engine_mailbox
from ..overload.control import BudgetController
from ..publish.build import Stages, build_stages
from ..publish.fanout import FanOut
from ..publish.route import ResultRoute
from ..schedule.chooser import build_chooser
from ..schedule.keyframes import longest_gap, stagger_offsets
from .changes import StreamChanges
from .losses import Losses
from .process import CycleCollector, live_switch_interval
from .reports import StatsReporter
from .results import QueueSink, results_of
from .stats import RunReport
from .stream import Stream, StreamSet
from .view import RunFigures

log = logging.getLogger("streamlens")

#: how long `run()` waits for its threads when it ends by an exception
ABORT_JOIN_S = 10.0
#: after `abort()`, how long the engine may wait for room in a stuck sink's queue before that queue
#: is closed (the sink then writes what it holds and closes; the engine ends)
ABORT_SINK_GRACE_S = 0.5


class Pipeline(RunFigures):
    """A pipeline built from a `PipelineConfig`; `run()` it once. Its HTTP server reads it as a
    `streamlens.http.run_view.RunView`."""

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
        self._stages = Stages()  # the result stages, once built
        self._stop_sources = threading.Event()
        self._lock = threading.Lock()
        self._error: str | None = None
        self._interrupted = False
        self._aborted_at: float | None = None
        self._ran = False
        self._inbox = Channel(config.runtime.queue_size, "inbox")
        self._mail = engine_mailbox(self._inbox)  # work posted to the engine thread (the controller's rung, stats)
        self._engine_thread: threading.Thread | None = None
        self._credits = Credits(file_credits(longest_gap(config.keyframes), config.detector.max_batch))
        self._orders = media_orders(config)  # files of a reid group: by media time (graph/order.py)
        self._opening: list[Sink] = []  # sinks whose open() may wait (for subscribers): stop() ends it
        self.http_port: int | None = None  # where /metrics and /healthz listen, once running
        #: the live page's view of the run (streamlens/http/preview.py), when `runtime.http.page` is on
        self.preview = None
        self._engine: Engine | None = None
        #: the run's streams, each the owner of its parts (graph/run/stream.py): the file's, then those added
        self.streams = StreamSet([Stream.listed(s) for s in config.sources])
        self._threads: list[threading.Thread] = []  # every thread of the run, added streams' too
        self._prepare = None  # the detector's `prepare`, when it makes a keyframe's input ahead
        self._changes = StreamChanges(self)
        self._losses: Losses | None = None  # every stream's losses by cause, once running
        self._reporter: StatsReporter | None = None  # stats and eos messages, once running
        #: the live streams' shared keyframe schedule (None: none live, or `keyframes.shared: false`)
        self._chooser = build_chooser(config.keyframes) if any(s.live for s in config.sources) else None
        self._out: FanOut | None = None  # every sink, once running
        self._finished = threading.Event()  # set when run() has returned
        live = [s.name for s in config.sources if s.live]
        #: the budget controller, for the live streams (None: none live, or `runtime.control: false`)
        self.controller = (BudgetController(config.runtime.budget_ms, live, max_stretch=config.runtime.max_stretch,
                                            keyframe_wait=self._chooser is not None, cpu=process_cpu_s,
                                            machine=machine_idle)
                           if live and config.runtime.control else None)
        #: the budget a keyframe published with its detections is read against (`_on_published`): the
        #: detector's, where the file sets one (a user who lets keyframes wait longer than the frames);
        #: None: every frame against `runtime.budget_ms`, also where every frame is a keyframe
        self._keyframe_budget_ms = (config.detector.budget_ms if "budget_ms" in config.detector.model_fields_set
                                    else None)

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
        self._halt_sources()
        for sink in self._opening:
            sink.interrupt_open()

    def _halt_sources(self) -> None:
        """Every source ends (what it produced is still processed), and the engine ends with its
        last stream even when the last one was removed (`Engine.hold_open`)."""
        self._stop_sources.set()
        for stream in self.streams:
            stream.stop.set()
        self._mail.put(Mail(lambda: self._engine is not None and self._engine.end_when_empty()), key="ending",
                       drop_oldest=True)

    def add_stream(self, source: dict, *, remote: bool = False) -> tuple[str, list[str]]:
        """Add a stream while running (`source`: one mapping of `sources`; `remote`: asked over HTTP): its
        name and warnings. Raises `ConfigError`, `StreamConflict` or `StreamLimit` (graph/run/changes.py)."""
        return self._changes.add(source, remote=remote)

    def remove_stream(self, name: str) -> None:
        """End stream `name` while running (its `eos`: reason `removed`). Raises `NoSuchStream` or
        `StreamConflict`; see graph/run/changes.py."""
        self._changes.remove(name)

    @property
    def stopping(self) -> bool:
        return self._stop_sources.is_set()

    # -- what StreamChanges asks (graph/run/changes.py StreamRun) ------------------------------------

    @property
    def running(self) -> bool:
        """Started (its engine thread runs) and not stopping: streams may be changed."""
        thread = self._engine_thread
        return not self.stopping and thread is not None and thread.is_alive()

    def open_stream(self, stream: Stream) -> None:
        stream.open(self.config, self._on_source_state)

    def post(self, fn: Callable[[], None], key: str) -> None:
        self._mail.put(Mail(fn), key=key)

    def close_source(self, stream: Stream) -> None:
        stream.source.close()

    def join_running(self, stream: Stream) -> None:
        """On the engine thread: `stream`'s parts made as the file's are, its lane in the engine, its
        rate told to the sinks, and its source thread started."""
        lane = self._join(stream, 0)
        for sink in self._out.sinks:  # a video sink encodes each stream at its own rate
            sink.stream_added(stream.name, stream.source.fps)
        self._engine.add_lane(lane)
        if self.stopping:  # stopped meanwhile: `_halt_sources` may not have seen this stream's stop
            stream.stop.set()
        self._threads.append(stream.start(self._inbox, self._credits))

    def _join(self, stream: Stream, offset: int) -> Lane:
        return stream.join(self.config, shared=self._chooser is not None, offset=offset, prepare=self._prepare,
                           controller=self.controller, seq=self._first_seq.get(stream.name, 0),
                           order=self._orders.get(stream.name))

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
        self._halt_sources()

    # -- running ------------------------------------------------------------------------------

    def run(self, on_tick: Callable[[Pipeline], None] | None = None, tick_s: float = 0.25,
            stats_every_s: float = 1.0, on_built: Callable[[], None] | None = None) -> RunReport:
        """Run to the end of every stream, a stop, or an error. Raises `StreamlensError` when a
        node cannot be built (nothing has run then); otherwise returns a `RunReport`. `on_built` is
        called once everything is built (sources open, the detector loaded, sinks open) and before
        any thread starts: an engine of several waits there for the others (scale/engine.py)."""
        if self._ran:
            raise StreamlensError("a Pipeline runs once; build a new one")
        self._ran = True
        try:
            return self._run(on_tick, tick_s, stats_every_s, on_built)
        finally:
            self._finished.set()

    def _run(self, on_tick, tick_s: float, stats_every_s: float, on_built=None) -> RunReport:
        started = time.monotonic()
        detector, sinks, http = self._build()
        if on_built is not None:  # it waits, and does not raise
            on_built()
        threads = self._threads
        try:
            with live_switch_interval(any(s.live for s in self.config.sources)):
                try:
                    self._start(detector, sinks)
                    self._loop(threads, on_tick, tick_s, stats_every_s)
                finally:
                    if any(t.is_alive() for t in threads):
                        self._end_threads(threads)
        finally:
            self._close(detector, http)
        if self._reporter is not None:
            self._reporter.refresh()
        status = "failed" if self._error else "interrupted" if self._interrupted else "done"
        control = self.controller
        losses = {where: lost for where, lost in self.sink_losses().items() if lost}
        return RunReport(status, self._error, time.monotonic() - started, list(self.stats.values()),
                         list(control.actions) if control else [], control.level if control else 0,
                         control.steps if control else 0, losses, self.secondary_stats(), self.segment_stats())

    def _loop(self, threads: list[threading.Thread], on_tick, tick_s: float, stats_every_s: float) -> None:
        """The run's loop, on the thread that called `run()`, until every thread has ended: losses, an
        abort's deadline for stuck sinks, the controller and the `stats` once a second, `on_tick`."""
        parts = max(1, round(stats_every_s / tick_s))
        part, next_stats, next_control = 0, time.monotonic() + stats_every_s / parts, time.monotonic() + stats_every_s
        while True:
            alive = next((t for t in threads if t.is_alive()), None)
            if alive is None:
                break
            alive.join(tick_s)  # one wait a turn, not one per thread: 100 wake-ups, each for the GIL, took seconds
            if self._engine_thread.is_alive():  # the stats' writer: the engine thread, then this one
                self._mail.put(Mail(self._reporter.refresh), key="refresh", drop_oldest=True)
            else:
                self._reporter.refresh()
            if self._aborted_at is not None and time.monotonic() - self._aborted_at > ABORT_SINK_GRACE_S:
                self._out.close_queues()  # the engine may be stuck putting into one
            now = time.monotonic()
            if now >= next_control:  # by the clock, not by turns: starved of the GIL, a turn took up to 5 s
                next_control = max(next_control + stats_every_s, now + stats_every_s / 2)
                self._control()
            if now >= next_stats:  # the streams' stats, spread over the second
                next_stats += stats_every_s / parts
                part = self._reporter.periodic(part, parts)
            if on_tick is not None:
                on_tick(self)

    def _end_threads(self, threads: list[threading.Thread]) -> None:
        """The run's loop ended by an exception (Ctrl-C in an embedding program, a failing
        `on_tick`): stop every node and let the sinks close before the detector goes away under a
        thread still running it."""
        self.abort()
        engine = next((t for t in threads if t.name == "engine"), None)
        if engine is not None:
            engine.join(ABORT_SINK_GRACE_S)
        if self._out is not None:
            self._out.close_queues()
        deadline = time.monotonic() + ABORT_JOIN_S
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _close(self, detector, http) -> None:
        """Close what `_build` made but the sinks (the engine's end closed those), and the sources
        of streams added since."""
        self._halt_sources()
        for stream in self.streams:  # those added since too
            if stream.source is not None:
                stream.source.close()
        worker = self._engine.worker if self._engine is not None else None
        if worker is not None and worker.alive:  # aborted inside a batch: it ends with the batch
            worker.join(ABORT_JOIN_S)
        if worker is not None and worker.alive:
            # closing the model under the thread that runs it would crash the process
            log.debug("the detector is still inside a batch; it is left to end by itself")
        else:
            detector.close()
        self._stages.close()
        if http is not None:
            http.close()

    def _on_source_state(self, name: str, state: str) -> None:
        """A live source's state, on its thread: posted to the stream's figures."""
        self.streams[name].stats.post_state(state)

    def _control(self) -> None:
        """One step of the budget controller; its rung goes to the engine's mailbox (a newer one
        replaces one not yet applied), and the engine applies it on its thread before its next input."""
        control = self.controller
        if control is not None:
            control.tick(*self._losses.for_controller(list(control.shedders)),
                         pace=self._chooser.pace() if self._chooser is not None else None)
            rungs = control.applied()  # its own rungs, or the other engines' floor (overload/ladder.py)
            self._mail.put(Control(control.stretches[rungs.stretch_index], rungs.wait, rungs.throughput,
                                   control.wait_limit_s),
                           key="control", drop_oldest=True)

    def results(self) -> Iterator[FrameResult | StreamEnd]:
        """Run in the background and yield every `FrameResult` and `StreamEnd` as it is made.

        Leaving the loop early stops the pipeline. Raises `StreamlensError` if the run failed.
        """
        out: queue.Queue = queue.Queue(maxsize=2 * self.config.runtime.queue_size)
        self._extra_sinks.append(QueueSink(out))
        yield from results_of(self, out)

    def _build(self) -> tuple[object, list[Sink], MetricsServer | None]:
        """Check what can be checked, then make the sources, the detector and the stages, start the HTTP
        server, and open the sinks last, so that nothing (a JSONL file of the last run) is truncated
        before everything that can fail at start has been tried. A failure closes what was made."""
        cfg = self.config
        problems = preflight_problems(cfg)
        if problems:
            raise ConfigError(problems)
        built: list = []
        try:
            for stream in self.streams:
                self.open_stream(stream)
                built.append(stream.source)
            detector = build_detector(cfg.detector, weak_floor(cfg.tracker))  # weak boxes: the tracker's alone
            built.append(detector)
            self._stages = build_stages(cfg, detector, self.streams, built)
            http = None
            if cfg.runtime.http_port is not None:
                http = MetricsServer(self, cfg.runtime.http_host, cfg.runtime.http_port)
                http.start()
                built.append(http)
                self.http_port = http.port
            fps = {s.name: s.source.fps for s in self.streams}  # every stream, its rate None where unknown
            sinks = [build_sink(s, fps, where=where) for where, s in cfg.written()] + self._extra_sinks
            if http is not None and cfg.runtime.http.page:
                from ...http.preview import PreviewSink

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
        return detector, sinks, http

    def _start(self, detector, sinks) -> None:
        """Make the fan-out, each stream's parts (graph/run/stream.py), the loss accounting and the route
        of the results, and start every thread: the queued sinks', the engine's and one per source."""
        cfg = self.config
        self._out = FanOut(sinks, cfg.runtime.queue_size, on_published=self._on_published,
                           on_error=self._sink_failed, on_close_error=self._fail)
        threads = self._threads
        threads += self._out.threads()
        streams = list(self.streams)
        self._prepare = detector.prepare if detector.prepare_ahead else None
        offsets = stagger_offsets(cfg.keyframes.interval, len(streams))
        lanes = [self._join(stream, offset) for stream, offset in zip(streams, offsets)]
        if self.controller:  # a rung for batching only if batches can grow
            self.controller.attach([], DetectWorker.per_call(detector, cfg.detector.max_batch) > 1)
        self._losses = Losses(self.streams, self._inbox)
        self._reporter = StatsReporter(
            self.streams, self._out, self._losses, capped={s.name for s in cfg.sources if s.max_fps},
            queue_depth=self._inbox.depth, controller=self.controller,
            model_stats=self._stages.figures if self._stages.running else None, extra=self._stats_extra)
        self._collector = CycleCollector() if cfg.tracker.motion == "mv" else None
        route = ResultRoute(self._stages.route, self._out, self.streams, self._reporter, credits=self._credits,
                            collector=self._collector)
        self._stages.start()
        self._engine_thread = threading.Thread(target=self._run_engine, args=(detector, lanes, route),
                                               name="engine", daemon=True)
        threads.append(self._engine_thread)
        if self._stop_sources.is_set():  # stopped while starting
            self._halt_sources()
        for t in threads:
            t.start()
        threads += [stream.start(self._inbox, self._credits) for stream in streams]

    def _run_engine(self, detector, lanes: list[Lane], route: ResultRoute) -> None:
        """The engine thread's body: the detector's worker, the engine, and at its end an `eos` for
        every stream still open, then the sinks' end."""
        cfg = self.config
        # detections come back on a channel of their own, which the engine waits on with the inbox;
        # they never wait for room: their number is bounded by the keyframes in flight
        detections = Channel(1 << 20, "detections", share=self._inbox)
        live = any(s.live for s in cfg.sources)
        worker = DetectWorker(detector, detections.put,
                              max_batch=cfg.detector.max_batch, max_wait_ms=cfg.detector.max_wait_ms,
                              budget_ms=cfg.detector.budget_ms if live else None,
                              low_priority=live and not detector.prepare_ahead)
        budget = cfg.detector.budget_ms
        self._engine = engine = Engine(self._inbox, detections, lanes, worker, route.publish,
                                       late_after_s=budget / 1000 if budget else float("inf"),
                                       on_detected=lambda done: self.streams[done.frame.stream].stats.detected(
                                           done.batch_ms, done.detect_ms), chooser=self._chooser,
                                       on_keyframe=route.offer, mail=self._mail, regions=cfg.detector)
        try:
            engine.run()
        except BaseException as e:  # noqa: BLE001
            self._fail(e)
        finally:
            self._inbox.close(discard=True)  # sources blocked on a full inbox wake up and end,
            self._credits.close()  # and those waiting for a credit: frames discarded give none back
            reason = "error" if self._error else "stopped"
            for lane in engine.open_streams():
                route.publish(StreamEnd(lane.name, lane.seq, lane.seq, reason))
            self._out.close()

    def _sink_failed(self, error: BaseException) -> None:
        """A sink could not write: the run ends with its error, and frames not yet processed are dropped."""
        self._fail(error)
        self._inbox.close(discard=True)

    def _on_published(self, item: FrameResult, publish_ms: float) -> None:
        """Every sink has published `item`, `publish_ms` after it was handed to them (on the thread of
        the last sink to write it): its latency, posted to the stream's figures and the controller."""
        total_ms = (time.monotonic() - item.frame.clock) * 1000
        self.streams[item.frame.stream].stats.post_published(item, publish_ms, total_ms)
        if self.controller is not None:  # a keyframe with its detections waited for them: its own budget
            own = self._keyframe_budget_ms if item.keyframe else None
            self.controller.observe(item.frame.stream, total_ms, own)
