"""A sink's background publisher: a bounded queue that the pipeline's thread fills without waiting,
drained by one thread of the sink's own (the webhook and mqtt sinks deliver this way).

Items are tuples whose first field is the stream they count under (None: counted nowhere). `put()`
appends one; when `size` wait already, the oldest is dropped and counted in `dropped` (per stream).
The thread takes items from the front: one at a time through `drain()`, which calls the sink's
`deliver` for each, or in batches of its own from `queue` under `cond` (`mqtt_client`). What it
has taken and not yet settled waits in `taken`; `put_back()` returns items it could not deliver to
the front (beyond `size`, the oldest are dropped and counted).

`close(flush_s, wait_s=, then_s=)` lets the thread deliver until `deadline` (`flush_s` from then;
none after `interrupt()`) and waits for it to end, `wait_s` longer (the mqtt sink's: to say
`offline`); then it stops the thread, gives up what is still queued or taken, counted as dropped,
once (`give_up()`, which the mqtt sink's thread also calls as it ends), and waits `then_s` more for
a thread that was left nothing (the webhook's: to end after its last request). It returns in
bounded time, whatever the thread is stuck in.

Example:
    >>> pub = Publisher(2)
    >>> with pub.cond:
    ...     for n in range(3):
    ...         pub.put(("cam1", n))
    >>> list(pub.queue), dict(pub.dropped)
    ([('cam1', 1), ('cam1', 2)], {'cam1': 1})
    >>> sent = []
    >>> pub.start(pub.drain, "doc", lambda item: "sent", lambda item, outcome: sent.append((item, outcome)))
    >>> pub.close(1.0), sent
    (0, [(('cam1', 1), 'sent'), (('cam1', 2), 'sent')])
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Any


class Publisher:
    """A bounded queue of `size` items and the one thread that delivers them (see the module docs).
    `put()`, `put_back()`, `give_up()` and the attributes below are used under `cond`."""

    def __init__(self, size: int):
        self.size = size
        self.cond = threading.Condition(threading.Lock())
        self.queue: deque[tuple] = deque()
        #: items the thread has taken and not yet settled (in flight)
        self.taken: deque[tuple] = deque()
        #: items dropped per stream: pushed out of a full queue, or given up by close()
        self.dropped: Counter[str] = Counter()
        self.closing = False  # close(): deliver until `deadline`, then end
        self.aborted = False  # interrupt(): close() gives no time
        self.given_up = False  # what was left has been counted as dropped
        self.deadline = 0.0  # when close() stops waiting for deliveries (time.monotonic())
        self.stop = threading.Event()  # the thread ends now; waits on it end
        self.thread: threading.Thread | None = None

    @property
    def open(self) -> bool:
        """Started, and what is queued not yet given up."""
        return self.thread is not None and not self.given_up

    def start(self, target: Callable[..., None], name: str, *args: Any) -> None:
        """Start the thread: `target(*args)`, a daemon named `name`."""
        self.thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self.thread.start()

    def put(self, item: tuple) -> None:
        """Queue `item`, dropping (and counting) the oldest when the queue is full; never waits."""
        queue = self.queue
        if len(queue) >= self.size:
            self.dropped[queue.popleft()[0]] += 1
        queue.append(item)

    def put_back(self, items: Iterable[tuple]) -> None:
        """Return undelivered `items` to the front, in order; beyond `size` the oldest are dropped, counted."""
        queue = self.queue
        queue.extendleft(reversed(list(items)))
        while len(queue) > self.size:
            self.dropped[queue.popleft()[0]] += 1

    def give_up(self) -> int:
        """Count what is still queued or taken as dropped and forget it, once; how many were counted."""
        if self.given_up:
            return 0
        self.given_up = True
        left = 0
        for item in (*self.queue, *self.taken):
            if item[0] is not None:
                self.dropped[item[0]] += 1
                left += 1
        self.queue.clear()
        self.taken.clear()
        return left

    def drain(self, deliver: Callable[[tuple], Any], settle: Callable[[tuple, Any], None]) -> None:
        """The thread's loop for one item at a time, in order: take the oldest, `deliver(item)` (not
        under `cond`), then `settle(item, outcome)` under it, unless close() gave the item up
        meanwhile. Ends when closing with nothing queued, or when stopped."""
        cond, queue, taken, stop = self.cond, self.queue, self.taken, self.stop
        while True:
            with cond:
                while not queue and not self.closing and not stop.is_set():
                    cond.wait()
                if stop.is_set() or not queue:
                    return
                item = queue.popleft()
                taken.append(item)
            outcome = deliver(item)
            with cond:
                if taken:  # else close() gave it up and counted it
                    taken.popleft()
                    settle(item, outcome)

    def interrupt(self) -> None:
        """From any thread: stop the thread now; close() then gives it no time."""
        with self.cond:
            self.aborted = True
            self.deadline = 0.0
            self.stop.set()
            self.cond.notify_all()

    def close(self, flush_s: float, *, wait_s: float = 0.0, then_s: float = 0.0) -> int:
        """Let the thread deliver for `flush_s` (none after `interrupt()`) and wait `wait_s` more for
        it to end; then stop it and give up what is left (counted), and wait `then_s` more for a
        thread that was left nothing. Returns how many items were given up; safe to call twice."""
        thread = self.thread
        if thread is None:
            return 0
        with self.cond:
            if not self.closing:
                self.closing = True
                self.deadline = 0.0 if self.aborted else time.monotonic() + flush_s
            self.cond.notify_all()
        thread.join(max(0.0, self.deadline - time.monotonic()) + wait_s)
        with self.cond:
            self.stop.set()
            left = self.give_up()
            self.cond.notify_all()
        thread.join(0.0 if left else then_s)
        self.thread = None
        return left


__all__ = ["Publisher"]
