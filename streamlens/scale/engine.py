"""One engine process of `runtime.workers: N`: a whole pipeline over its share of the streams.

The supervisor (supervisor.py) starts it with `multiprocessing`'s spawn and an `EngineSpec`: the
pipeline file's tree with only this engine's sources and its sinks pointed at the supervisor
(see `Supervisor`), the `seq` each stream starts from, and a shared array where the engine marks
the last `seq` it published per stream (so that a restarted engine goes on past it: subscribers
see a gap, never a repeat).

It speaks over two one-way pipes:

    supervisor -> engine:  "stop" (finish what was decoded)   "abort" (at once)
    engine -> supervisor:  ("snapshot", Snapshot) about twice a second
                           ("report", RunReport) when the run has ended
                           ("failed", line)       when it could not start

It ignores SIGINT and SIGTERM, which a terminal's Ctrl-C or `docker stop` send to the whole process
group: the supervisor ends its engines in order. It stops when the supervisor's pipe closes (the
supervisor is gone).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import StreamlensError
from ..frame import FrameResult
from ..sinks.base import Sink

#: how often an engine sends its figures to the supervisor
SNAPSHOT_EVERY_S = 0.5


@dataclass
class EngineSpec:
    """What an engine process runs (picklable)."""

    index: int
    #: the pipeline file's path (relative paths resolve against its folder) and its name in messages
    path: str
    display: str
    #: the pipeline file's tree, with this engine's sources and sinks
    data: dict
    #: the stream names, in the order of `marks`
    streams: list[str]
    first_seq: dict[str, int] = field(default_factory=dict)
    log_level: int = logging.WARNING


@dataclass
class Snapshot:
    """An engine's figures as the supervisor shows them: per stream its `StreamStats`, the budget
    controller's hold (`Pipeline.control_of`), its queue depth, and the controller's actions."""

    stats: dict
    control: dict
    depth: dict
    stopping: bool
    actions: list[str]


class _SeqMark(Sink):
    """Marks each stream's last published `seq` in the shared array. Inline: written as results
    are published, before any queued sink has them."""

    name = "seq-mark"
    inline = True

    def __init__(self, marks, streams: list[str]):
        self.marks = marks
        self.slot = {name: i for i, name in enumerate(streams)}

    def write(self, item, message, payload) -> None:
        if isinstance(item, FrameResult):
            self.marks[self.slot[item.frame.stream]] = item.seq


def engine_main(spec: EngineSpec, orders, up, marks) -> None:
    """The engine process: run the pipeline of `spec`, obeying `orders`, telling `up`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=spec.log_level, format=f"%(levelname)s %(name)s [engine {spec.index}]: %(message)s")
    from ..config import parse_pipeline
    from ..graph.runtime import Pipeline

    try:
        config = parse_pipeline(spec.data, Path(spec.path), spec.display)
        pipeline = Pipeline(config, sinks=[_SeqMark(marks, spec.streams)], first_seq=spec.first_seq)
    except StreamlensError as e:
        up.send(("failed", str(e)))
        return
    threading.Thread(target=_obey, args=(orders, pipeline), name="orders", daemon=True).start()
    last = [0.0]

    def tick(p: Pipeline) -> None:
        if time.monotonic() - last[0] >= SNAPSHOT_EVERY_S:
            last[0] = time.monotonic()
            _send_snapshot(up, p)

    try:
        report = pipeline.run(on_tick=tick)
    except StreamlensError as e:
        up.send(("failed", str(e)))
        return
    up.send(("report", report))


def _obey(orders, pipeline) -> None:
    while True:
        try:
            order = orders.recv()
        except (EOFError, OSError):  # the supervisor is gone: end as a Ctrl-C would
            pipeline.stop()
            return
        if order == "stop":
            pipeline.stop()
        elif order == "abort":
            pipeline.abort()


def _send_snapshot(up, pipeline) -> None:
    names = list(pipeline.stats)
    control = pipeline.controller
    snapshot = Snapshot(dict(pipeline.stats), {n: pipeline.control_of(n) for n in names},
                        {n: pipeline.queue_depth(n) for n in names}, pipeline.stopping,
                        list(control.actions) if control is not None else [])
    try:
        up.send(("snapshot", snapshot))
    except RuntimeError:  # a figure changed while it was pickled: the next snapshot will do
        pass


__all__ = ["EngineSpec", "Snapshot", "engine_main", "SNAPSHOT_EVERY_S"]
