"""Where two cameras meet, learned from the links the run is sure of: `Places`.

A confident link (streamlens/reid/links.py) says that one object left camera `a` where its track
was last seen and came into camera `b` where its track was first seen: those two boxes are one
place seen from two views. `Places` keeps, per unordered pair of cameras, the offset between such
boxes' centres (each as a fraction of its own frame's width and height), over the last `KEEP`
confident links, whichever way the objects went: an object going the other way crosses the same
boundary between the views. Once a pair has `MIN_LINKS`, `fits(a, box_a, b, box_b)` says how far
(in units of the tolerance; at most 1 fits) box `box_b` of camera `b` is from where `box_a` of
camera `a` would show in `b`: the median offset, with a tolerance per axis of three times the
offsets' median absolute deviation, from `MIN_TOLERANCE` to `MAX_TOLERANCE`.

It is a translation between the views, not a map: right where the views meet (adjacent or
overlapping cameras, the common case for a hand-over) and blind elsewhere; a link by place alone is
made only at the edges where tracks end and begin, and only where one candidate fits
(links.py). No calibration: a pair never linked confidently has no places.

Example:
    >>> places = Places()
    >>> for x in (0.5, 0.6, 0.7, 0.55, 0.65):
    ...     places.learn("top", (x, 0.95), "bottom", (x + 0.01, 0.05))
    >>> round(places.fits("top", (0.2, 0.9), "bottom", (0.26, 0.0)), 2)   # 0.05 off: half the tolerance
    0.5
    >>> round(places.fits("bottom", (0.26, 0.0), "top", (0.2, 0.9)), 2)   # the other way round
    0.5
    >>> places.fits("top", (0.2, 0.9), "bottom", (0.6, 0.0)) > 1
    True
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: confident links kept per pair of cameras (the oldest goes first)
KEEP = 50
#: links a pair needs before places apply
MIN_LINKS = 5
#: the least and the most tolerance per axis, as a fraction of the frame's side (a few wrong links
#: must not widen it to everything)
MIN_TOLERANCE, MAX_TOLERANCE = 0.1, 0.2


def centre(box, width: float, height: float) -> tuple[float, float]:
    """The centre of `box` (x1, y1, x2, y2 in pixels) as fractions of a `width` x `height` frame."""
    return (0.5 * (box[0] + box[2]) / max(width, 1.0), 0.5 * (box[1] + box[3]) / max(height, 1.0))


class Places:
    """The offsets between views per pair of cameras (see the module's docstring)."""

    def __init__(self) -> None:
        self._offsets: dict[tuple[str, str], deque] = {}

    def learn(self, a: str, where_a: tuple[float, float], b: str, where_b: tuple[float, float]) -> None:
        """One object was at `where_a` (a centre, as fractions) in camera `a` and at `where_b` in `b`."""
        key, sign = ((a, b), 1.0) if a <= b else ((b, a), -1.0)
        offset = sign * (np.asarray(where_b, np.float64) - np.asarray(where_a, np.float64))
        self._offsets.setdefault(key, deque(maxlen=KEEP)).append(offset)

    def fits(self, a: str, where_a: tuple[float, float], b: str, where_b: tuple[float, float]) -> float | None:
        """How far `where_b` in camera `b` is from `where_a` of camera `a` carried into `b`, in
        tolerances (the larger of the two axes; 1 is the edge of what fits); None while the pair
        has no places."""
        key, sign = ((a, b), 1.0) if a <= b else ((b, a), -1.0)
        offsets = self._offsets.get(key)
        if offsets is None or len(offsets) < MIN_LINKS:
            return None
        stack = np.asarray(offsets)
        median = np.median(stack, 0)
        tolerance = np.clip(3.0 * np.median(np.abs(stack - median), 0), MIN_TOLERANCE, MAX_TOLERANCE)
        seen = sign * (np.asarray(where_b, np.float64) - np.asarray(where_a, np.float64))
        return float(np.max(np.abs(seen - median) / tolerance))

    def figures(self) -> dict:
        """Per pair `a|b`: the links kept and the median offset."""
        return {f"{a}|{b}": {"links": len(o), "offset": [round(float(v), 3) for v in np.median(np.asarray(o), 0)]}
                for (a, b), o in self._offsets.items() if o}


__all__ = ["Places", "centre", "KEEP", "MIN_LINKS", "MIN_TOLERANCE", "MAX_TOLERANCE"]
