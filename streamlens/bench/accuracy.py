"""How close what a subscriber received is to detecting every frame, and how late detections came.

Scored per stream, over the frames of the measured window that the subscriber received, against
the `Reference` (the same detector on every frame of the clip):

- Which clip frame a message shows: its `pts` looked up in the reference's `pts` (nearest, within
  half a frame). `pts` restarts with every loop of the clip while `frame` keeps counting, so this
  holds across loops whatever a pass's length; a message whose `pts` matches no clip frame is
  `unmapped` and not scored.
- F1 of boxes at IoU >= 0.5, matched per frame by the Hungarian method (`match_by_iou`),
  class-aware: a box matches only a reference box of the same class id (a car must be a car).
  Over the stream's scored frames, TP = matched pairs, precision = TP / delivered boxes,
  recall = TP / reference boxes, F1 = 2 TP / (delivered + reference boxes). A stream where neither
  side has any box agrees perfectly: F1 1.0. Frames not received are not scored: the kept figure
  already counts them, and F1 is the accuracy of what was delivered.
- New objects: a reference box with no match (same rules) on the reference's previous two clip
  frames (before clip frame 0 come the clip's last frames, as in a looping stream) starts an
  object, when the reference goes on showing it (same matching, frame to frame) for at least
  `MIN_TRAIL` frames; the object is followed frame by frame through the reference. Its
  wait is how many frames after its first frame the received stream first had a box matched to it
  (0: on its first frame). Counted from received frames only; an object whose reference trail
  ends before any box of the stream matched it is `never` found; one whose trail outlives the
  window before it was found is `censored` (neither is in the percentiles).
- Detection delay (`detection_delays`): from a keyframe becoming available (`ts`) to the
  subscriber receiving the first result that carries its detections. With a `detected_frame`
  field in frame messages (the index of the newest keyframe whose detections the result's boxes
  carry) every keyframe is timed, late ones included (`method: detected_frame`). Without it only
  keyframes published with their own detections (`keyframe: true`) can be timed
  (`method: keyframes in time`): keyframes that went out late are missing from it.
- Age (`AgeTally`): a received frame's age is how many frames after the keyframe whose detections
  its boxes carry it is (its `frame` less its `detected_frame`: 0 on a keyframe published with its
  own detections); F1 by age, each age's share of the frames, the mean age, and the mean gap
  between the keyframes whose detections reached the subscriber. What a load costs in F1 is read
  there: the detector's share of frames sets the gaps, its delay and the spacing of its keyframes
  add to the age (tools/results/age.md gives F1 by age for a file, where nothing is late).

Example:
    >>> ref = Reference.from_frames([0.0, 0.1], [[[0, 0, 10, 10]], [[0, 0, 10, 10]]], [[2], [2]])
    >>> s = score_stream([0, 1], [0.0, 0.1], [[[0, 0, 10, 10, 2]], []], ref)
    >>> s["tp"], s["f1"], s["new_objects"]["count"]
    (1, 0.6667, 0)
"""

from __future__ import annotations

import bisect

import numpy as np

from ..metrics import nearest_rank
from ..track.matching import box_iou, match_by_iou
from .reference import Reference

#: the IoU at which a delivered box matches a reference box
MATCH_IOU = 0.5
#: frames in a row the reference must show an object for it to count as one (new-object waits)
MIN_TRAIL = 5


def match_frame(found: np.ndarray, found_cls: np.ndarray, wanted: np.ndarray, wanted_cls: np.ndarray) -> np.ndarray:
    """Matched pairs `(K, 2)` of [found row, wanted row]: Hungarian on IoU, pairs of different
    classes never match, IoU >= `MATCH_IOU`."""
    iou = box_iou(found, wanted)
    if iou.size:
        iou = np.where(np.asarray(found_cls).reshape(-1, 1) == np.asarray(wanted_cls).reshape(1, -1), iou, 0.0)
    return match_by_iou(iou, MATCH_IOU)[0]


