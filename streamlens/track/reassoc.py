"""Re-association: a lost track found again under its own id, by motion and, with pixels, appearance.

ByteTrack's stages find a lost track only where its predicted box still overlaps its object's box.
An object hidden for a while (behind another walker, a van, a pillar) comes back where its
prediction is off by more than that, and would get a new id. So after those stages, as BoT-SORT,
Deep OC-SORT and OC-SORT recover tracks, the lost tracks left are matched against the confident
boxes left (`Reassociation.match`), each pair gated by
- motion: the box's squared Mahalanobis distance from the track's prediction (the Kalman filter's
  own uncertainty, which grows with the time the track has been lost) within `GATE` (by motion
  alone, `GATE_ALONE`);
- size: neither width nor height more than `SIZE_RATIO` times the track's last box, or less than
  its share (a box's size changes slowly);
- direction (OC-SORT's velocity consistency): where the track had been moving by more than
  `MOVING` of its width a second, the way from its last box to the new one within
  `DIRECTION_DEGREES` of the way it was going (a walker does not come back from where he came);
- appearance, where the tracker has the keyframe's pixels and `appearance` is on: the box's
  descriptor (`streamlens.reid.appearance`, weight-free colour and texture) at least
  `MIN_SIMILARITY` similar (cosine) to one of the track's samples.
Of the pairs left, the assignment with the least total cost wins (the distance over the gate, plus
with appearance one minus the similarity). A track found again moves to its box, with the
velocity that the way from its last box to this one says (OC-SORT's re-update: the prediction
that lost it had the wrong velocity).

Appearance samples (`APPEARANCE_SAMPLES` per track, the newest kept) are taken on one keyframe
every `REFRESH_S`, of the confirmed tracks matched there; new boxes are described only where they
passed the motion gate of a lost track with samples. The keyframe's picture is asked for only then
(`image` may be a function that makes it: a detector fed straight from the decoder's picture never
made the full-size one). Without pixels (MOTChallenge replays, `appearance` off, its default)
motion alone decides, and by default (`MOTION_ALONE`) links nothing. What is kept per track (its
last box, its samples) goes with the track.

What motion alone may do (`MOTION_ALONE`, `GATE_ALONE`, `SIZE_RATIO`) was chosen by
leave-one-kind-out over the shared MOTChallenge sequences (tools/results/track_mot.md); those have
no pixels here, so `GATE` (DeepSORT's), `MIN_SIMILARITY` (on the tests' drawn walkers two colours
score 0.62, one walker moved 1.0), the samples and their refresh are set, not fitted: on the
highway clip they found one lost track again in 897 frames and changed no id switch, and at 0.8
the look let through 98.5% of pairs of different cars near each other (tools/results/track_mot.md).

Example:
    >>> from streamlens.track.kalman import BoxKalmanFilter
    >>> from streamlens.track.tracks import CONFIRMED, LOST, TrackTable
    >>> kf = BoxKalmanFilter()
    >>> mean, cov = kf.initiate(np.array([[100.0, 100.0, 20.0, 40.0]]))
    >>> one = TrackTable(np.array([7]), np.array([CONFIRMED], np.int8), mean, cov, np.zeros(1, np.int64),
    ...                  np.array(["p"], object), np.zeros(1, np.int64), np.array(["p"], object),
    ...                  np.ones(1, np.float32), np.array([5]), np.zeros(1), np.zeros(1), np.ones(1))
    >>> image = np.full((200, 500, 3), 90, np.uint8)
    >>> image[80:120, 90:110] = (0, 0, 255)      # a red walker, seen at time 0
    >>> again = Reassociation(kf, appearance=True)
    >>> again.remember(one, np.array([0]), np.array([[90.0, 80, 110, 120]]), np.array([], int), 0.0, image)
    >>> one.states[:] = LOST                     # then hidden; a second later two boxes, one far away:
    >>> one.means, one.covs = kf.predict(one.means, one.covs, 1.0)
    >>> image[80:120, 90:110] = 90
    >>> image[82:122, 96:116] = (0, 0, 255)      # the red walker again, near where it was
    >>> image[80:120, 400:420] = (0, 0, 255)     # another red walker, far away
    >>> rows, cols = again.match(one, np.array([0]), np.array([[96.0, 82, 116, 122], [400, 80, 420, 120]]),
    ...                          np.arange(2), image)
    >>> rows.tolist(), cols.tolist()             # the near box comes back to track 7, the far one does not
    ([0], [0])
"""

