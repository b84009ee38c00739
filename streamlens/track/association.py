"""ByteTrack's association on a keyframe (Zhang et al. 2022), on plain arrays: which track takes
which detection (`match_stages`), a keyframe's detections as arrays (`Found`), and the clean-up of
a confirmed and a lost track on one box (`without_duplicates`). `KeyframeTracker` (tracker.py)
moves the tracks before, and applies the matches after.

Two choices differ from the ByteTrack paper's MOT17 settings and follow the `trackers` package's
ByteTrack instead, each chosen by leaving out one kind of camera at a time (still, walking, on a
car) over the shared MOTChallenge sequences (tools/results/track_mot.md): the first stage matches
by plain overlap, not overlap weighted by the detection's score (`FIRST_STAGE_BY_SCORE`), and weak
detections keep lost tracks alive too, not only confirmed ones (`WEAK_KEEP_LOST`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import supervision as sv

from .kalman import xywh_to_xyxy
from .matching import box_iou, match_by_distance, match_by_iou
from .tracks import CONFIRMED, LOST, TENTATIVE, TrackTable


#: the first stage's overlap is weighted by the detection's score (the paper's `fuse_score`): off,
#: plain IoU as the `trackers` package's ByteTrack (kept by leave-one-kind-out: on, the held-out
#: kinds lost up to 1.4 HOTA at interval 1, and a rank-scored detector's weak boxes found no track)
FIRST_STAGE_BY_SCORE = False
#: weak detections (second stage) keep lost tracks alive too, not only confirmed ones, as the
#: `trackers` package's ByteTrack (kept by leave-one-kind-out: chosen in every fold)
WEAK_KEEP_LOST = True
#: a motion model that sees no pixels carries a track seen on one keyframe only where it was seen
#: (its velocity is not known until its second match), while its object moves on: at long keyframe
#: intervals a fast object (a near car a third of a second later) no longer overlaps its own first
#: box, so it never gets its second match, and a new track starts on it at every keyframe (ids that
#: last one interval, boxes that stand still). So such tracks (tentative ones, and those a stream's
#: first keyframe confirmed, not yet lost) that overlap nothing are matched too by how far the
#: Kalman filter itself expected them to go (its uncertainty of a new track's velocity, grown with
#: the time since it was seen): within the chi-square 95% gate for four coordinates, as DeepSORT
#: gates its matches. Only boxes that could start a track (a link decides whose box it is, it does
#: not let a box keep a track alive that would have started none), and of about the track's size:
#: the filter's prior on a new track's rate of growth is as loose as on its motion, and let a
#: pedestrian's track of 96x218 px take a 28x64 px box half a second later (KITTI-17, interval 5).
#: Leave-one-kind-out: tools/results/track_mot.md.
TENTATIVE_BY_DISTANCE = True
TENTATIVE_GATE = 9.4877
#: ... neither its width nor its height more than this many times the track's, or less than its
#: share (the tracker applies it, `KeyframeTracker._correct`; 1.5 chosen over 2 and 3 on all three
#: kinds, by 0.002 HOTA over 2: tools/results/track_mot.md)
GATED_SIZE_RATIO = 1.5


def match_stages(states: np.ndarray, buffered: np.ndarray, iou: np.ndarray, scores: np.ndarray,
                 high_score: float, low_score: float, match_iou: float, low_match_iou: float,
                 tentative_match_iou: float, distance: np.ndarray | None = None, weak: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The matches of tracks (their `states`) with detections (their `scores`), in ByteTrack's
    stages, from two overlap matrices (tracks x detections): `buffered` (the boxes of blind tracks
    grown, see `matching.buffered_iou`) and plain `iou`. Returns the matched rows and columns, and
    the confident detections left (which may start tracks). `weak` (per detection, or None): the
    detector's weak boxes (`frame.WEAK`), weak whatever their score says: they only ever take stage 2.

    1. confident detections against confirmed and lost tracks, `buffered` >= `match_iou` (times the
       detection's score with `FIRST_STAGE_BY_SCORE`);
    2. weak detections against the confirmed (and with `WEAK_KEEP_LOST` lost) tracks left,
       `iou` >= `low_match_iou`;
    3. tentative tracks against the confident detections left, `buffered` x score >=
       `tentative_match_iou` (a new track's second match asks for a sure box);
    4. with `distance` (a motion model that sees no pixels: the squared Mahalanobis distance of each
       detection from each track's prediction, `BoxKalmanFilter.distance`; infinite on the rows of
       tracks it does not apply to), the tracks still left against the confident detections left,
       `distance` <= `TENTATIVE_GATE` (see there).
    """
    was_confirmed = states == CONFIRMED
    confident = scores >= high_score if weak is None else (scores >= high_score) & ~weak
    high = np.flatnonzero(confident)
    low = np.flatnonzero((scores >= low_score) & ~confident)
    weighted = buffered * scores[None, :]  # a less sure detection needs more overlap

    # 1. confident detections against confirmed and lost tracks
    pool = np.flatnonzero(was_confirmed | (states == LOST))
    first = weighted if FIRST_STAGE_BY_SCORE else buffered
    pairs, pool_left, high_left = match_by_iou(first[np.ix_(pool, high)], match_iou)
    rows, cols = [pool[pairs[:, 0]]], [high[pairs[:, 1]]]
    # 2. weak detections keep the remaining tracks alive
    alive = pool[pool_left]
    if not WEAK_KEEP_LOST:
        alive = alive[was_confirmed[alive]]
    pairs, _, _ = match_by_iou(iou[np.ix_(alive, low)], low_match_iou)
    rows.append(alive[pairs[:, 0]])
    cols.append(low[pairs[:, 1]])
    # 3. tentative tracks get a second chance against the confident detections left
    tentative = np.flatnonzero(states == TENTATIVE)
    high = high[high_left]
    pairs, _, high_left = match_by_iou(weighted[np.ix_(tentative, high)], tentative_match_iou)
    rows.append(tentative[pairs[:, 0]])
    cols.append(high[pairs[:, 1]])
    # 4. blind: tracks seen once and left, by how far the filter expected them to have gone
    if distance is not None and TENTATIVE_BY_DISTANCE:
        left = np.ones(len(states), bool)
        left[np.concatenate(rows)] = False
        once = np.flatnonzero(left & np.isfinite(distance).any(axis=1))
        high = high[high_left]
        pairs, _, high_left = match_by_distance(distance[np.ix_(once, high)], TENTATIVE_GATE)
        rows.append(once[pairs[:, 0]])
        cols.append(high[pairs[:, 1]])
    return np.concatenate(rows), np.concatenate(cols), high[high_left]