def clip_frames(pts, ref_pts: np.ndarray) -> np.ndarray:
    """The clip frame of each `pts` (nearest reference pts within half a frame), -1 where none."""
    pts = np.asarray([np.nan if p is None else p for p in pts], np.float64)
    if len(ref_pts) == 0 or len(pts) == 0:
        return np.full(len(pts), -1, np.int64)
    step = float(np.median(np.diff(ref_pts))) if len(ref_pts) > 1 else 1.0
    right = np.clip(np.searchsorted(ref_pts, pts), 1, len(ref_pts) - 1) if len(ref_pts) > 1 else np.zeros(len(pts), int)
    left = np.maximum(right - 1, 0)
    nearest = np.where(np.abs(ref_pts[left] - pts) <= np.abs(ref_pts[right] - pts), left, right)
    ok = np.abs(ref_pts[nearest] - pts) <= step / 2
    return np.where(ok, nearest, -1).astype(np.int64)


def reference_links(ref: Reference) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per clip frame f: the row on frame (f + 1) % N that each box continues as (-1: none), and
    which boxes start an object: matched by no box on frame (f - 1) % N nor (f - 2) % N (a detector
    that misses an object on one frame does not make it new), and continued on at least
    `MIN_TRAIL` frames in a row (a box the detector shows on a frame or two is flicker, not an
    object). Kept on `ref`."""
    if ref._links is None:
        n = len(ref)
        following, starts = [], [np.ones(len(ref.boxes(f)), bool) for f in range(n)]
        for f in range(n):
            nxt = np.full(len(ref.boxes(f)), -1, np.int64)
            for step in (1, 2) if n > 2 else (1,) if n > 1 else ():
                g = (f + step) % n
                for a, b in match_frame(ref.boxes(f), ref.classes(f), ref.boxes(g), ref.classes(g)):
                    starts[g][b] = False
                    if step == 1:
                        nxt[a] = b
            following.append(nxt)
        for f in range(n):
            for row in np.flatnonzero(starts[f]):
                clip, r, length = f, int(row), 1
                while length < MIN_TRAIL and (r := int(following[clip][r])) >= 0:
                    clip, length = (clip + 1) % n, length + 1
                starts[f][row] = length >= MIN_TRAIL
        ref._links = [following, starts]
    return ref._links[0], ref._links[1]


def _rows(boxes) -> tuple[np.ndarray, np.ndarray]:
    """A message's boxes as `[x1, y1, x2, y2, cls]` rows: (xyxy (M, 4), cls (M,))."""
    a = np.asarray(boxes, np.float64).reshape(-1, 5)
    return a[:, :4], a[:, 4].astype(np.int64)


def spread(values: list[float]) -> dict:
    """p50, p95 (nearest rank) and the maximum of `values`; None each when there are none."""
    if not values:
        return {"p50": None, "p95": None, "max": None}
    ordered = sorted(values)
    return {"p50": round(float(nearest_rank(ordered, 0.5)), 2), "p95": round(float(nearest_rank(ordered, 0.95)), 2),
            "max": round(float(ordered[-1]), 2)}


def score_stream(frames, pts, boxes, ref: Reference, counts: list | None = None) -> dict:
    """F1, precision, recall and the new-object waits of one stream's received frames (`frames`:
    stream indices, `pts`, `boxes`: per message `[x1, y1, x2, y2, cls]` rows), see the module docs.
    `counts`, when given, gets per message `(matched, delivered, reference)` boxes, or None for a
    message of no clip frame (a timeline adds them up by window without matching again)."""
    clips = clip_frames(pts, ref.pts)
    tp = shown = wanted = scored = 0
    hits: dict[int, tuple[int, set]] = {}  # stream frame -> (clip frame, reference rows matched)
    for g, c, found in zip(frames, clips, boxes):
        if c < 0:
            if counts is not None:
                counts.append(None)
            continue
        xyxy, cls = _rows(found)
        pairs = match_frame(xyxy, cls, ref.boxes(c), ref.classes(c))
        if counts is not None:
            counts.append((len(pairs), len(xyxy), len(ref.boxes(c))))
        tp += len(pairs)
        shown += len(xyxy)
        wanted += len(ref.boxes(c))
        scored += 1
        hits[int(g)] = (int(c), {int(b) for _, b in pairs})
    f1 = 2 * tp / (shown + wanted) if shown + wanted else 1.0
    return {"frames": scored, "unmapped": int(len(clips) - scored), "tp": tp, "delivered": shown, "reference": wanted,
            "precision": round(tp / shown, 4) if shown else None, "recall": round(tp / wanted, 4) if wanted else None,
            "f1": round(f1, 4), "new_objects": new_object_waits(hits, ref)}


