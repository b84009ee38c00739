"""Which numbers of streams a bench run tries: a `--streams` spec and the search over a range.

A spec is one number (`6`: that K only), a list (`1,2,4`: each of them, in order, whatever the
results), or a range (`1-16`: searched). A range is searched as a capacity usually is: try the
lower bound, double while the trials pass (1, 2, 4, 8, 16), then bisect between the last K that
passed and the first that failed. The upper bound is never exceeded: when it passes, the search
ends there. When the lower bound fails, nothing more is tried.

Example:
    >>> search = StreamSearch(parse_streams("1-12"))
    >>> tried = []
    >>> while (k := search.next()) is not None:
    ...     tried.append(k)
    ...     search.record(k, passed=k <= 5)
    >>> tried
    [1, 2, 4, 8, 6, 5]
    >>> search.best
    5
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """What `--streams` asked for: a list tried as it is, or a range [low, high] that is searched."""

    values: tuple[int, ...] = ()
    low: int | None = None
    high: int | None = None

    @property
    def searched(self) -> bool:
        return self.low is not None


def parse_streams(spec: str) -> StreamPlan:
    """`"6"`, `"1,2,4"` or `"1-16"` as a `StreamPlan`; ValueError naming what is wrong.

    Example:
        >>> parse_streams("1,2,4").values, parse_streams("2-8").low, parse_streams("2-8").high
        ((1, 2, 4), 2, 8)
    """
    text = spec.strip().replace(" ", "")
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-"))
            if low < 1 or high < low:
                raise ValueError
            return StreamPlan(low=low, high=high)
        values = tuple(int(part) for part in text.split(","))
        if not values or min(values) < 1:
            raise ValueError
        return StreamPlan(values=values)
    except ValueError:
        raise ValueError(f"{spec!r}: expected a number of streams (6), a list (1,2,4) "
                         "or a range to search (1-16), all at least 1") from None


def curve_plan(plan: StreamPlan) -> StreamPlan:
    """The plan of an overload curve (`--curve`), which tries every K whatever the results: a list
    as it is, a range as its doubling ladder up to its upper bound.

    Example:
        >>> curve_plan(parse_streams("1-30")).values, curve_plan(parse_streams("4,6")).values
        ((1, 2, 4, 8, 16, 30), (4, 6))
    """
    if not plan.searched:
        return plan
    ladder, k = [], plan.low
    while k < plan.high:
        ladder.append(k)
        k *= 2
    return StreamPlan(values=tuple(ladder + [plan.high]))


def streams_argument(spec: str) -> StreamPlan:
    """`parse_streams` for argparse: a bad spec is a usage error."""
    try:
        return parse_streams(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


class StreamSearch:
    """Hands out the K to try next (`next()`), given each trial's outcome (`record()`)."""

    def __init__(self, plan: StreamPlan):
        self.plan = plan
        self.passed: set[int] = set()
        self.failed: set[int] = set()
        self._queue = list(plan.values)
        self._next: int | None = plan.low if plan.searched else None
        self._done = False

    @property
    def best(self) -> int | None:
        """The largest K that passed, or None."""
        return max(self.passed, default=None)

    def next(self) -> int | None:
        """The next K to try, or None when the search is over."""
        if self._done:
            return None
        if not self.plan.searched:
            return self._queue.pop(0) if self._queue else None
        return self._next

    def stop(self) -> None:
        """End the search now (a trial failed to run at all)."""
        self._done = True

    def record(self, k: int, passed: bool) -> None:
        """The outcome of the trial with K streams; decides what comes next."""
        (self.passed if passed else self.failed).add(k)
        if not self.plan.searched:
            return
        high = self.plan.high
        first_fail = min(self.failed, default=None)
        last_pass = max((p for p in self.passed if first_fail is None or p < first_fail), default=None)
        if first_fail is None:  # still doubling
            self._next = min(2 * k, high) if k < high else None
        elif last_pass is None:  # the lower bound fails: nothing smaller is tried
            self._next = None
        else:
            middle = (last_pass + first_fail) // 2
            self._next = middle if middle > last_pass else None
        if self._next is None:
            self._done = True


__all__ = ["StreamPlan", "StreamSearch", "curve_plan", "parse_streams", "streams_argument"]
