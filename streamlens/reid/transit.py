"""Transit times between cameras, learned from the links the run is sure of: `Transits`.

For each ordered pair of cameras (from, to), the gap between a track's last sighting in `from`
and its linked track's first sighting in `to` (negative where the views overlap and the object was
seen in both at once), over the last `KEEP` confident links. Once a pair has `MIN_LINKS` of them,
`window(from, to)` is the band where later links may fall: from the 10th to the 90th percentile,
widened on each side by half that spread and at least `MIN_SLACK_S` (a few odd links move the
percentiles little, and traffic that slows down still fits). Before that the pair has no window:
only appearance decides. No map and no calibration: a pair never linked has nothing to learn.

Example:
    >>> transits = Transits()
    >>> for gap in (2.0, 2.5, 3.0, 2.2, 2.8): transits.learn("a", "b", gap)
    >>> transits.window("a", "b"), transits.window("b", "a")
    ((1.08, 3.92), None)
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: confident links kept per ordered pair (the oldest goes first)
KEEP = 50
#: links a pair needs before its window applies
MIN_LINKS = 5
#: the least widening of the band on each side, seconds
MIN_SLACK_S = 1.0


class Transits:
    """The gaps of the confident links per ordered pair of cameras (see the module's docstring)."""

    def __init__(self) -> None:
        self._gaps: dict[tuple[str, str], deque] = {}

    def learn(self, source: str, target: str, gap_s: float) -> None:
        """A confident link from `source`'s track to `target`'s, `gap_s` apart."""
        self._gaps.setdefault((source, target), deque(maxlen=KEEP)).append(float(gap_s))

    def window(self, source: str, target: str) -> tuple[float, float] | None:
        """The band of gaps (seconds, low and high) a link from `source` to `target` may have; None
        while the pair has fewer than `MIN_LINKS` confident links."""
        gaps = self._gaps.get((source, target))
        if gaps is None or len(gaps) < MIN_LINKS:
            return None
        low, high = np.percentile(np.asarray(gaps), [10, 90])
        slack = max(MIN_SLACK_S, 0.5 * (high - low))
        return round(float(low - slack), 3), round(float(high + slack), 3)

    def figures(self) -> dict:
        """Per pair `from>to`: the confident links kept and the median gap."""
        return {f"{a}>{b}": {"links": len(g), "median_s": round(float(np.median(g)), 3)}
                for (a, b), g in self._gaps.items() if g}


__all__ = ["Transits", "KEEP", "MIN_LINKS", "MIN_SLACK_S"]
