"""`runtime.workers: N`: the streams of one pipeline file over N engines, supervised.

The `streamlens run` process becomes the supervisor. It splits the sources over N engines in the
file's order, round robin (a stream stays in one engine, so its `seq` stays gapless; the streams of
`reid.across` go to one engine together, whose reid stage keeps their global_ids: policy.py `deal`), and starts
each engine (engine.py), each with its own detector: a process of this machine, or with
`runtime.cluster` (`--cluster ADDRESS`) a Ray actor placed by the cluster (ray.py). Subscribers and
the rest of the world see one pipeline:

- each zmq sink's endpoint is bound once, here: every engine publishes its share on a socket of
  its own (`ipc://` here, `tcp://` on its node in a cluster), and a forwarder thread here joins
  them (pub: XSUB to XPUB, subscriptions passed upstream, a slow subscriber dropped for alone as
  before; push: PULL to PUSH, each message waiting for a consumer at most the sink's
  `send_timeout_s`). CurveZMQ applies on the endpoint bound here. Frames never cross Ray's
  object store: only results (and the sinks' JPEG frames) travel, over ZeroMQ;
- each jsonl file, mqtt client and webhook queue is written here, from what the engines push to
  it (nothing dropped on the way; an event's snapshot travels as its third part): one broker
  connection, one availability topic and one cooldown per rule for the whole pipeline;
- video sinks stay in the engines (they need the pixels): one file per stream as before; a path
  without `{stream}` gives the first source's stream `path` itself and the others
  `<stem>-<stream><suffix>`; so do rtsp sinks, each engine publishing its own streams;
- `/metrics`, `/healthz` and the live page are served here, for every stream: the page's frames,
  results and events are asked of the engine that has them when a viewer wants them
  (preview.py); the progress display and the summary show every stream; the budget controller's
  actions are listed per engine.

An engine that dies (killed, crashed, its node lost) is started again with its live streams,
whose `seq` goes on past the last one published (a subscriber sees a gap, never a repeat): exactly
for a process, which marks it in shared memory; for an actor, past the last figure it reported
plus what the stream could have published since; it is started only once every forwarder has
forwarded what the dead engine had sent (so its old messages never come after the new ones, even
on a starved machine). The wait before a restart backs off: 1 s after
the first death, doubling at each death up to 30 s, and back to 1 s once the engine has run for
a minute. A file it was reading ends with reason `error` (started again it would repeat its
output); the other streams go on and the run exits 1 at its end, naming it. Each restart is
logged once and counted: `Supervisor.restarts` and `engine_restarts` (per engine), in every
`stats` message of the engine's streams (`engine`, `engine_restarts`) and in /metrics
(`streamlens_engine_restarts_total{engine}`). An engine process is not a daemon, so that it can
start its cameras' decode workers; it never outlives the supervisor all the same: it ends when
the supervisor's pipe closes, and a dead engine's decode workers end with it (their lifeline) and
its frame rings are removed here (`remove_rings_of`). Ctrl-C ends every engine in order (the
supervisor tells them; they ignore the terminal's signal). Figures (/metrics counters too) of a
restarted engine's streams start again from zero, as a Prometheus counter reset.

A sink written here that fails (a jsonl file on a full disk, say) ends the run as it would with
one engine: one line naming the sink, engines told to stop, exit 1. Its forwarder goes on taking
what the engines push and drops it, so that no engine blocks on it; every forwarder is finished,
in order, even when one of them fails.

Here: the `Supervisor` itself. policy.py says how many engines and when to restart one;
engine_config.py makes each engine's typed config; processes.py (or ray.py) starts and watches the
engines; forwarder.py joins their outputs.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..config import PipelineConfig, SourceConfig, preflight_problems
from ..errors import ConfigError
from ..frame import StreamEnd
from ..graph.run.process import release_heap, settle_heap
from ..graph.run.stats import RunReport, StreamStats
from .engine import EngineSpec, Snapshot
from .changes import SupervisedChanges
from .figures import losses_as_filed, merge_counters, merge_losses, merge_secondary
from .engine_config import engine_config
from .forwarder import Forwarder
from .policy import END_WAIT_S, deal, ladder_floors, restart_delay, supervised, to_start, worker_count
from .preview import EnginePreviews
from .processes import Processes

log = logging.getLogger("streamlens.scale")

#: an engine's snapshot older than this says nothing of its overload rung (`Supervisor._share_ladder`)
LADDER_STALE_S = 3.0


def runner_for(config: PipelineConfig, *, log_level: int = logging.WARNING):
    """What runs `config`: a `Supervisor` when it asks for several engines or a cluster, else one
    `Pipeline`. Both `run()`, `stop()` and `abort()` alike."""
    if not supervised(config):
        from ..graph.run.pipeline import Pipeline

        return Pipeline(config)
    return Supervisor(config, log_level=log_level)


@dataclass
class _Engine:
    """One engine and what the supervisor knows of it."""

    index: int
    streams: list[str]  # names
    sources: list[SourceConfig]  # theirs, in the same order
    handle: Any = None  # the launcher's: a process and its pipes, or a Ray actor and its calls
    running: bool = False  # started and not yet gone
    snapshot: Snapshot | None = None
    snapshot_at: float = 0.0  # time.monotonic() when it came
    report: RunReport | None = None
    failed: str | None = None
    restart_at: float | None = None
    first_seq: dict[str, int] = field(default_factory=dict)
    started_at: float = 0.0  # time.monotonic() at its last start
    died_at: float = 0.0  # time.monotonic() when its death was seen
    restarts: int = 0
    restart_delay: float = 0.0  # the last wait before a restart (0: none yet, or reset)
    floor: int = 0  # the overload rung it was last told to hold at least (`_share_ladder`)
    #: while running: "loading" (not built yet), "built" (it said "ready" and waits for "go") or
    #: "going" (its streams run; an actor's from the start); see `_start_line`
    start: str = "going"


class Supervisor(SupervisedChanges):
    """Runs `config` over `worker_count` engines;
    `run()` it once, `stop()` and `abort()` as a `Pipeline`. It offers what the progress display
    and `/metrics` read of a pipeline: `stats`, `stopping`, `controller`, `queue_depth`, `control_of`
    (a `streamlens.http.run_view.RunView`)."""

    def __init__(self, config: PipelineConfig, *, log_level: int = logging.WARNING):
        self.config = config
        self.controller = None  # each engine has its own: see control_of() and the report
        self.restarts = 0
        self._starting = True  # no engine has been told "go" yet (`_start_line`)
        self._thaw = False  # the heap frozen when the engines went is given back at the end (process.py)
        self.http_port: int | None = None
        #: the live page's view of the engines' frames (preview.py), made when the page is served
        self.preview: EnginePreviews | None = None
        self._preview_at: dict[int, str] = {}  # engine: where it answers the page
        self._log_level = log_level
        self._stopping = False
        self._dir = tempfile.mkdtemp(prefix="streamlens-")  # the engines' ipc sockets
        if config.runtime.cluster is not None:
            from .ray import RayActors

            try:
                self._launcher = RayActors(config.runtime.cluster)
            except BaseException:
                shutil.rmtree(self._dir, ignore_errors=True)
                raise
        else:
            self._launcher = Processes(self._dir)
        n = worker_count(config)
        self._engines = [_Engine(i, [s.name for s in part], part) for i, part in enumerate(deal(config, n))]
        #: every stream of the run, the file's then those added: replaced whole on a change, never the config
        self._listed: tuple[SourceConfig, ...] = tuple(config.sources)
        self._engine_of = {name: e for e in self._engines for name in e.streams}
        self._placeholders = {s.name: StreamStats(s.name, s.display_uri) for s in config.sources}
        self._ended_stats: dict[str, StreamStats] = {}
        self._forwarders: dict[str, Forwarder] = {}  # by the sink's key path
        self._error: str | None = None
        self._removed: set[str] = set()  # streams removed while running (never started again)
        self._lock = threading.Lock()  # the engines' streams, against streams added or removed meanwhile

    # -- what the display and /metrics read --------------------------------------------------

    @property
    def stats(self) -> dict[str, StreamStats]:
        merged = {}
        for s in self._listed:
            engine = self._engine_of[s.name]
            figures = ({st.name: st for st in engine.report.streams} if engine.report is not None else
                       engine.snapshot.stats if engine.snapshot is not None else {})
            merged[s.name] = self._ended_stats.get(s.name) or figures.get(s.name) or self._placeholders[s.name]
        return merged

    @property
    def stopping(self) -> bool:
        return self._stopping

    def source_configs(self) -> dict[str, SourceConfig]:
        """Every stream's source mapping by name (the file's and those added)."""
        return {s.name: s for s in self._listed}

    def queue_depth(self, stream: str) -> int:
        snapshot = self._engine_of[stream].snapshot
        return snapshot.depth.get(stream, 0) if snapshot is not None else 0

    def control_of(self, stream: str):
        snapshot = self._engine_of[stream].snapshot
        return snapshot.control.get(stream) if snapshot is not None else None

    def peer_refusals(self) -> dict[str, dict[str, int]]:
        """Peers each zmq sink's relay refused or disconnected, by key path and reason (wire/peers.py)."""
        return {where: refused for where, f in self._forwarders.items() if (refused := f.refusals())}

    def sink_losses(self) -> dict[str, int]:
        """Messages each sink could not deliver so far: the engines' (from their last snapshots: an
        engine started again counts from zero) and each forwarder's here, added up by the sink's entry."""
        parts = [self._as_filed(e.snapshot.sink_losses) for e in self._engines if e.snapshot is not None]
        return merge_losses(parts + [self._forwarder_losses()], keep_zero=True)

    def _forwarder_losses(self) -> dict[str, int]:
        """What each sink's forwarder here could not deliver, by the sink's entry."""
        return {f"{where} ({f.sink.type})": f.dropped for where, f in self._forwarders.items()}

    def _as_filed(self, losses: dict[str, int]) -> dict[str, int]:
        return losses_as_filed(losses, [sink.type for sink in self.config.sinks])

    def secondary_stats(self) -> dict:
        """The secondary models' figures of every engine as one run's (figures.py), from each
        engine's last snapshot (as each engine's `stats` messages give them)."""
        return merge_secondary([e.snapshot.secondary for e in self._engines if e.snapshot is not None])

    def segment_stats(self) -> dict:
        """The mask stages' counters of every engine added up (for /metrics; figures.py)."""
        return merge_counters([e.snapshot.segment for e in self._engines if e.snapshot is not None])

    # -- control ------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping = True
        self._tell("stop")

    def abort(self) -> None:
        self._stopping = True
        self._tell("abort")

    def _tell(self, order: str) -> None:
        for engine in self._engines:
            if engine.running:
                self._launcher.tell(engine, order)

    # -- running ------------------------------------------------------------------------------

    def run(self, on_tick: Callable[[Supervisor], None] | None = None, tick_s: float = 0.25) -> RunReport:
        started = time.monotonic()
        problems = preflight_problems(self.config)
        if problems:
            raise ConfigError(problems)
        http = None
        try:
            self._start_forwarders()
            if self.config.runtime.http_port is not None:
                from ..http.server import MetricsServer

                if self.config.runtime.http.page:
                    self.preview = EnginePreviews(self._preview_of, lambda: dict(self._preview_at),
                                                  self._launcher.keys)
                http = MetricsServer(self, self.config.runtime.http_host, self.config.runtime.http_port)
                http.start()
                self.http_port = http.port
            for engine in self._engines:
                try:
                    self._start(engine)
                except OSError as error:  # no processes or file descriptors left now: try again later
                    self._schedule_restart(engine, f"could not be started: {error}")
            while any(e.running or e.restart_at is not None for e in self._engines):
                self._watch(tick_s)
                if on_tick is not None:
                    on_tick(self)
        finally:
            if any(e.running for e in self._engines):  # ended by an exception: end the engines
                self.abort()
            self._end_engines()
            self._end_orphans()
            for where, forwarder in self._forwarders.items():  # each one, whatever the others do
                try:
                    forwarder.finish()
                except Exception as error:  # noqa: BLE001 - the first error is the one to report
                    log.debug("finishing %s", where, exc_info=True)
                    forwarder.error = forwarder.error or f"{where}: {error}"
                if forwarder.error is not None and self._error is None:
                    self._error = forwarder.error
            if http is not None:
                http.close()
            if self.preview is not None:
                self.preview.close()
            self._launcher.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            if self._thaw:  # what `_start_line` froze is the collector's again
                release_heap()
        return self._report(time.monotonic() - started)

    @property
    def engine_restarts(self) -> dict[int, int]:
        """Restarts so far, per engine (for /metrics)."""
        return {e.index: e.restarts for e in self._engines}

    def _preview_of(self, name: str) -> str | None:
        """Where the engine that has stream `name` answers the live page (None: not known yet)."""
        engine = self._engine_of.get(name)
        return self._preview_at.get(engine.index) if engine is not None else None

    def _start(self, engine: _Engine) -> None:
        with self._lock:
            spec = EngineSpec(engine.index, self._engine_config(engine), list(engine.streams),
                              dict(engine.first_seq), self._log_level, engine.restarts)
        if self.preview is not None:
            spec.preview = self._launcher.sink_endpoint(engine.index, "preview")
            if not self._launcher.remote:  # an ipc file: known before it is bound (an actor's: in its snapshot)
                self._preview_at[engine.index] = spec.preview
        spec.start_together = not self._launcher.remote  # an actor starts when placed
        engine.restart_at = None
        engine.floor = 0  # a new process holds none
        engine.start = "loading" if spec.start_together else "going"
        engine.started_at = time.monotonic()
        self._launcher.start(engine, spec)
        engine.running = True
        engine.snapshot = engine.report = None

    def _watch(self, tick_s: float) -> None:
        """Take in what the engines say for about `tick_s`; start again those that died."""
        for engine, kind, value in self._launcher.poll([e for e in self._engines if e.running], tick_s):
            if kind == "snapshot":
                engine.snapshot, engine.snapshot_at = value, time.monotonic()
                self._refused(value)
                if self._launcher.remote:
                    self._connect(engine)
            elif kind == "report":
                engine.report = value
            elif kind == "failed":
                engine.failed = value
                if self._error is None:
                    self._error = value
                self.stop()  # an engine that cannot start ends the run, as one process would
            elif kind == "gone":
                self._gone(engine, value)
            elif kind == "ready":
                engine.start = "built"
        self._start_line()
        self._share_ladder()
        for where, forwarder in self._forwarders.items():
            if forwarder.error is not None and self._error is None:
                self._error = forwarder.error  # a sink that fails ends the run, as with one engine
                log.debug("%s failed; stopping the engines", where)
                self.stop()
        for engine in self._engines:
            if engine.restart_at is not None and self._stopping:
                engine.restart_at = None
            elif engine.restart_at is not None and time.monotonic() >= engine.restart_at and self._drained(engine):
                try:
                    self._start(engine)
                except OSError as error:  # no processes or file descriptors left now: try again later
                    engine.running = False
                    self._schedule_restart(engine, f"could not be started again: {error}")

    def _start_line(self) -> None:
        """The engines of a run start their streams together (engine.py `EngineRun.run`): "go" to
        those built once every engine running is; one started again later goes at once."""
        going = to_start({e.index: e.start if e.running else "ended" for e in self._engines}, self._starting)
        if going and self._starting:  # built: what the run adds is what the collector should look at
            self._thaw = settle_heap()
        for engine in self._engines:
            if engine.index in going:
                log.debug("engine %d built%s: its streams start", engine.index,
                          " as every engine is" if self._starting else "")
                engine.start = "going"
                self._launcher.tell(engine, "go")
        self._starting = self._starting and not going

    def _connect(self, engine: _Engine) -> None:
        """An actor's sinks listen where its snapshot says: the forwarders join them there (and the
        live page asks it there)."""
        for where, endpoint in engine.snapshot.endpoints.items():
            if where == "preview":
                old = self._preview_at.get(engine.index)
                self._preview_at[engine.index] = endpoint
                if old not in (None, endpoint) and self.preview is not None:
                    self.preview.forget(old)
            forwarder = self._forwarders.get(where)
            if forwarder is not None:
                forwarder.join(engine.index, endpoint)  # bound on its node's address (ray.py)

    def _refused(self, snapshot: Snapshot) -> None:
        """Streams an engine could not add end with reason `error` and its line."""
        for name, line in snapshot.refused.items():
            if name not in self._ended_stats:
                st = self._ended_stats[name] = StreamStats(name, self._placeholders[name].uri)
                st.end("error", line)

    def _share_ladder(self) -> None:
        """Each running engine applies at least the highest rung of the overload ladder that the
        other engines of its machine have climbed on their own evidence (graph/overload/ladder.py:
        they share its cores, so one engine shedding while another takes what it freed left their
        streams 40 points apart); told when that changes. A snapshot older than `LADDER_STALE_S`
        (an engine stuck or gone) counts for nothing."""
        now = time.monotonic()
        fresh = {e.index: e for e in self._engines
                 if e.running and e.snapshot is not None and now - e.snapshot_at < LADDER_STALE_S}
        floors = ladder_floors({i: (e.snapshot.host, e.snapshot.level) for i, e in fresh.items()})
        for index, floor in floors.items():
            engine = fresh[index]
            if floor != engine.floor:
                engine.floor = floor
                self._launcher.tell(engine, ("floor", floor))

    def _gone(self, engine: _Engine, how: str | None) -> None:
        """`engine` has ended: after its report (`how` None), or died."""
        with self._lock:
            self._gone_locked(engine, how)

    def _gone_locked(self, engine: _Engine, how: str | None) -> None:
        engine.running = False
        if how is None or engine.report is not None or engine.failed is not None:
            return
        next_seq = self._launcher.next_seq(engine)
        live = [s.name for s in engine.sources
                if s.live and s.name not in self._removed and s.name not in self._ended_stats]
        for name in engine.streams:
            if name in live or name in self._ended_stats:
                continue
            st = (engine.snapshot.stats.get(name) if engine.snapshot else None) or self._placeholders[name]
            if name in self._removed and st.reason is None:
                st.reason = st.state = "removed"
            elif st.reason is None:  # a file: started again it would repeat its output (RunReport.incomplete names it)
                st.reason, st.state, st.detail = "error", "error", f"its engine {engine.index} died ({how})"
            self._ended_stats[name] = st
        if self._stopping or not live:
            return
        engine.first_seq = {name: next_seq.get(name, 0) for name in live}
        engine.sources = [s for s in engine.sources if s.name in live]
        engine.streams = live
        self._schedule_restart(engine, f"died ({how})")

    def _drained(self, engine: _Engine) -> bool:
        """Whether every forwarder has forwarded what `engine` sent before it died (it has had nothing
        left to read since): only then may its restart publish, so that a subscriber never sees the
        old engine's last messages after the new one's first (a `seq` going back)."""
        return all(f.caught_up_at > engine.died_at for f in self._forwarders.values())

    def _schedule_restart(self, engine: _Engine, what: str) -> None:
        """Start `engine` again after the next wait of its backoff; logged once, counted."""
        now = engine.died_at = time.monotonic()
        engine.restart_delay = restart_delay(engine.restart_delay, now - engine.started_at)
        engine.restart_at = now + engine.restart_delay
        engine.restarts += 1
        self.restarts += 1
        log.warning("engine %d (%s) %s; restarting it in %g s (restart %d)", engine.index, ", ".join(engine.streams),
                    what, engine.restart_delay, engine.restarts)

    def _end_engines(self) -> None:
        deadline = time.monotonic() + END_WAIT_S
        while any(e.running for e in self._engines) and time.monotonic() < deadline:
            self._watch(0.1)
        for engine in self._engines:
            if engine.running:
                log.warning("engine %d did not end in %g s; killed", engine.index, END_WAIT_S)
                self._launcher.kill(engine)
                engine.running = False

    def _end_orphans(self) -> None:
        """Streams whose engine ended the run without a report (stopped while it waited to start
        again, died while the run was stopping, or killed after `END_WAIT_S`) get their `eos` from
        here, reason `stopped`, `seq` past the last one their engine published: every stream ends
        once in every sink. A stream whose last snapshot says it had ended already gets none."""
        for engine in self._engines:
            if engine.report is not None or engine.failed is not None:  # a failed engine fails the run
                continue
            seqs = self._launcher.next_seq(engine)
            for name in engine.streams:
                if name in self._removed or name in self._ended_stats:
                    continue
                st = (engine.snapshot.stats.get(name) if engine.snapshot else None) or self._placeholders[name]
                if st.reason is not None:
                    continue
                st.end("stopped", f"its engine {engine.index} was not running when the run ended")
                self._ended_stats[name] = st
                end = StreamEnd(name, seqs.get(name, 0), seqs.get(name, 0), "stopped", dict(st.lost), detail=st.detail)
                for forwarder in self._forwarders.values():
                    forwarder.end(end)

    def _report(self, wall_s: float) -> RunReport:
        reports = [e.report for e in self._engines if e.report is not None]
        failed = [r.error for r in reports if r.status == "failed" and r.error]
        error = self._error or (failed[0] if failed else None)
        natural = all(e.report is not None and e.report.status == "done" for e in self._engines)
        status = "failed" if error else "interrupted" if self._stopping and not natural else "done"
        actions = [f"engine {e.index}: {a}" for e in self._engines if e.report for a in e.report.control_actions]
        losses = merge_losses([self._as_filed(r.sink_losses) for r in reports] + [self._forwarder_losses()])
        return RunReport(status, error, wall_s, list(self.stats.values()), actions,
                         max((r.control_level for r in reports), default=0), sum(r.control_steps for r in reports),
                         losses)

    # -- the engines' configs and the sinks' forwarders ---------------------------------------

    def _engine_config(self, engine: _Engine) -> PipelineConfig:
        """The config `engine` runs (see engine_config.py)."""
        return engine_config(self.config, engine.sources, len(self._engines),
                             lambda j: self._launcher.sink_endpoint(engine.index, j), self._launcher.remote)

    def _start_forwarders(self) -> None:
        for j, (where, sink) in enumerate(self.config.written()):
            if sink.type in ("video", "rtsp"):  # drawn and sent by the engines, which have the pixels
                continue
            forwarder = Forwarder(sink, where, self._launcher.keys)
            self._forwarders[f"sinks[{j}]"] = forwarder  # as the engines name their share; finished by run()
            if not self._launcher.remote:  # processes: their endpoints are known before they start
                for engine in self._engines:
                    forwarder.join(engine.index, self._launcher.sink_endpoint(engine.index, j))
            forwarder.start()


__all__ = ["Supervisor", "runner_for", "worker_count", "supervised", "restart_delay"]
