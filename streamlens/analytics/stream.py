"""One stream's analytics: its rules run on every frame's tracked objects, and the events they make.

`StreamAnalytics.update(t, xyxy, ids, labels, scores)` takes one frame's objects (untracked ones,
id -1, are left out: a rule needs to know an object from one frame to the next) and returns a
`FrameAnalytics`: per object the zones it is in, the running counts of every line (`in`, `out`, per
class too) and zone (objects in it now), and the events of this frame, in order:

- `object_start` the first frame a track is seen; `object_update` when its label, its zones or
  its attributes (what the secondary classifiers know of it) change; `object_end` once it has not been seen for `end_after_s` (with `first_ts`, `last_ts`,
  `best_score` and every zone it entered): the life of a tracked object as Frigate users know it;
- `line_cross` (`line`, `direction`), `zone_enter`, `zone_exit` (`dwell_s`), `loiter` (`dwell_s`).

A rule with `classes` watches only objects of those labels. Each event is made once: the analytics
run once per published frame, so a late keyframe's correction changes later frames, never an
event already made.

Example:
    >>> from streamlens.analytics.rules import LineRule
    >>> a = StreamAnalytics(lines=[(LineRule("gate", ((0, 50), (100, 50))), None)])
    >>> out = a.update(0.0, np.array([[40, 20, 60, 40.]]), np.array([7]), ["car"], np.array([0.9]))
    >>> [e["event"] for e in out.events]
    ['object_start']
    >>> for t in (0.1, 0.2):  # past the line, two frames in a row
    ...     out = a.update(t, np.array([[40, 40, 60, 60.]]), np.array([7]), ["car"], np.array([0.9]))
    >>> [(e["event"], e.get("direction")) for e in out.events], out.counts["gate"]["out"]   # down across it
    ([('line_cross', 'out')], 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .rules import LineRule, ZoneRule, anchor_points

#: a track not seen for this long has ended (`object_end`): the tracker's default `lost_s`
END_AFTER_S = 2.0


@dataclass
class FrameAnalytics:
    """What one frame's analytics found: `zones[i]` the zones object i is in (None for an
    untracked object), `speeds[i]` its speed in km/h when known, `counts` the running counts, and
    `events` (dicts with `event`, `object` and the event's own keys)."""

    zones: list
    counts: dict
    events: list
    speeds: list = field(default_factory=list)
    #: indices of the objects seen at their best here (a new track, or its best score so far)
    best: list = field(default_factory=list)
    #: the stream's rules as drawn: `lines` [(name, ((x, y), (x, y)))], `zones` [(name, Nx2 array)],
    #: in source pixels (the same object on every frame of the stream)
    geometry: Geometry | None = None


@dataclass(frozen=True)
class Geometry:
    """Where a stream's rules lie, in source pixels: what the annotators draw."""

    lines: tuple = ()
    zones: tuple = ()


@dataclass
class _Track:
    first_ts: float
    last_ts: float
    label: str
    best_score: float
    box: list
    score: float = 0.0  # on its newest frame
    zones: tuple = ()
    entered: list = field(default_factory=list)  # every zone entered, in order
    history: list = field(default_factory=list)  # (t, anchor) of the last half second, for speed
    attributes: dict | None = None  # what the secondary classifiers know of it


#: `analytics.zone_anchor: mask`: an object is in a zone when at least this share of its mask is
MASK_IN_ZONE = 0.5


class StreamAnalytics:
    """The rules of one stream. `lines` and `zones` are (rule, classes) pairs (classes: a set of
    labels, or None for all); `anchor` is the box point the rules watch; anchor motion becomes km/h
    by `pixels_per_metre`, or by `ground`, a 3x3 homography from source pixels to metres on the
    ground plane (`ground_homography`); neither: no speed."""

    def __init__(self, lines: list[tuple[LineRule, set | None]] = (), zones: list[tuple[ZoneRule, set | None]] = (),
                 anchor: str = "bottom_center", pixels_per_metre: float | None = None,
                 end_after_s: float = END_AFTER_S, ground: np.ndarray | None = None, zone_anchor: str = "point"):
        self.zone_anchor = zone_anchor
        self.lines = list(lines)
        self.zones = list(zones)
        self.anchor = anchor
        self.pixels_per_metre = pixels_per_metre
        self.ground = None if ground is None else np.asarray(ground, np.float64)
        self.end_after_s = end_after_s
        self._tracks: dict[int, _Track] = {}
        self._line_classes = {rule.name: {} for rule, _ in self.lines}  # line -> label -> {"in", "out"}
        self.geometry = Geometry(tuple((rule.name, rule.points) for rule, _ in self.lines),
                                 tuple((rule.name, rule.polygon) for rule, _ in self.zones))

    def update(self, t: float, xyxy: np.ndarray, ids: np.ndarray, labels, scores: np.ndarray,
               attributes: list | None = None, masks=None) -> FrameAnalytics:
        """One frame's objects (`attributes`: per object what the secondary models know of its
        track, or None; `masks`: per object its mask, a `BoxMask`, or None); what the rules found.
        With `zone_anchor: mask`, an object with a mask is in a zone when at least `MASK_IN_ZONE` of
        its mask is; one without, when its anchor point is."""
        points = anchor_points(xyxy, self.anchor)
        distances = [rule.distances(points).tolist() for rule, _ in self.lines]  # every object at once
        insides = [rule.contains(points).tolist() for rule, _ in self.zones]
        if self.zone_anchor == "mask" and masks is not None and self.zones:
            for i, mask in enumerate(masks):
                covered = mask.points() if mask is not None else ()
                for j, (rule, _) in enumerate(self.zones if len(covered) else ()):
                    insides[j][i] = bool(rule.contains(covered).mean() >= MASK_IN_ZONE)
        events: list[dict] = []
        zones_of: list = []
        speeds: list = []
        seen = set()
        best = []
        for i, track_id in enumerate(np.asarray(ids).tolist()):
            if track_id < 0:
                zones_of.append(None)
                speeds.append(None)
                continue
            seen.add(track_id)
            label, score, box = str(labels[i]), float(scores[i]), xyxy[i].tolist()
            point = points[i]
            track = self._tracks.get(track_id)
            if track is None:
                track = self._tracks[track_id] = _Track(t, t, label, score, box, score=score)
                events.append(self._event("object_start", track_id, track))
                best.append(i)
            elif score > track.best_score:
                track.best_score = score
                best.append(i)
            changed = track.label != label
            known = attributes[i] if attributes is not None else None
            if known and known != track.attributes:
                changed, track.attributes = True, known
            track.last_ts, track.label, track.box, track.score = t, label, box, score
            for j, (rule, classes) in enumerate(self.lines):
                if classes is None or label in classes:
                    direction = rule.update(track_id, point, distances[j][i])
                    if direction is not None:
                        per_class = self._line_classes[rule.name].setdefault(label, {"in": 0, "out": 0})
                        per_class[direction] += 1
                        events.append(self._event("line_cross", track_id, track, line=rule.name, direction=direction))
            inside = []
            for j, (rule, classes) in enumerate(self.zones):
                if classes is None or label in classes:
                    now_in, found = rule.update(track_id, insides[j][i], t)
                    for kind, extra in found:
                        if kind == "zone_enter":
                            track.entered.append(rule.name)
                        events.append(self._event(kind, track_id, track, zone=rule.name, **extra))
                    if now_in:
                        inside.append(rule.name)
            inside = tuple(inside)
            if inside != track.zones:
                changed = True
                track.zones = inside
            if changed:
                events.append(self._event("object_update", track_id, track))
            zones_of.append(list(inside))
            speeds.append(self._speed(track, t, point))
        events += self._ended(t, seen)
        return FrameAnalytics(zones_of, self.counts(), events, speeds, best, self.geometry)

    def counts(self) -> dict:
        """Every line's `in` and `out` (and per class, `classes`), every zone's objects now."""
        out: dict = {rule.name: {**rule.counts, "classes": {k: dict(v) for k, v in self._line_classes[rule.name].items()}}
                     for rule, _ in self.lines}
        out.update({rule.name: rule.occupancy() for rule, _ in self.zones})
        return out

    def _speed(self, track: _Track, t: float, point) -> float | None:
        """km/h over the track's last half second of anchor positions (in metres on the ground
        with `ground`, else pixels over `pixels_per_metre`)."""
        if self.ground is not None:
            x, y, w = self.ground @ (float(point[0]), float(point[1]), 1.0)
            if w <= 0:  # beyond the horizon of the ground plane: no place on the ground
                return None
            where, scale = (x / w, y / w), 1.0
        elif self.pixels_per_metre is not None:
            where, scale = (float(point[0]), float(point[1])), self.pixels_per_metre
        else:
            return None
        track.history.append((t, where))
        while len(track.history) > 2 and t - track.history[0][0] > 0.5:
            track.history.pop(0)
        (t0, p0), (t1, p1) = track.history[0], track.history[-1]
        if t1 - t0 <= 0:
            return None
        metres = float(np.hypot(p1[0] - p0[0], p1[1] - p0[1])) / scale
        return round(metres / (t1 - t0) * 3.6, 1)

    def _ended(self, t: float, seen: set) -> list[dict]:
        events = []
        for track_id in [k for k, tr in self._tracks.items() if k not in seen and t - tr.last_ts >= self.end_after_s]:
            track = self._tracks.pop(track_id)
            for rule, _ in self.lines:
                rule.forget(track_id)
            for rule, _ in self.zones:
                for kind, extra in rule.forget(track_id, track.last_ts):
                    events.append(self._event(kind, track_id, track, zone=rule.name, **extra))
            events.append(self._event("object_end", track_id, track, first_ts=track.first_ts, last_ts=track.last_ts,
                                      best_score=round(track.best_score, 4), zones=list(dict.fromkeys(track.entered))))
        return events

    @staticmethod
    def _event(kind: str, track_id: int, track: _Track, **extra) -> dict:
        obj = {"id": track_id, "label": track.label, "score": round(track.score, 4),
               "box": [round(v, 2) for v in track.box]}
        if track.attributes:
            obj["attributes"] = track.attributes
        return {"event": kind, **extra, "object": obj}


__all__ = ["StreamAnalytics", "FrameAnalytics", "Geometry", "END_AFTER_S"]