@dataclass(slots=True)
class Found:
    """A keyframe's detections as plain arrays."""

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    class_names: np.ndarray

    @classmethod
    def of(cls, detections: sv.Detections) -> Found:
        count = len(detections)
        scores = detections.confidence if detections.confidence is not None else np.ones(count)
        class_ids = detections.class_id if detections.class_id is not None else np.zeros(count, np.int64)
        names = detections.data.get("class_name") if detections.data else None
        if names is None:
            names = np.array([str(c) for c in class_ids], dtype=object)
        return cls(boxes=np.asarray(detections.xyxy, np.float64).reshape(-1, 4),
                   scores=np.asarray(scores, np.float64), class_ids=np.asarray(class_ids, np.int64),
                   class_names=np.asarray(names, dtype=object))


def without_duplicates(tracks: TrackTable) -> TrackTable:
    """ByteTrack's clean-up: of a confirmed and a lost track on nearly the same box (IoU > 0.85), the
    younger one is dropped."""
    confirmed = np.flatnonzero(tracks.states == CONFIRMED)
    lost = np.flatnonzero(tracks.states == LOST)
    if len(confirmed) == 0 or len(lost) == 0:
        return tracks
    boxes = xywh_to_xyxy(tracks.means[:, :4])
    pairs = np.argwhere(box_iou(boxes[confirmed], boxes[lost]) > 0.85)
    if len(pairs) == 0:
        return tracks
    a, b = confirmed[pairs[:, 0]], lost[pairs[:, 1]]
    drop = np.where(tracks.born[a] > tracks.born[b], a, b)
    keep = np.ones(len(tracks), bool)
    keep[drop] = False
    return tracks.select(keep)


__all__ = ["match_stages", "Found", "without_duplicates"]
