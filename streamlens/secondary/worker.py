"""What the result stages that run models of their own share: the secondary models
(streamlens/secondary/stage.py) and SAM's masks (streamlens/segment/stage.py).

- `WorkerStage`: one worker thread fed by a bounded inbox (what does not fit is the stage's to drop
  and count, for a camera: a file's stream waits, `_live`), its answers handed back per stream
  (`_done[stream]`, taken on the engine's thread; `_open[stream]` counts the jobs not yet taken back,
  and `hold_for_answers` holds a file's result until every one has come, `waited_s` in all),
  and an error it raises handed to the engine's thread, which raises it on its next result
  (`check()`), so the run ends with it. `close()` stops the worker (work still waiting is dropped)
  and closes the stage's cache.
- `LastSeen`: when each track was last seen, in media time, so that what a stage keeps per track
  is forgotten once the track has been gone for `FORGET_AFTER_S`.

Example:
    >>> seen = LastSeen()
    >>> seen.see("cam1", 7, 0.0); seen.see("cam1", 8, 29.5)
    >>> seen.sweep("cam1", 31.0)     # track 7: gone for 31 s
    [7]
    >>> seen.sweep("cam1", 31.5)     # at most once a second of media time
    []
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict, deque

from ..graph.publish.stage import Stage

log = logging.getLogger("streamlens")

#: a track not seen for this long (media seconds) is forgotten
FORGET_AFTER_S = 30.0
#: how often (media seconds) a stream's tracks long unseen are looked for
SWEEP_EVERY_S = 1.0
#: how long a file's result waits for the worker between looks at its health (seconds)
WAIT_STEP_S = 0.5


class LastSeen:
    """Each stream's tracks and the media time each was last seen (see the module's docstring). Used
    on the engine's thread."""

    def __init__(self, forget_after_s: float = FORGET_AFTER_S):
        self.forget_after_s = forget_after_s
        self._seen: dict[str, dict[int, float]] = defaultdict(dict)  # stream -> track -> media time last seen
        self._swept: dict[str, float] = {}  # stream -> media time of its last sweep

    def see(self, stream: str, track: int, t: float) -> None:
        self._seen[stream][track] = t

    def sweep(self, stream: str, t: float) -> list[int]:
        """The tracks of `stream` unseen for more than `forget_after_s` at media time `t`, forgotten
        here; looked for at most once per `SWEEP_EVERY_S` (else none)."""
        if t - self._swept.get(stream, float("-inf")) < SWEEP_EVERY_S:
            return []
        self._swept[stream] = t
        seen = self._seen.get(stream, {})
        gone = [track for track, at in seen.items() if t - at > self.forget_after_s]
        for track in gone:
            del seen[track]
        return gone

    def forget(self, stream: str) -> None:
        self._seen.pop(stream, None)
        self._swept.pop(stream, None)


class WorkerStage(Stage):
    """A result stage with one worker thread of its own (see the module's docstring). A subclass
    names its thread (`name`) and gives `_work()`, one turn of the worker: take what waits in
    `_inbox` (waiting at most a fraction of a second, so that `close()` is heard) and put the answers
    in `_done[stream]`. `cache`: a `MemoryCache` / `RedisCache` (None: none), closed with the stage;
    `streams`: the run's `StreamSet` (graph/run/stream.py), which tells files from cameras (None:
    every stream is taken for a camera)."""

    name = "worker"
    #: how long `close()` waits for the worker to finish what it is doing
    close_timeout_s = 5.0

    def __init__(self, cache=None, inbox_size: int = 1, streams=None):
        self.cache = cache
        self.streams = streams
        self._inbox: queue.Queue = queue.Queue(inbox_size)
        self._done: dict[str, deque] = defaultdict(deque)  # stream -> answers, taken on the engine's thread
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.error: BaseException | None = None
        self.foreign = 0  # cached values that were not outputs this stage's models can read
        self._open: dict[str, int] = defaultdict(int)  # stream -> jobs offered and not yet taken back
        self.waited_s = 0.0  # how long files' results waited for their answers

    def start(self) -> None:
        self._thread.start()

    def _live(self, stream: str) -> bool:
        """Whether `stream` is a camera (or played as one): never held back for this stage's answers."""
        if self.streams is None:
            return True
        found = self.streams.get(stream)
        return found is None or found.live

    def hold_for_answers(self, stream: str, wait_for, hurry=None) -> None:
        """On the engine's thread: when `stream` is a file with jobs not yet answered, hold its result
        until every one is (`wait_for(predicate, timeout)`: waits on what the worker signals when it
        answers; `hurry()`: tells the worker to run what it holds now). Ends too when the worker has
        stopped or failed (then raises what it raised)."""
        done = self._done[stream]
        if self._open[stream] <= len(done) or self._live(stream):
            return
        started = time.perf_counter()

        def answered() -> bool:
            return len(done) >= self._open[stream] or self.error is not None or self._stop.is_set()

        while True:
            if hurry is not None:
                hurry()
            if wait_for(answered, WAIT_STEP_S) or not self._thread.is_alive():
                break  # answered, or nothing will answer (not started, or stopped)
        self.waited_s += time.perf_counter() - started
        self.check()

    def check(self) -> None:
        """On the engine's thread: raise what the worker raised, if it did."""
        if self.error is not None:
            raise self.error

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker (work still waiting is dropped) and close the cache."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.close_timeout_s if timeout is None else timeout)
        if self.cache is not None:
            self.cache.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._work()
        except BaseException as e:  # noqa: BLE001 - the engine raises it on its next frame
            log.debug("%s worker failed", self.name, exc_info=True)
            self.error = e

    def _work(self) -> None:
        raise NotImplementedError


__all__ = ["WorkerStage", "LastSeen", "FORGET_AFTER_S", "WAIT_STEP_S"]
