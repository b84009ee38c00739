"""Latency statistics, pure numbers: histograms with fixed bucket bounds, nearest-rank quantiles and
percentiles. Each stream's `StreamStats` keeps them; `streamlens.http.metrics` exports them over HTTP.

Example:
    >>> h = LatencyHistogram()
    >>> for ms in (5, 12, 40): h.observe(ms)
    >>> h.cumulative()[:4], h.count
    ([0, 1, 1, 2], 3)
"""

from __future__ import annotations

import bisect

#: histogram bucket bounds in milliseconds: fine around a 33 ms frame budget
LATENCY_BUCKETS_MS = (2.5, 5, 10, 20, 33, 50, 75, 100, 150, 250, 500, 1000, 2500)


class LatencyHistogram:
    """Counts of latencies per bucket (milliseconds), cumulative on demand; one `observe` is a
    bisect and an increment."""

    def __init__(self, bounds_ms: tuple[float, ...] = LATENCY_BUCKETS_MS):
        self.bounds_ms = bounds_ms
        self.counts = [0] * (len(bounds_ms) + 1)
        self.count = 0
        self.sum_ms = 0.0

    def copy(self) -> LatencyHistogram:
        """A copy that stays as it is while this one goes on counting."""
        out = LatencyHistogram.__new__(LatencyHistogram)
        out.bounds_ms, out.counts, out.count, out.sum_ms = self.bounds_ms, list(self.counts), self.count, self.sum_ms
        return out

    def observe(self, ms: float) -> None:
        self.counts[bisect.bisect_left(self.bounds_ms, ms)] += 1
        self.count += 1
        self.sum_ms += ms

    def cumulative(self) -> list[int]:
        out, running = [], 0
        for c in self.counts:
            running += c
            out.append(running)
        return out


def nearest_rank(ordered: list[float], q: float) -> float:
    """The `q` quantile (0 to 1) of values sorted ascending, by nearest rank (the value itself, no
    interpolation); `ordered` must not be empty.

    Example:
        >>> nearest_rank([1.0, 2.0, 3.0, 4.0], 0.5)
        3.0
    """
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p95 and p99 of `values` (nearest rank), rounded to microseconds; zeros when empty.

    Example:
        >>> percentiles([float(v) for v in range(1, 101)])
        {'p50': 51.0, 'p95': 96.0, 'p99': 100.0}
    """
    ordered = sorted(values)
    if not ordered:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    return {name: round(nearest_rank(ordered, q), 3) for name, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))}
