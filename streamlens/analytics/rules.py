"""The rules of `analytics:`: lines that count crossings by direction, zones that watch who is in them.

Both read one point of each tracked box, its anchor (`bottom_center` by default: where an object
touches the ground), on every frame, and keep per track only what they need to say when something
happened. Neither fires again for an object that stands still: a parked car in a zone entered it
once, and a car waiting on a line crosses it once, when it drives on.

Lines. A track's side of the line is decided only outside a band of `margin_px` on each side of it,
so a box that jitters on the line changes no side, and a change of side counts once the anchor has
stayed decidedly on the new side for `min_frames` frames in a row, so a box carried past the line
by motion and put back by the next keyframe's detection crosses nothing (supervision's
`minimum_crossing_threshold` and Frigate's `inertia`, the complaints turned into settings); a
crossing is a change of side that passes between the line's two end points. The direction is `in` when the
anchor goes from the right of the line (seen from its first point towards its second) to its left,
else `out`, as supervision's `LineZone` names them: across a line drawn from left to right, `in` is
upwards in the picture. (Before issue 26 streamlens named them the other way round.) A track lost
and found again across the line (the same id) crosses once; a U-turn before the line crosses
nothing, one past the band crosses twice, in and out.

Zones. An object is in a zone once its anchor has been inside for `inertia` frames in a row and out
of it once outside for as many (or when its track ends), so a box on the zone's edge does not
flicker in and out. `dwell_s` is the time from entering to leaving; `loiter` fires once an object
has stayed `loiter_s`.

Example:
    >>> gate = LineRule("gate", ((0, 50), (100, 50)), margin_px=2)
    >>> [gate.update(7, (50, y)) for y in (40, 49, 51, 49, 60, 44, 60, 62)]   # jitter, a step back, down across
    [None, None, None, None, None, None, None, 'out']
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: the point of a box a rule watches: its x, y as fractions of the box's width and height
ANCHORS = {"bottom_center": (0.5, 1.0), "center": (0.5, 0.5), "top_center": (0.5, 0.0),
           "bottom_left": (0.0, 1.0), "bottom_right": (1.0, 1.0)}


def anchor_points(xyxy: np.ndarray, anchor: str = "bottom_center") -> np.ndarray:
    """(N, 2) points of (N, 4) boxes: the `anchor` of each.

    Example:
        >>> anchor_points(np.array([[10, 20, 30, 60.]])).tolist()
        [[20.0, 60.0]]
    """
    fx, fy = ANCHORS[anchor]
    xyxy = np.asarray(xyxy, np.float64).reshape(-1, 4)
    return np.column_stack([xyxy[:, 0] + fx * (xyxy[:, 2] - xyxy[:, 0]), xyxy[:, 1] + fy * (xyxy[:, 3] - xyxy[:, 1])])


def _cross(a, b, p) -> float:
    """Which side of a -> b the point p is on: > 0 right (image y grows downwards), < 0 left."""
    return (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])


@dataclass
class _Side:
    side: int  # +1 or -1: the side it is decidedly on
    point: tuple[float, float]  # where it last was on that side
    pending: int = 0  # frames in a row decidedly on the other side
    crossed: tuple | None = None  # (from, to): the step that took it to the other side


@dataclass
class LineRule:
    """A line between two points (source pixels) that counts the tracks that cross it, by direction."""

    name: str
    points: tuple[tuple[float, float], tuple[float, float]]
    margin_px: float = 4.0
    min_frames: int = 2
    counts: dict = field(default_factory=lambda: {"in": 0, "out": 0})
    _sides: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        (ax, ay), (bx, by) = self.points
        self._length = max(1e-9, float(np.hypot(bx - ax, by - ay)))

    def distances(self, points: np.ndarray) -> np.ndarray:
        """Signed distances (pixels) of (N, 2) points from the line: > 0 on its right."""
        (ax, ay), (bx, by) = self.points
        return ((bx - ax) * (points[:, 1] - ay) - (by - ay) * (points[:, 0] - ax)) / self._length

    def update(self, track: int, point, distance: float | None = None) -> str | None:
        """Where track `track`'s anchor is now (`distance`: its `distances` value, when known); the
        direction if that crossed the line, else None."""
        a, b = self.points
        if distance is None:
            distance = _cross(a, b, point) / self._length  # signed, in pixels
        if abs(distance) <= self.margin_px:
            return None  # on the line: no side decided, nothing undone
        side = 1 if distance > 0 else -1
        here = (float(point[0]), float(point[1]))
        state = self._sides.get(track)
        if state is None:
            self._sides[track] = _Side(side, here)
            return None
        if side == state.side:  # still (or back) on its side: a change not yet kept is undone
            state.point, state.pending, state.crossed = here, 0, None
            return None
        state.pending += 1
        if state.crossed is None:
            state.crossed = (state.point, here)
        if state.pending < self.min_frames:
            return None
        start, end = state.crossed
        self._sides[track] = _Side(side, here)
        if not self._between_ends(start, end):
            return None
        direction = "in" if side < 0 else "out"  # to the left: supervision's `in`
        self.counts[direction] += 1
        return direction

    def forget(self, track: int) -> None:
        """Track `track` has ended."""
        self._sides.pop(track, None)

    def _between_ends(self, p, q) -> bool:
        """Whether the path p -> q passes the line between its end points (not beyond them)."""
        a, b = self.points
        d1, d2 = _cross(a, b, p), _cross(a, b, q)
        t = d1 / (d1 - d2) if d1 != d2 else 0.5  # where on p -> q it meets the line's extension
        x, y = p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])
        along = ((x - a[0]) * (b[0] - a[0]) + (y - a[1]) * (b[1] - a[1])) / self._length ** 2
        return 0.0 <= along <= 1.0


@dataclass
class _Presence:
    inside: bool = False
    streak: int = 0  # frames in a row on the other side of the zone's edge than `inside` says
    entered: float | None = None
    loitered: bool = False


@dataclass
class ZoneRule:
    """A polygon (source pixels) that says who is in it, for how long, and who loiters."""

    name: str
    polygon: np.ndarray
    inertia: int = 3
    loiter_s: float | None = None
    _presence: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.polygon = np.asarray(self.polygon, np.float64).reshape(-1, 2)
        xi, yi = self.polygon[:, 0], self.polygon[:, 1]
        self._edges = (xi, yi, np.roll(xi, 1), np.roll(yi, 1))  # each edge's two ends

    def contains(self, points: np.ndarray) -> np.ndarray:
        """Which of (N, 2) points are inside the polygon (even-odd rule, all at once)."""
        x, y = points[:, :1], points[:, 1:2]
        xi, yi, xj, yj = self._edges
        with np.errstate(divide="ignore", invalid="ignore"):
            crosses = ((yi > y) != (yj > y)) & (x < (xj - xi) * (y - yi) / (yj - yi) + xi)
        return crosses.sum(axis=1) % 2 == 1

    def update(self, track: int, inside: bool, t: float) -> tuple[bool, list[tuple[str, dict]]]:
        """Whether track `track`'s anchor is inside (`contains`) at time `t` (seconds); whether the
        object is in the zone now, and the events that makes: ("zone_enter", {}), ("zone_exit",
        {"dwell_s": ...}), ("loiter", {"dwell_s": ...})."""
        state = self._presence.get(track)
        if state is None:
            state = self._presence[track] = _Presence()
        events: list[tuple[str, dict]] = []
        state.streak = state.streak + 1 if inside != state.inside else 0
        if state.streak >= self.inertia:
            state.inside, state.streak = inside, 0
            if inside:
                state.entered, state.loitered = t, False
                events.append(("zone_enter", {}))
            else:
                events.append(("zone_exit", {"dwell_s": round(t - state.entered, 3)}))
                state.entered = None
        if state.inside and self.loiter_s is not None and not state.loitered and t - state.entered >= self.loiter_s:
            state.loitered = True
            events.append(("loiter", {"dwell_s": round(t - state.entered, 3)}))
        return state.inside, events

    def occupancy(self) -> int:
        return sum(1 for state in self._presence.values() if state.inside)

    def forget(self, track: int, t: float) -> list[tuple[str, dict]]:
        """Track `track` has ended at time `t`: it leaves the zone if it was in it."""
        state = self._presence.pop(track, None)
        if state is None or not state.inside:
            return []
        return [("zone_exit", {"dwell_s": round(t - state.entered, 3)})]


__all__ = ["ANCHORS", "anchor_points", "LineRule", "ZoneRule"]