def new_object_waits(hits: dict[int, tuple[int, set]], ref: Reference) -> dict:
    """Frames each new object of the reference waited for a matching box (see the module docs);
    `hits`: per received stream frame, its clip frame and the reference rows matched there."""
    if not hits:
        return {"count": 0, "wait_frames": spread([]), "never": 0, "censored": 0, "waits": []}
    following, starts = reference_links(ref)
    n, last = len(ref), max(hits)
    waits, never, censored = [], 0, 0
    for g, (c, _) in hits.items():
        for row in np.flatnonzero(starts[c]):
            d, clip, r = 0, c, int(row)
            while True:
                if g + d > last:
                    censored += 1
                    break
                seen = hits.get(g + d)
                if seen is not None and seen[0] == clip and r in seen[1]:
                    waits.append(d)
                    break
                r = int(following[clip][r])
                if r < 0:
                    never += 1
                    break
                d, clip = d + 1, (clip + 1) % n
    return {"count": len(waits) + never + censored, "wait_frames": spread(waits), "never": never,
            "censored": censored, "waits": waits}


def detection_delays(frames, ts, recv, key, detected=None, start: float = -np.inf,
                     end: float = np.inf) -> tuple[list[float], str]:
    """Milliseconds from each keyframe's `ts` to the receipt of the first result carrying its
    detections, and the method (see the module docs), from one stream's received messages in
    order, for the keyframes with `start <= ts < end`. `detected`: each message's `detected_frame`
    (None entries, or None: not published)."""
    frames, ts, recv = (np.asarray(v, np.float64) for v in (frames, ts, recv))
    have = detected is not None and any(d is not None for d in detected)
    delays: list[float] = []
    if have:
        det = np.asarray([-1 if d is None else d for d in detected], np.float64)
        newest = np.maximum.accumulate(det) if len(det) else det  # messages are in order per stream
        when = dict(zip(frames.tolist(), ts.tolist()))
        for j in np.unique(det[det >= 0]):
            if j not in when or not start <= when[j] < end:
                continue  # outside the window, or not received itself: its ts is unknown
            first = int(np.searchsorted(newest, j))
            if first < len(newest):
                delays.append((recv[first] - when[j]) * 1000.0)
    else:
        mask = np.asarray(key, bool) & (ts >= start) & (ts < end)
        delays = ((recv[mask] - ts[mask]) * 1000.0).tolist()
    return delays, "detected_frame" if have else "keyframes in time"


#: the ages `AgeTally` reports F1 by: each bucket from its value up to the next one's
AGE_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15)
#: each bucket's name in the report, after `none` (no detections yet): "0", ..., "6-7", ..., "15+"
AGE_LABELS = ("none",) + tuple(str(low) if high == low + 1 else f"{low}-{high - 1}"
                               for low, high in zip(AGE_BUCKETS, AGE_BUCKETS[1:])) + (f"{AGE_BUCKETS[-1]}+",)


