"""Ctrl-C and SIGTERM acted on outside the signal handler.

Python runs a signal handler on the main thread between two bytecodes, wherever that thread is:
inside `Event.set()`, holding the lock of that event's condition, for example. A handler that stops
a pipeline takes such locks too (it sets events, puts into channels), so a second Ctrl-C landing
while the first one's handler holds a lock waited for that lock for ever (`timeout -s INT`, which
signals the process and its group, did it every time on a 128-stream run). Here the handler only
counts and hands the count to a thread of its own through a `SimpleQueue`, whose `put` is safe in a
signal handler; that thread does the work.

Example (the handler called as the signal would call it: a doctest sends no real signal, which
would end the test process if any line before it had failed; tests/test_signals.py sends real ones):
    >>> import signal, threading
    >>> seen, done = [], threading.Event()
    >>> relay = SignalRelay(lambda presses: (seen.append(presses), done.set()), (signal.SIGUSR1,))
    >>> relay._handler(signal.SIGUSR1, None); done.wait(5)
    True
    >>> relay.close(); seen
    [1]
"""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Callable, Iterable


class SignalRelay:
    """Installs a handler for `signals` that counts presses and has `act(presses)` called on a
    thread of its own, in order; `close()` puts the old handlers back. `early`: called in the handler
    itself instead, while it returns True (the program is still loading: raise KeyboardInterrupt
    there, nothing is held yet)."""

    def __init__(self, act: Callable[[int], None], signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM),
                 early: Callable[[], bool] | None = None):
        self.presses = 0
        self._act, self._early = act, early
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="signals", daemon=True)
        self._thread.start()
        self._old = {s: signal.signal(s, self._handler) for s in signals}

    def _handler(self, signum, frame) -> None:
        self.presses += 1
        if self._early is not None and self._early():
            raise KeyboardInterrupt
        self._queue.put(self.presses)

    def _loop(self) -> None:
        while True:
            presses = self._queue.get()
            if presses is None:
                return
            self._act(presses)

    def close(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
        self._queue.put(None)
