"""One engine of `runtime.workers: N`: a whole pipeline over its share of the streams.

The supervisor (supervisor.py) hands each engine an `EngineSpec`: the pipeline's typed config with
only this engine's sources and its sinks pointed at the supervisor (engine_config.py), built and
checked there, and the `seq` each stream
starts from (a restarted engine goes on past what its streams had published: subscribers see a
gap, never a repeat). `EngineRun` runs it and tells, in a `Snapshot`, how it goes: every stream's
figures, the last `seq` published per stream, and where its zmq sinks listen.

An engine is a process of this machine (`engine_main`, started with `multiprocessing`'s spawn)
or a Ray actor (ray.py). A process speaks over two one-way pipes:

    supervisor -> engine:  "go" (every engine is built: start the streams)
                           "stop" (finish what was decoded)   "abort" (at once)
                           ("add", SourceConfig)  ("remove", name): a stream added or removed
                           ("floor", level): apply at least this rung of the overload ladder
                           (the other engines of this machine have climbed it; graph/overload/ladder.py)
    engine -> supervisor:  ("ready", None) once built (sources open, model loaded, sinks open)
                           ("snapshot", Snapshot) about twice a second
                           ("report", RunReport) when the run has ended
                           ("failed", line)       when it could not start

and marks each stream's last published `seq` in an array it shares with the supervisor, so that a
restart knows it exactly. It ignores SIGINT and SIGTERM, which a terminal's Ctrl-C or `docker stop`
send to the whole process group: the supervisor ends its engines in order. It stops when the
supervisor's pipe closes (the supervisor is gone).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
from dataclasses import dataclass, field

from .. import logs
from ..config import PipelineConfig
from ..errors import StreamlensError
from ..frame import FrameResult
from ..sinks.base import Sink
from ..wire.keys import RunKeys

log = logging.getLogger("streamlens.scale")

#: spare `seq` marks an engine process has for streams added while it runs (processes.py); a stream
#: added past them is restarted after what its engine last reported instead (as an actor's is)
ADDED_SLOTS = 256
#: how often an engine process sends its figures to the supervisor
SNAPSHOT_EVERY_S = 0.5
#: how long a built engine waits for the others before it starts its streams anyway, seconds
START_WAIT_S = 15.0


@dataclass
class EngineSpec:
    """What an engine runs (picklable)."""

    index: int
    #: the pipeline as this engine runs it: its sources and sinks (engine_config.py)
    config: PipelineConfig
    #: the stream names, in the order of the marks
    streams: list[str]
    first_seq: dict[str, int] = field(default_factory=dict)
    log_level: int = logging.WARNING
    #: how many times this engine has been started again (said in its streams' `stats` messages)
    restarts: int = 0
    #: a Ray actor's: the run's CurveZMQ keys for its sockets towards the supervisor, and the
    #: address of the supervisor's node (an actor there binds on loopback); see ray.py
    keys: RunKeys | None = None
    supervisor_node: str | None = None
    #: where this engine answers the supervisor's live page about its frames (scale/preview.py;
    #: None: the run serves no page)
    preview: str | None = None
    #: built, it tells the supervisor ("ready") and starts its streams only on "go" (`START_WAIT_S`
    #: at most): the engines of a run start together (see `EngineRun.run`)
    start_together: bool = False


@dataclass
class Snapshot:
    """An engine's figures as the supervisor shows them: per stream its `StreamStats`, the budget
    controller's hold (`Pipeline.control_of`), its queue depth and the last `seq` published; the
    controller's actions; where its zmq sinks listen (`Pipeline.endpoints`) and where it answers
    the live page (`preview`), on which host."""

    stats: dict
    control: dict
    depth: dict
    seqs: dict
    stopping: bool
    actions: list[str]
    endpoints: dict
    host: str
    pid: int
    #: streams whose addition this engine could not make, with the one line saying why
    refused: dict = field(default_factory=dict)
    #: its secondary models' figures and its mask stage's (`Pipeline.secondary_stats`, `segment_stats`)
    secondary: dict = field(default_factory=dict)
    segment: dict = field(default_factory=dict)
    #: its budget controller's own rung (`BudgetController.level`; 0: none or at rest)
    level: int = 0
    #: messages each of its sinks could not deliver so far (`Pipeline.sink_losses`)
    sink_losses: dict = field(default_factory=dict)


class _SeqMark(Sink):
    """Keeps each stream's last published `seq` (in `marks`, a shared array, when given). Inline:
    written as results are published, before any queued sink has them."""

    name = "seq-mark"
    inline = True

    def __init__(self, streams: list[str], marks=None):
        self.slot = {name: i for i, name in enumerate(streams)}
        self.marks = marks
        self.last: dict[str, int] = {}

    def add(self, stream: str) -> None:
        """A stream added while running takes the next slot, as the supervisor counts them (in the
        order it sent them); past the array's spare slots it has none (see `ADDED_SLOTS`)."""
        if stream not in self.slot:
            self.slot[stream] = len(self.slot)

    def write(self, item, message, payload) -> None:
        if isinstance(item, FrameResult):
            self.last[item.frame.stream] = item.seq
            slot = self.slot.get(item.frame.stream)
            if self.marks is not None and slot is not None and slot < len(self.marks):
                self.marks[slot] = item.seq