from __future__ import annotations

import math
from typing import Callable, Union

import numpy as np

from .kalman import BoxKalmanFilter, xyxy_to_xywh
from .matching import match_by_distance
from .tracks import CONFIRMED, TrackTable

#: re-associate by motion alone where there is no appearance (no pixels, or `appearance` off): off,
#: chosen on all three kinds of camera by leave-one-kind-out (tools/results/track_mot.md). On the
#: shared MOTChallenge sequences, at the 95% gate twice as many of its links were wrong as right;
#: at the tightest gate tried (1) it moved no sequence by more than 0.3 HOTA either way
MOTION_ALONE = 0
#: the motion gate, squared Mahalanobis distance over the four box coordinates: with appearance,
#: the chi-square 95% gate (DeepSORT's, which gates its appearance matches by it); by motion alone,
#: the tighter gate the walking cameras chose
GATE = 9.4877
GATE_ALONE = 1.0
#: the size gate: the most a width or height may grow or shrink while lost (1.2 fitted better than
#: 1.5 at every motion gate, by motion alone)
SIZE_RATIO = 1.2
#: the direction gate, in degrees, and the least speed (widths a second) for which it applies
DIRECTION_DEGREES = 90.0
MOVING = 0.25
#: appearance: the least cosine between a box and one of the track's samples, how many samples a
#: track keeps, and how often they are taken (seconds)
MIN_SIMILARITY = 0.8
APPEARANCE_SAMPLES = 3
REFRESH_S = 1.0


#: a keyframe's BGR picture, a function that makes it (called only when needed), or None (no pixels)
Picture = Union[np.ndarray, Callable[[], "np.ndarray | None"], None]


def _picture(image: Picture) -> np.ndarray | None:
    return image() if callable(image) else image


