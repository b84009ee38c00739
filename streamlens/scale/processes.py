"""Engines as processes of this machine: the supervisor's launcher when no cluster is asked for
(ray.py `RayActors` is the other). Each engine is a spawned process (engine.py `engine_main`),
spoken to over two pipes, with its streams' last published `seq` marked in shared memory."""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.connection
import time
from typing import Any

from ..sources.ring import remove_rings_of
from .engine import ADDED_SLOTS, EngineSpec, engine_main
from .policy import END_WAIT_S


class Processes:
    """Engines as processes of this machine, spoken to over pipes (see engine.py)."""

    remote = False
    #: no CurveZMQ keys: the engines' sockets are ipc files in the run's private folder
    keys = None

    def __init__(self, folder: str):
        self.folder = folder
        self.ctx = multiprocessing.get_context("spawn")

    def sink_endpoint(self, engine: int, sink: int | str) -> str:
        return f"ipc://{self.folder}/{engine}-{sink}"

    def start(self, engine: Any, spec: EngineSpec) -> None:
        orders_read, orders_write = self.ctx.Pipe(duplex=False)
        up_read, up_write = self.ctx.Pipe(duplex=False)
        marks = self.ctx.Array("q", [spec.first_seq.get(n, 0) - 1 for n in spec.streams] + [-1] * ADDED_SLOTS,
                               lock=False)  # and a slot for each stream added while it runs
        # not a daemon: an engine starts its cameras' decode workers, and a daemon may start no process
        process = self.ctx.Process(target=engine_main, args=(spec, orders_read, up_write, marks),
                                   name=f"streamlens-engine-{engine.index}", daemon=False)
        try:
            process.start()
        finally:
            orders_read.close()
            up_write.close()
        engine.handle = (process, orders_write, up_read, marks)

    def tell(self, engine: Any, order: str | tuple) -> None:
        try:
            engine.handle[1].send(order)
        except (OSError, ValueError):  # it has ended
            pass

    def poll(self, engines: list[Any], timeout: float) -> list[tuple[Any, str, Any]]:
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

    def next_seq(self, engine: Any) -> dict[str, int]:
        marks = engine.handle[3] if engine.handle else None
        if marks is None:
            return dict(engine.first_seq)
        # a stream added past the spare marks: past its last report, by 30 frames a second since then
        seqs = engine.snapshot.seqs if engine.snapshot is not None else {}
        since = math.ceil(30 * (time.monotonic() - engine.snapshot_at + 1.0))
        return {name: marks[j] + 1 if j < len(marks) else seqs.get(name, -1) + 1 + since
                for j, name in enumerate(engine.streams)}

    def kill(self, engine: Any) -> None:
        engine.handle[0].kill()

    def _close(self, engine: Any) -> None:
        process, orders, up, marks = engine.handle
        orders.close()
        up.close()
        engine.handle = (None, orders, up, marks)

    def close(self) -> None:
        pass


__all__ = ["Processes"]