class AgeTally:
    """F1 by the age of the detections each received frame carries (see the module docs), pooled
    over streams: `add` one stream's scored frames, `report()` the figures.

    Example:
        >>> tally = AgeTally()      # keyframes 10 and 12; 12's detections came back on frame 13
        >>> tally.add([10, 11, 12, 13], [10, 10, 10, 12], [(2, 2, 2), (1, 2, 2), (1, 2, 2), (2, 2, 2)])
        >>> r = tally.report()      # counts: (boxes matched, delivered, in the reference)
        >>> r["mean_age"], r["mean_gap"], [(row["age"], row["frames"], row["f1"]) for row in r["rows"]]
        (1.0, 2.0, [('0', 1, 1.0), ('1', 2, 0.75), ('2', 1, 0.5)])
    """

    def __init__(self):
        #: per `AGE_LABELS` row: boxes matched, delivered, in the reference, and frames
        self._sums = np.zeros((len(AGE_LABELS), 4), np.int64)
        self._age_total = 0
        self._gap_total = self._gaps = 0

    def add(self, frames, detected, counts) -> None:
        """One stream's scored frames in order: their indices, the `detected_frame` of each (None:
        no detections yet) and `score_stream`'s `counts` (None for a frame not scored)."""
        applied = None  # the newest keyframe whose detections reached this stream
        for frame, det, count in zip(frames, detected, counts):
            if det is not None and (applied is None or det > applied):
                if applied is not None:
                    self._gap_total, self._gaps = self._gap_total + det - applied, self._gaps + 1
                applied = det
            if count is None:
                continue
            age = None if det is None else max(0, frame - det)
            self._sums[0 if age is None else bisect.bisect_right(AGE_BUCKETS, age)] += (*count, 1)
            self._age_total += age or 0

    def report(self) -> dict:
        frames = int(self._sums[:, 3].sum())
        aged = frames - int(self._sums[0, 3])
        rows = [{"age": label, "frames": int(n), "share": round(n / frames, 4),
                 "f1": round(2 * tp / (shown + wanted), 4) if shown + wanted else None}
                for label, (tp, shown, wanted, n) in zip(AGE_LABELS, self._sums.tolist()) if n]
        return {"mean_age": round(self._age_total / aged, 2) if aged else None,
                "mean_gap": round(self._gap_total / self._gaps, 2) if self._gaps else None, "rows": rows}


def combine(streams: dict[str, dict]) -> dict:
    """All streams' `score_stream` results together: F1 pooled over every scored frame, the worst
    stream's F1, and the new-object waits of every stream."""
    tp = sum(s["tp"] for s in streams.values())
    shown = sum(s["delivered"] for s in streams.values())
    wanted = sum(s["reference"] for s in streams.values())
    worst = min((s["f1"] for s in streams.values()), default=None)
    return {"f1": round(2 * tp / (shown + wanted), 4) if shown + wanted else (1.0 if streams else None),
            "f1_min": worst, "precision": round(tp / shown, 4) if shown else None,
            "recall": round(tp / wanted, 4) if wanted else None,
            "new_object_wait_frames": spread([w for s in streams.values() for w in s["new_objects"]["waits"]]),
            "new_objects": sum(s["new_objects"]["count"] for s in streams.values()),
            "new_objects_never": sum(s["new_objects"]["never"] for s in streams.values())}


def detections_f1(ours, theirs) -> float:
    """F1 of boxes at IoU >= `MATCH_IOU`, class-aware, pooled over frames: two detectors' outputs
    (`sv.Detections` per frame, in the same frame order) compared, e.g. one runtime against another.
    1.0 when neither has any box.

    Example:
        >>> import supervision as sv
        >>> a = sv.Detections(np.array([[0, 0, 10, 10]], np.float32), class_id=np.array([2]))
        >>> detections_f1([a, a], [a, sv.Detections.empty()])
        0.6667
    """
    tp = shown = wanted = 0
    for a, b in zip(ours, theirs, strict=True):
        tp += len(match_frame(a.xyxy, a.class_id, b.xyxy, b.class_id))
        shown, wanted = shown + len(a), wanted + len(b)
    return round(2 * tp / (shown + wanted), 4) if shown + wanted else 1.0


__all__ = ["AgeTally", "AGE_BUCKETS", "AGE_LABELS", "score_stream", "detections_f1", "new_object_waits",
           "detection_delays", "spread", "match_frame", "clip_frames", "combine", "reference_links", "MATCH_IOU"]