class Reassociation:
    """The lost tracks' second chance on one stream (see the module's docs).

    `kalman`: the tracker's filter (its distance); `appearance`: use pixels when a keyframe has them.
    """

    def __init__(self, kalman: BoxKalmanFilter, appearance: bool = False):
        self.kalman = kalman
        self.appearance = appearance
        self._last: dict[int, tuple] = {}  # id: last matched box (xywh), its velocity, and when
        self._looks: dict[int, np.ndarray] = {}                  # id: (k, D) samples, newest last
        self._sampled = -math.inf                                 # when samples were last taken
        #: boxes described and keyframes whose picture was used (the cost), and lost tracks found
        #: again, since the start
        self.described = self.pictures = self.found = 0

    def match(self, tracks: TrackTable, lost: np.ndarray, boxes: np.ndarray, cols: np.ndarray,
              image: Picture = None) -> tuple[np.ndarray, np.ndarray]:
        """Pairs of the lost tracks at rows `lost` of `tracks` and boxes (`boxes` xyxy, only the
        columns `cols` offered) that motion (and appearance, with `image`: the keyframe's BGR
        picture, or a function that makes it) say are the same object: (rows, columns)."""
        none = np.empty(0, np.intp)
        looks = self.appearance and image is not None
        if not (looks or MOTION_ALONE) or len(lost) == 0 or len(cols) == 0:
            return none, none
        found = xyxy_to_xywh(boxes[cols])
        means = tracks.means[lost]
        distance = self.kalman.distance(means, tracks.covs[lost], found)
        kept = [self._last.get(int(i), (means[k, :4], means[k, 4:6], 0.0)) for k, i in enumerate(tracks.ids[lost])]
        last = np.array([k[0] for k in kept]).reshape(-1, 4)
        velocity = np.array([k[1] for k in kept]).reshape(-1, 2)
        held, sizes = np.maximum(last[:, None, 2:4], 1.0), np.maximum(found[None, :, 2:4], 1.0)
        distance[np.maximum(held / sizes, sizes / held).max(axis=2) > SIZE_RATIO] = np.inf
        way = found[None, :, :2] - last[:, None, :2]
        speed = np.linalg.norm(velocity, axis=1)
        moving = speed > MOVING * held[:, 0, 0]
        cosine = (way * velocity[:, None, :]).sum(axis=2) / np.maximum(
            np.linalg.norm(way, axis=2) * speed[:, None], 1e-9)
        away = (cosine < math.cos(math.radians(DIRECTION_DEGREES))) & (np.linalg.norm(way, axis=2) > 0)
        distance[moving[:, None] & away] = np.inf
        cost = np.where(distance <= GATE_ALONE, distance / GATE_ALONE, np.inf) if MOTION_ALONE else \
            np.full(distance.shape, np.inf)
        if looks:  # tracks with samples: the wider gate, and their look
            cost = self._by_looks(cost, np.where(distance <= GATE, distance / GATE, np.inf), tracks.ids[lost],
                                  boxes[cols], image)
        pairs, _, _ = match_by_distance(cost, 2.0)
        return lost[pairs[:, 0]], cols[pairs[:, 1]]

    def _by_looks(self, cost: np.ndarray, gated: np.ndarray, ids: np.ndarray, boxes: np.ndarray,
                  image: Picture) -> np.ndarray:
        """`cost` (by motion alone) where a track has appearance samples replaced by `gated` (the
        wider motion gate) for the boxes at least `MIN_SIMILARITY` like one of them, plus what they
        lack of 1; only boxes that passed the motion gate are described."""
        from ..reid.appearance import describe, similarity

        rows = np.array([int(i) in self._looks for i in ids]) & np.isfinite(gated).any(axis=1)
        wanted = np.flatnonzero(np.isfinite(gated[rows]).any(axis=0))
        image = _picture(image)
        if not len(wanted) or image is None:
            return cost
        looks = describe(image, boxes[wanted])
        self.described += len(wanted)
        self.pictures += 1
        cost = cost.copy()
        for k in np.flatnonzero(rows):
            best = np.asarray(similarity(self._looks[int(ids[k])], looks)).reshape(-1, len(wanted)).max(axis=0)
            cost[k] = np.inf
            cost[k, wanted] = np.where(best >= MIN_SIMILARITY, gated[k, wanted] + (1.0 - best), np.inf)
        return cost

    def remember(self, tracks: TrackTable, rows: np.ndarray, boxes: np.ndarray, back: np.ndarray, now: float,
                 image: Picture = None) -> None:
        """After a keyframe: the tracks at `rows` were matched to `boxes` (xyxy) and corrected, those
        at `back` (among them) found again. The found-again tracks get the velocity of the way from
        their last box to this one (OC-SORT's re-update: the prediction that lost them had the wrong
        one); every matched track's box and velocity are kept, and, with pixels, a new appearance
        sample of each confirmed one when samples are due."""
        self.found += len(back)
        for row in back:
            last = self._last.get(int(tracks.ids[row]))
            if last is not None and now > last[2]:
                tracks.means[row, 4:6] = (tracks.means[row, :2] - last[0][:2]) / (now - last[2])
                tracks.means[row, 6:8] = 0.0
        for row in rows:
            self._last[int(tracks.ids[row])] = (tracks.means[row, :4].copy(), tracks.means[row, 4:6].copy(), now)
        if not (self.appearance and image is not None and now - self._sampled >= REFRESH_S):
            return
        due = [k for k, r in enumerate(rows) if tracks.states[r] == CONFIRMED]
        image = _picture(image) if due else None
        if image is None:
            return
        from ..reid.appearance import describe

        self._sampled = now
        looks = describe(image, boxes[due])
        self.described += len(due)
        self.pictures += 1
        for k, look in zip(due, looks):
            track = int(tracks.ids[rows[k]])
            kept = self._looks.get(track)
            self._looks[track] = look[None] if kept is None else np.vstack([kept, look[None]])[-APPEARANCE_SAMPLES:]

    def keep(self, ids: np.ndarray) -> None:
        """Forget every track but those of `ids` (the live ones)."""
        live = set(ids.tolist())
        for store in (self._last, self._looks):
            for track in [t for t in store if t not in live]:
                del store[track]


__all__ = ["Reassociation"]