class EngineRun:
    """Runs the pipeline of `spec` once: `run()` on one thread, `snapshot()`, `stop()` and
    `abort()` from others."""

    def __init__(self, spec: EngineSpec, marks=None, host: str | None = None,
                 changes: queue.SimpleQueue | None = None, curve: dict | None = None):
        """`changes`: where ("add", SourceConfig) and ("remove", name) wait for the run's next tick
        (an actor's own, filled before it makes this engine too; default: a new one); `curve`: an
        actor's CurveZMQ server keys, for its answers to the live page (ray.py)."""
        self.spec = spec
        self.host = host or socket.gethostname()
        self._marks = _SeqMark(spec.streams, marks)
        self._preview = None
        if spec.preview is not None:
            from .preview import PreviewServer

            self._preview = PreviewServer(spec.preview, curve)
        self._pipeline = None
        self._stopped = threading.Event()  # stop() before the pipeline was built
        self._changes = changes if changes is not None else queue.SimpleQueue()  # in order
        self._refused: dict[str, str] = {}
        self._go = threading.Event()  # the supervisor's "go" (or a stop) after this engine said "ready"

    def run(self, on_tick=None, on_ready=None) -> tuple[str, object]:
        """("report", RunReport) once the run has ended, or ("failed", line) if it could not start.

        With `spec.start_together`, once built it calls `on_ready` and waits for `go()` (or a
        stop, or `START_WAIT_S`) before its streams start. Built one after another, the engines
        of a run had each started its streams while the next was still loading its model: the
        first engine's frames were late behind that load (highway K=20 on two engines, copies in
        step: the second started 0.7 s after the first, and the first second's p95 read 190-260 ms;
        54-73 ms started together, first keyframes no longer waited for in a row (detect_worker.py);
        tools/results/capacity.md)."""
        from ..graph.run.pipeline import Pipeline

        spec = self.spec
        try:
            extra = [self._marks] + ([self._preview] if self._preview is not None else [])
            self._pipeline = Pipeline(spec.config, sinks=extra, first_seq=spec.first_seq,
                                      stats_extra={"engine": spec.index, "engine_restarts": spec.restarts})
            if self._stopped.is_set():
                self._pipeline.stop()

            def tick(pipeline) -> None:
                self._apply_changes()
                if on_tick is not None:
                    on_tick(pipeline)

            def built() -> None:
                if spec.start_together and on_ready is not None:
                    log.debug("engine %d built; its streams wait for the other engines", spec.index)
                    on_ready()
                    if not self._go.wait(START_WAIT_S):
                        log.warning("engine %d: the other engines were not built within %g s; starting its "
                                    "streams", spec.index, START_WAIT_S)

            return "report", self._pipeline.run(on_tick=tick, on_built=built)
        except StreamlensError as e:
            return "failed", str(e)

    def snapshot(self) -> Snapshot | None:
        """The figures now (None before the pipeline is built): each stream's `StreamStats.snapshot()`."""
        p = self._pipeline
        if p is None:
            return None
        names = list(p.stats)
        control = p.controller
        endpoints = p.endpoints()
        if self._preview is not None and self._preview.bound:  # once its sinks are open
            endpoints["preview"] = self._preview.endpoint
        return Snapshot({n: p.stats[n].snapshot() for n in names}, {n: p.control_of(n) for n in names},
                        {n: p.queue_depth(n) for n in names}, dict(self._marks.last), p.stopping,
                        list(control.actions) if control is not None else [], endpoints, self.host,
                        os.getpid(), dict(self._refused), p.secondary_stats(), p.segment_stats(),
                        control.level if control is not None else 0, p.sink_losses())

    def add(self, source) -> None:
        """A stream added to this engine (a `SourceConfig` the supervisor checked): its `seq` mark
        is taken now, in the order of the supervisor's orders; the run takes it at its next tick."""
        self._marks.add(source.name)
        self._changes.put(("add", source))

    def remove(self, name: str) -> None:
        self._changes.put(("remove", name))

    def hold_floor(self, level: int) -> None:
        """The other engines of this machine have climbed `level` rungs: apply at least that many
        (on the run's next tick)."""
        self._changes.put(("floor", level))

    def _apply_changes(self) -> None:
        """On the run's loop: the streams added and removed since its last tick, and the overload floor."""
        while not self._changes.empty():
            what, value = self._changes.get()
            if what == "floor":
                if self._pipeline.controller is not None:
                    self._pipeline.controller.hold_floor(value)
                continue
            try:
                if what == "add":
                    self._pipeline.add_stream(value)
                else:
                    self._pipeline.remove_stream(value)
            except Exception as error:  # noqa: BLE001 - that stream's trouble, told; the run goes on
                name = value.name if what == "add" else value
                line = str(error) if isinstance(error, StreamlensError) else f"{type(error).__name__}: {error}"
                log.warning("engine %d: stream %s not %s: %s", self.spec.index, name,
                            "added" if what == "add" else "removed", line)
                if what == "add":
                    self._refused[name] = line

    def go(self) -> None:
        """Every engine of the run is built: start the streams (see `run`)."""
        self._go.set()

    def stop(self) -> None:
        self._stopped.set()
        self._go.set()
        if self._pipeline is not None:
            self._pipeline.stop()

    def abort(self) -> None:
        self._stopped.set()
        self._go.set()
        if self._pipeline is not None:
            self._pipeline.abort()


