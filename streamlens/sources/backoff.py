"""Exponential backoff with a cap: how long a live source waits before its next connection attempt.

The wait doubles from `initial_s` after each failed attempt up to `max_s`, and is shortened by up to
`jitter` (a fraction) at random, so cameras that dropped together (one switch, one NVR) do not all
knock again in the same instant; the cap is never exceeded. `reset()` after a connection that
delivered frames.

Example:
    >>> backoff = Backoff(0.5, 4.0, jitter=0.0)
    >>> [backoff.next() for _ in range(6)]
    [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    >>> backoff.capped, backoff.just_capped
    (True, False)
    >>> backoff.reset(); backoff.next()
    0.5
"""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    def __init__(self, initial_s: float, max_s: float, *, factor: float = 2.0, jitter: float = 0.2,
                 rand: Callable[[], float] = random.random):
        if not 0 < initial_s <= max_s:
            raise ValueError(f"backoff needs 0 < initial_s <= max_s, got {initial_s} and {max_s}")
        self.initial_s = initial_s
        self.max_s = max_s
        self.factor = factor
        self.jitter = jitter
        self.rand = rand
        #: failed attempts since the last reset
        self.failures = 0

    def next(self) -> float:
        """The wait before the next attempt (seconds), counting one more failure."""
        wait = min(self.max_s, self.initial_s * self.factor ** self.failures)
        self.failures += 1
        return wait * (1.0 - self.jitter * self.rand())

    @property
    def capped(self) -> bool:
        """Whether the last wait given was at the cap (it will not grow any more)."""
        return self.failures > 0 and self.initial_s * self.factor ** (self.failures - 1) >= self.max_s

    @property
    def just_capped(self) -> bool:
        """Whether the last wait given was the first one at the cap."""
        return self.capped and (self.failures == 1 or self.initial_s * self.factor ** (self.failures - 2) < self.max_s)

    def reset(self) -> None:
        self.failures = 0
