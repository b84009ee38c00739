"""How long a live source waits before its next connection attempt: quick retries while an outage is
young, exponential backoff with a cap once it has lasted.

Most outages are short (a camera reboots, a switch port flaps, a server restarts), and a camera that
is back should be streaming again within a second, so for the first `FAST_FOR_S` seconds of an
outage the wait doubles from `initial_s` only up to `FAST_S` (or `initial_s`, when that is longer;
never above `max_s`). An attempt against a camera that is down costs it little: a refused
connection is answered by its TCP stack at once. Past that the camera is likely down for longer,
and the wait grows, doubling at each attempt, up to `max_s`, so a camera that stays down is not
hammered. `retry_delay()` is that schedule as a pure function.

Each wait is shortened by up to `jitter` (a fraction) at random, so cameras that dropped together
(one switch, one NVR) do not all knock again in the same instant; the cap is never exceeded.
`reset()` after a connection that delivered frames: the next failure starts a new outage.

Example:
    >>> now = [0.0]
    >>> backoff = Backoff(0.1, 4.0, jitter=0.0, clock=lambda: now[0])
    >>> [backoff.next() for _ in range(5)]
    [0.1, 0.2, 0.4, 0.5, 0.5]
    >>> backoff.capped
    True
    >>> now[0] = 70.0   # ten seconds past the first minute of this outage
    >>> backoff.next(), backoff.capped
    (4.0, True)
    >>> backoff.reset(); backoff.next()
    0.1
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

#: the longest wait while an outage is young (seconds)
FAST_S = 0.5
#: how long (seconds) an outage counts as young: until then retries stay quick
FAST_FOR_S = 60.0


def retry_delay(failures: int, outage_s: float, initial_s: float, max_s: float, *, fast_s: float = FAST_S,
                fast_for_s: float = FAST_FOR_S, factor: float = 2.0) -> float:
    """The wait (seconds, before jitter) after the `failures`-th failed attempt in a row (from 1),
    `outage_s` seconds into the outage.

    Within `fast_for_s`: `initial_s` times `factor` per failure, up to the quick cap
    `min(max_s, max(initial_s, fast_s))`. After it: the quick cap plus the time past `fast_for_s`,
    up to `max_s`; each wait is then about as long as all the waits since the quick phase ended,
    so the wait doubles at every attempt.

    Example:
        >>> [retry_delay(n, n * 0.4, 0.5, 5.0) for n in (1, 2, 30)]
        [0.5, 0.5, 0.5]
        >>> [retry_delay(1, t, 0.5, 5.0) for t in (60.0, 60.5, 61.5, 63.5, 120.0)]
        [0.5, 1.0, 2.0, 4.0, 5.0]
        >>> retry_delay(3, 1.0, 0.25, 30.0, fast_s=4.0), retry_delay(3, 1.0, 2.0, 30.0)
        (1.0, 2.0)
    """
    quick = min(max_s, max(initial_s, fast_s))
    if outage_s < fast_for_s:
        return min(quick, initial_s * factor ** max(0, failures - 1))
    return min(max_s, quick + (outage_s - fast_for_s))


class Backoff:
    """The waits of one source's outages: `next()` after each failed attempt, `reset()` once a
    connection delivered. `clock` (seconds, monotonic) dates the outage. `0 < initial_s <= max_s`:
    a source's keys are checked so (`SourceConfig`)."""

    def __init__(self, initial_s: float, max_s: float, *, factor: float = 2.0, jitter: float = 0.2,
                 rand: Callable[[], float] = random.random, clock: Callable[[], float] = time.monotonic):
        self.initial_s = initial_s
        self.max_s = max_s
        self.factor = factor
        self.jitter = jitter
        self.rand = rand
        self.clock = clock
        #: failed attempts since the last reset
        self.failures = 0
        #: when the first of them failed (`clock`), None after a reset
        self.since: float | None = None
        self._waits: tuple[float | None, float | None] = (None, None)  # the last two, before jitter

    def next(self) -> float:
        """The wait before the next attempt (seconds), counting one more failure."""
        now = self.clock()
        if self.since is None:
            self.since = now
        self.failures += 1
        wait = retry_delay(self.failures, now - self.since, self.initial_s, self.max_s, factor=self.factor)
        self._waits = (self._waits[1], wait)
        return wait * (1.0 - self.jitter * self.rand())

    @property
    def capped(self) -> bool:
        """Whether the last wait given did not grow from the one before, or is `max_s`: more of the
        same wait is to be expected."""
        before, last = self._waits
        return last is not None and (last >= self.max_s or before is not None and last <= before)

    def reset(self) -> None:
        self.failures = 0
        self.since = None
        self._waits = (None, None)
