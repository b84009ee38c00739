"""`Pipeline.results()`: a run in the background whose results the caller iterates, in-process."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from ...errors import StreamlensError
from ...frame import FrameResult, StreamEnd
from ...sinks import Sink

_END = object()


class QueueSink(Sink):
    """Hands every result and stream end to `out` (it waits while `out` is full)."""

    name = "results"

    def __init__(self, out: queue.Queue):
        self.out = out

    def write(self, item, message, payload) -> None:
        self.out.put(item)


def results_of(pipeline, out: queue.Queue) -> Iterator[FrameResult | StreamEnd]:
    """Run `pipeline` on a thread of its own and yield what its `QueueSink` puts into `out`. Leaving
    the loop early aborts the run; raises what `run()` raised, or `StreamlensError` if it failed."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["report"] = pipeline.run()
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
            pipeline.abort()
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
