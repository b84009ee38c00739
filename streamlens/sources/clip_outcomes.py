"""What became of the clips a source was asked for (`analytics.clips`), on the source's side: each
`ClipDone` (protocol.py: written, or lost and why) as its `ClipRecorder` settled it, in its decode
worker or here, kept until the engine's clip stage takes them (`Source.clip_outcomes`).

`ClipOutcomes` is filled from any thread (a worker's poll loop, a recorder's writer thread) and
emptied by the engine's thread. It is bounded (`MAX_KEPT`): an owner that never takes them loses
the oldest, counted in `overflowed`. `settle_worker` ends a decode worker's session at a source's
end and reads what it still says of its clips before the worker is closed, so that the clips being
written at a stop are told too.

Example:
    >>> outcomes = ClipOutcomes()
    >>> outcomes.add("clips/cam1/a.mp4", "No space left on device")
    >>> [(d.path, d.reason, d.refused) for d in outcomes.take()], outcomes.take()
    ([('clips/cam1/a.mp4', 'No space left on device', False)], [])
"""

from __future__ import annotations

import threading
import time
from collections import deque

from .protocol import ClipDone

#: outcomes kept until taken
MAX_KEPT = 4096


class ClipOutcomes:
    """See the module: `add` from any thread, `take` from the engine's."""

    def __init__(self, max_kept: int = MAX_KEPT):
        self._lock = threading.Lock()
        self._kept: deque[ClipDone] = deque(maxlen=max_kept)
        #: outcomes dropped because nobody took them in time
        self.overflowed = 0

    def add(self, path: str, reason: str | None, refused: bool = False) -> None:
        with self._lock:
            if len(self._kept) == self._kept.maxlen:
                self.overflowed += 1
            self._kept.append(ClipDone(path, reason, refused))

    def take(self) -> list[ClipDone]:
        """The outcomes since last taken, oldest first."""
        if not self._kept:  # the engine asks with every frame: no lock for nothing new
            return []
        with self._lock:
            if not self._kept:
                return []
            out = list(self._kept)
            self._kept.clear()
        return out


def settle_worker(worker, session: int, outcomes: ClipOutcomes, wait_s: float) -> None:
    """End `session` of `worker` (worker.py's) and keep what it says of its clips until the session
    has ended (its recorder writes the clips still open first), the worker is gone or `wait_s` has
    passed; frames that come meanwhile are discarded."""
    from .worker import Died, Ended, FrameReady

    worker.abort(session)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        event = worker.poll(0.1)
        if isinstance(event, ClipDone):
            outcomes.add(*event)
        elif isinstance(event, FrameReady):
            event.discard()
        elif isinstance(event, Died) or isinstance(event, Ended) and event.session == session:
            return


__all__ = ["ClipOutcomes", "settle_worker", "MAX_KEPT"]