def engine_main(spec: EngineSpec, orders, up, marks) -> None:
    """An engine process: run `spec`, obeying `orders`, telling `up`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logs.setup(spec.log_level, f"%(levelname)s %(name)s [engine {spec.index}]: %(message)s")  # escaped lines
    engine = EngineRun(spec, marks)
    threading.Thread(target=_obey, args=(orders, engine), name="orders", daemon=True).start()
    last = [0.0]

    def tick(_pipeline) -> None:
        if time.monotonic() - last[0] >= SNAPSHOT_EVERY_S:
            last[0] = time.monotonic()
            snapshot = engine.snapshot()
            if snapshot is not None:
                up.send(("snapshot", snapshot))

    up.send(engine.run(on_tick=tick, on_ready=lambda: up.send(("ready", None))))


def _obey(orders, engine: EngineRun) -> None:
    while True:
        try:
            order = orders.recv()
        except (EOFError, OSError):  # the supervisor is gone: end as a Ctrl-C would
            engine.stop()
            return
        if order == "stop":
            engine.stop()
        elif order == "abort":
            engine.abort()
        elif order == "go":
            engine.go()
        elif isinstance(order, tuple) and order[0] == "add":
            engine.add(order[1])
        elif isinstance(order, tuple) and order[0] == "remove":
            engine.remove(order[1])
        elif isinstance(order, tuple) and order[0] == "floor":
            engine.hold_floor(order[1])


__all__ = ["EngineSpec", "EngineRun", "Snapshot", "engine_main", "SNAPSHOT_EVERY_S"]
