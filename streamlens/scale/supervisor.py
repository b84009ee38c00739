"""`runtime.workers: N`: the streams of one pipeline file over N engines, supervised.

The `streamlens run` process becomes the supervisor. It splits the sources over N engines in the
file's order, round robin (a stream stays in one engine, so its `seq` stays gapless), and starts
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
  `<stem>-<stream><suffix>`;
- `/metrics` and `/healthz` are served here, for every stream; the progress display and the
  summary show every stream; the budget controller's actions are listed per engine.

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
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import queue
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import zmq

from ..config import PipelineConfig, preflight_problems
from ..errors import ConfigError
from ..frame import Snapshot as EventSnapshot
from ..graph.stats import RunReport, StreamStats
from ..sources.ring import remove_rings_of
from .engine import EngineSpec, Snapshot, engine_main

log = logging.getLogger("streamlens.scale")

#: how long after a death an engine is started again: the first wait, doubling at each death up to
#: the longest, and back to the first once an engine has run `HEALTHY_RUN_S` without dying
RESTART_DELAY_S = 1.0
RESTART_MAX_S = 30.0
HEALTHY_RUN_S = 60.0
#: once every engine has ended, how long a forwarder goes on until nothing more comes
DRAIN_IDLE_S = 0.3
#: how long the supervisor waits for an engine to end after telling it to
END_WAIT_S = 15.0
_POLL_MS = 100
#: the sinks written by the supervisor from what every engine pushes (one file, one MQTT client, one
#: webhook queue for the whole pipeline); zmq sinks are forwarded, video sinks stay in the engines
WRITTEN_HERE = ("jsonl", "mqtt", "webhook")


def restart_delay(last_s: float, ran_s: float) -> float:
    """The wait before an engine that died after running `ran_s` seconds is started again, when the
    wait before its last restart was `last_s` (0: none yet): the first wait, doubled at each death up
    to the longest, and the first again once it ran `HEALTHY_RUN_S`.

    Example:
        >>> [restart_delay(last, 5.0) for last in (0.0, 1.0, 2.0, 16.0, 30.0)]
        [1.0, 2.0, 4.0, 30.0, 30.0]
        >>> restart_delay(30.0, 61.0)
        1.0
    """
    if not last_s or ran_s >= HEALTHY_RUN_S:
        return RESTART_DELAY_S
    return min(RESTART_MAX_S, 2 * last_s)


def worker_count(config: PipelineConfig) -> int:
    """How many engines `runtime.workers` asks for, at most one per source (`auto`: one per two
    cores here; in a cluster, one per source)."""
    wanted = config.runtime.workers
    if wanted == "auto":
        wanted = len(config.sources) if config.runtime.cluster else max(1, (os.cpu_count() or 2) // 2)
    return max(1, min(int(wanted), len(config.sources)))


def supervised(config: PipelineConfig) -> bool:
    """Whether `config` runs under a `Supervisor` (several engines, or a cluster) rather than one `Pipeline`."""
    return worker_count(config) > 1 or config.runtime.cluster is not None


def runner_for(config: PipelineConfig, path, overrides: dict | None = None, *, log_level: int = logging.WARNING):
    """What runs `config` (loaded from `path` with `overrides`): a `Supervisor` when it asks for several
    engines or a cluster, else one `Pipeline`. Both `run()`, `stop()` and `abort()` alike."""
    if not supervised(config):
        from ..graph.runtime import Pipeline

        return Pipeline(config)
    from ..config import read_pipeline_tree

    return Supervisor(config, read_pipeline_tree(path, overrides), log_level=log_level)


@dataclass
class _Engine:
    """One engine and what the supervisor knows of it."""

    index: int
    streams: list[str]  # names
    sources: list[int]  # their places in the pipeline file
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


class _Processes:
    """Engines as processes of this machine, spoken to over pipes (see engine.py)."""

    remote = False

    def __init__(self, folder: str):
        self.folder = folder
        self.ctx = multiprocessing.get_context("spawn")

    def sink_endpoint(self, engine: int, sink: int) -> str:
        return f"ipc://{self.folder}/{engine}-{sink}"

    def start(self, engine: _Engine, spec: EngineSpec) -> None:
        orders_read, orders_write = self.ctx.Pipe(duplex=False)
        up_read, up_write = self.ctx.Pipe(duplex=False)
        marks = self.ctx.Array("q", [spec.first_seq.get(n, 0) - 1 for n in spec.streams], lock=False)
        # not a daemon: an engine starts its cameras' decode workers, and a daemon may start no process
        process = self.ctx.Process(target=engine_main, args=(spec, orders_read, up_write, marks),
                                   name=f"streamlens-engine-{engine.index}", daemon=False)
        try:
            process.start()
        finally:
            orders_read.close()
            up_write.close()
        engine.handle = (process, orders_write, up_read, marks)

    def tell(self, engine: _Engine, order: str) -> None:
        try:
            engine.handle[1].send(order)
        except (OSError, ValueError):  # it has ended
            pass

    def poll(self, engines: list[_Engine], timeout: float) -> list[tuple[_Engine, str, Any]]:
        """What the engines said within `timeout`: (engine, "snapshot" | "report" | "failed", value),
        and (engine, "gone", how) once one has ended (how: None after its report, else its death)."""
        by_pipe = {e.handle[2]: e for e in engines}
        events = []
        for pipe in multiprocessing.connection.wait(list(by_pipe), timeout=timeout) if by_pipe else []:
            engine = by_pipe[pipe]
            try:
                events.append((engine, *pipe.recv()))
            except (EOFError, OSError):  # the process has ended (or is ending): nothing more will come
                process = engine.handle[0]
                process.join(END_WAIT_S)
                how = (f"killed by signal {-process.exitcode}" if process.exitcode and process.exitcode < 0
                       else f"exit code {process.exitcode}")
                if process.exitcode is not None:
                    remove_rings_of(process.pid, tracked_here=True)  # what it could not remove itself
                self._close(engine)
                events.append((engine, "gone", how))
        if not by_pipe:
            time.sleep(timeout)
        return events

    def next_seq(self, engine: _Engine) -> dict[str, int]:
        marks = engine.handle[3] if engine.handle else None
        if marks is None:
            return dict(engine.first_seq)
        return {name: marks[j] + 1 for j, name in enumerate(engine.streams)}

    def kill(self, engine: _Engine) -> None:
        engine.handle[0].kill()

    def _close(self, engine: _Engine) -> None:
        process, orders, up, marks = engine.handle
        orders.close()
        up.close()
        engine.handle = (None, orders, up, marks)

    def close(self) -> None:
        pass


class Supervisor:
    """Runs `config` (from the tree `data`, as read from the file) over `worker_count` engines;
    `run()` it once, `stop()` and `abort()` as a `Pipeline`. It offers what the progress display
    and `/metrics` read of a pipeline: `stats`, `stopping`, `controller`, `queue_depth`, `control_of`
    (a `streamlens.http.run_view.RunView`)."""

    def __init__(self, config: PipelineConfig, data: dict, *, log_level: int = logging.WARNING):
        self.config = config
        self.controller = None  # each engine has its own: see control_of() and the report
        self.restarts = 0
        self.http_port: int | None = None
        self._data = data
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
            self._launcher = _Processes(self._dir)
        n = worker_count(config)
        self._engines = [_Engine(i, [s.name for s in config.sources[i::n]], list(range(i, len(config.sources), n)))
                         for i in range(n)]
        self._engine_of = {name: e for e in self._engines for name in e.streams}
        self._placeholders = {s.name: StreamStats(s.name, s.display_uri) for s in config.sources}
        self._ended_stats: dict[str, StreamStats] = {}
        self._forwarders: dict[str, _Forwarder] = {}  # by the sink's key path
        self._error: str | None = None

    # -- what the display and /metrics read --------------------------------------------------

    @property
    def stats(self) -> dict[str, StreamStats]:
        merged = {}
        for s in self.config.sources:
            engine = self._engine_of[s.name]
            figures = ({st.name: st for st in engine.report.streams} if engine.report is not None else
                       engine.snapshot.stats if engine.snapshot is not None else {})
            merged[s.name] = self._ended_stats.get(s.name) or figures.get(s.name) or self._placeholders[s.name]
        return merged

    @property
    def stopping(self) -> bool:
        return self._stopping

    def queue_depth(self, stream: str) -> int:
        snapshot = self._engine_of[stream].snapshot
        return snapshot.depth.get(stream, 0) if snapshot is not None else 0

    def control_of(self, stream: str):
        snapshot = self._engine_of[stream].snapshot
        return snapshot.control.get(stream) if snapshot is not None else None

    #: the live page's frames stay in the engines: the page a supervisor serves shows figures only
    preview = None
    shows_frames = False

    def secondary_stats(self) -> dict:
        """The secondary models run in the engines: their figures are in each engine's `stats`
        messages, not gathered here."""
        return {}

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
            self._launcher.close()
            shutil.rmtree(self._dir, ignore_errors=True)
        return self._report(time.monotonic() - started)

    @property
    def engine_restarts(self) -> dict[int, int]:
        """Restarts so far, per engine (for /metrics)."""
        return {e.index: e.restarts for e in self._engines}

    def _start(self, engine: _Engine) -> None:
        spec = EngineSpec(engine.index, str(self.config.path), self.config.display or str(self.config.path),
                          self._engine_tree(engine), list(engine.streams), dict(engine.first_seq), self._log_level,
                          engine.restarts)
        engine.restart_at = None
        engine.started_at = time.monotonic()
        self._launcher.start(engine, spec)
        engine.running = True
        engine.snapshot = engine.report = None

    def _watch(self, tick_s: float) -> None:
        """Take in what the engines say for about `tick_s`; start again those that died."""
        for engine, kind, value in self._launcher.poll([e for e in self._engines if e.running], tick_s):
            if kind == "snapshot":
                engine.snapshot, engine.snapshot_at = value, time.monotonic()
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

    def _connect(self, engine: _Engine) -> None:
        """An actor's sinks listen where its snapshot says: the forwarders join them there."""
        for where, endpoint in engine.snapshot.endpoints.items():
            forwarder = self._forwarders.get(where)
            if forwarder is not None:
                forwarder.join(engine.index, endpoint)  # bound on its node's address (ray.py)

    def _gone(self, engine: _Engine, how: str | None) -> None:
        """`engine` has ended: after its report (`how` None), or died."""
        engine.running = False
        if how is None or engine.report is not None or engine.failed is not None:
            return
        next_seq = self._launcher.next_seq(engine)
        live = [n for n, i in zip(engine.streams, engine.sources) if self.config.sources[i].live]
        for name in engine.streams:
            if name not in live:  # a file: started again it would repeat its output (RunReport.incomplete names it)
                st = (engine.snapshot.stats.get(name) if engine.snapshot else None) or self._placeholders[name]
                st.reason, st.state, st.detail = "error", "error", f"its engine {engine.index} died ({how})"
                self._ended_stats[name] = st
        if self._stopping or not live:
            return
        engine.first_seq = {name: next_seq.get(name, 0) for name in live}
        engine.sources = [i for n, i in zip(engine.streams, engine.sources) if n in live]
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

    def _report(self, wall_s: float) -> RunReport:
        reports = [e.report for e in self._engines if e.report is not None]
        failed = [r.error for r in reports if r.status == "failed" and r.error]
        error = self._error or (failed[0] if failed else None)
        natural = all(e.report is not None and e.report.status == "done" for e in self._engines)
        status = "failed" if error else "interrupted" if self._stopping and not natural else "done"
        actions = [f"engine {e.index}: {a}" for e in self._engines if e.report for a in e.report.control_actions]
        return RunReport(status, error, wall_s, list(self.stats.values()), actions,
                         max((r.control_level for r in reports), default=0), sum(r.control_steps for r in reports))

    # -- the engines' pipeline files and the sinks' forwarders --------------------------------

    def _engine_tree(self, engine: _Engine) -> dict:
        """The pipeline file's tree as `engine` runs it: its sources (named, as their names came
        from their places in the whole file), its sinks pointed at the supervisor, one worker."""
        data = dict(self._data)
        data["sources"] = [{**self._data["sources"][i], "name": self.config.sources[i].name} for i in engine.sources]
        runtime = {k: v for k, v in (self._data.get("runtime") or {}).items() if k not in ("http", "cluster")}
        data["runtime"] = {**runtime, "workers": 1}
        detector = dict(self._data.get("detector") or {})
        if not self._launcher.remote and detector.get("backend") == "onnx" and detector.get("threads") is None:
            # engines of one machine share its cores: onnxruntime's default (a thread per core) in each
            # would put every engine's detector on every core at once
            detector["threads"] = max(1, (os.cpu_count() or 1) // len(self._engines))
            data["detector"] = detector
        sinks = []
        for j, (raw, sink) in enumerate(zip(self._data.get("sinks") or [], self.config.sinks)):
            if sink.type == "zmq":
                raw = {k: v for k, v in raw.items() if k != "curve"}
                sinks.append({**raw, "endpoint": self._launcher.sink_endpoint(engine.index, j)})
            elif sink.type in WRITTEN_HERE:
                sinks.append({"type": "zmq", "mode": "push", "endpoint": self._launcher.sink_endpoint(engine.index, j)})
            else:
                path = sink.path
                if "{stream}" not in str(path) and self.config.sources[0].name not in engine.streams:
                    path = path.with_name(f"{path.stem}-{{stream}}{path.suffix}")
                sinks.append({**raw, "path": str(path)})
        data["sinks"] = sinks
        return data

    def _start_forwarders(self) -> None:
        for j, sink in enumerate(self.config.sinks):
            if sink.type == "video":
                continue
            forwarder = _Forwarder(sink, f"sinks[{j}]")
            self._forwarders[forwarder.where] = forwarder  # finished by run() whatever happens next
            if not self._launcher.remote:  # processes: their endpoints are known before they start
                for engine in self._engines:
                    forwarder.join(engine.index, self._launcher.sink_endpoint(engine.index, j))
            forwarder.start()


class _Relayed:
    """A message an engine pushed, as the `item` a sink written here is given: the snapshot an
    event carried as its third part, if any (the message itself is the sink's `message`)."""

    __slots__ = ("snapshot",)

    def __init__(self, parts: list[bytes], message: dict):
        self.snapshot = None
        shot = message.get("snapshot")
        if len(parts) > 2 and message.get("type") == "event" and isinstance(shot, dict):
            self.snapshot = EventSnapshot(parts[2], shot.get("kind", "crop"), shot.get("frame", -1), shot.get("path"))


class _Forwarder:
    """One sink of the file, fed by every engine: a zmq endpoint bound here, or a sink written here
    (jsonl, mqtt, webhook) from what the engines push."""

    def __init__(self, sink, where: str):
        self.sink, self.where = sink, where
        self.ctx = zmq.Context()
        self.dropped = 0
        #: the line that says why the sink written here failed (then what comes is dropped), or None
        self.error: str | None = None
        #: the last time (time.monotonic()) nothing was left to forward: whatever a dead engine had
        #: sent before then has been forwarded, and its restart may publish without its messages
        #: coming out interleaved with the old ones
        self.caught_up_at = 0.0
        self._auth = None
        self._sink = None  # a sink written here
        self._joined: dict[int, str] = {}  # engine -> the endpoint its share comes from
        self._joins: queue.SimpleQueue = queue.SimpleQueue()
        self._finishing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"forward-{where}", daemon=True)
        pub = sink.type == "zmq" and sink.mode == "pub"
        self.front = self.ctx.socket(zmq.XSUB if pub else zmq.PULL)
        self.back = None

    def join(self, engine: int, endpoint: str) -> None:
        """Take `engine`'s share from `endpoint` from now on (any thread; a new endpoint replaces its old one)."""
        self._joins.put((engine, endpoint))

    def start(self) -> None:
        from ..errors import SinkError, StreamlensError

        sink = self.sink
        if sink.type in WRITTEN_HERE:
            from ..sinks import build_sink

            self._sink = build_sink(sink, {}, where=self.where)
            self._sink.open()
        else:
            from ..sinks.zmq import DEFAULT_LINGER_MS, DEFAULT_SEND_TIMEOUT_S, secure

            self.back = self.ctx.socket(zmq.XPUB if sink.mode == "pub" else zmq.PUSH)
            self.back.sndhwm = sink.hwm
            self.back.linger = sink.linger_ms if sink.linger_ms is not None else DEFAULT_LINGER_MS[sink.mode]
            if sink.mode == "pub":
                self.back.setsockopt(zmq.XPUB_VERBOSER, 1)  # every subscription reaches the engines
            else:
                self.back.sndtimeo = int(1000 * (sink.send_timeout_s or DEFAULT_SEND_TIMEOUT_S))
            try:
                if sink.curve is not None:
                    self._auth = secure(self.ctx, self.back, sink.curve.model_dump())
                self.back.bind(sink.endpoint)
            except zmq.ZMQError as e:
                raise SinkError(f"{self.where}.endpoint: cannot bind {sink.endpoint}: {zmq.strerror(e.errno)}") from None
            except StreamlensError as e:
                raise SinkError(f"{self.where}.curve: {e}") from None
        self._thread.start()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.front, zmq.POLLIN)
        if self.back is not None and self.sink.mode == "pub":
            poller.register(self.back, zmq.POLLIN)  # subscriptions, passed upstream
        idle_since = None
        while True:
            self._take_joins()
            events = dict(poller.poll(_POLL_MS))
            if self.back is not None and self.back in events:
                self.front.send_multipart(self.back.recv_multipart())
            if self.front in events:
                idle_since = None
                parts = self.front.recv_multipart()
                if self.error is None:
                    try:
                        self._forward(parts)
                    except Exception as error:  # noqa: BLE001 - told to the supervisor, which ends the run
                        self._failed(error)
                else:
                    self.dropped += 1  # the sink has failed: taken, so that no engine waits on it
                if not self.front.poll(0):
                    self.caught_up_at = time.monotonic()
            else:
                self.caught_up_at = time.monotonic()
            if self.front not in events and self._finishing.is_set():
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= DRAIN_IDLE_S:
                    return

    def _failed(self, error: BaseException) -> None:
        from ..errors import StreamlensError

        if isinstance(error, StreamlensError):
            self.error = str(error)
        else:
            log.debug("%s failed", self.where, exc_info=error)
            self.error = f"{self.where} ({self.sink.type}): {type(error).__name__}: {error}"

    def _take_joins(self) -> None:
        while not self._joins.empty():
            engine, endpoint = self._joins.get()
            old = self._joined.get(engine)
            if old == endpoint:
                continue
            if old is not None:
                self.front.disconnect(old)
            self.front.connect(endpoint)
            self._joined[engine] = endpoint

    def _forward(self, parts: list[bytes]) -> None:
        if self._sink is not None:
            if parts[0].startswith(b"stats.") and not self._sink.wants_stats:
                return  # a jsonl file holds results, events and stream ends
            if self.sink.type == "jsonl":  # a line as it came: nothing to decode
                self._sink.write(None, None, parts[1])
                return
            message = json.loads(parts[1])
            self._sink.write(_Relayed(parts, message), message, parts[1])
            return
        try:
            self.back.send_multipart(parts, flags=zmq.NOBLOCK if self.sink.mode == "pub" else 0)
        except zmq.Again:  # pub: no subscriber's queue has room; push: no consumer took it in time
            self.dropped += 1

    def finish(self) -> None:
        """Forward what is still coming, then close (once every engine has ended)."""
        self._finishing.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            if self._sink is not None:
                try:
                    self._sink.close()
                except Exception as error:  # noqa: BLE001 - a flush that fails: the run fails, saying so
                    self._failed(error)
        finally:
            self.front.close(linger=0)
            if self.back is not None:
                self.back.close()
            if self._auth is not None:
                self._auth.stop()
            self.ctx.term()


__all__ = ["Supervisor", "worker_count", "supervised", "runner_for", "restart_delay"]
