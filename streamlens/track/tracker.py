"""`KeyframeTracker`: every live object on every frame, from detections on keyframes only.

On a keyframe the detector's boxes are associated with the tracks in two stages, as ByteTrack does
(Zhang et al. 2022; `association.py`): confident boxes first, against every confirmed and lost track;
then the remaining tracks against the weak boxes (a half-hidden object scores low, and matching it
keeps its track alive without letting weak boxes start tracks); then last keyframe's new tracks
against the confident boxes left; with `kalman` (no pixels), then tracks seen on one keyframe only
against the boxes left by the Kalman filter's gate (`association.TENTATIVE_BY_DISTANCE`: a fast new
object at a long interval no longer overlaps its first box). A confident box left over starts a new,
tentative track, confirmed when the next keyframe matches it again (on a stream's first keyframe at
once) and dropped when it does not. A confirmed track missed on a keyframe is lost; it is dropped
after `lost_s` seconds unless matched again (by overlap, or, left after these stages, by motion and
with `appearance` look: `reassoc.py`), and of a confirmed and a lost track on the same box the
younger goes (ByteTrack's clean-up).

Between keyframes, and before associating on a keyframe, every track moves by motion: the Kalman
prediction (`kalman.py`), corrected by what the motion model measured (`motion/`: optical flow or
the decoder's motion vectors) where it could. Where the model measures the camera's motion (the
picture as a whole shifting: `MotionEstimate.camera`), every track moves with it, those it could not
measure and those lost too, and the Kalman velocities are the objects' own motion over the
background (camera motion compensation, as BoT-SORT does, translation only): a track carried by
prediction stays with its object when the camera pans, starts or stops. All times are in seconds, so
the frame rate and the keyframe interval do not change behaviour. The time between two frames is
what their time stamps (`pts`) say when these move forward by a plausible step (up to
`MAX_STEP_FRAMES` frame times for each frame numbered in between); else what `Frame.clock` says,
but never less than the frame numbers account for (a file read faster than real time). A step
longer than `MAX_STEP_FRAMES` frame times is a gap in the stream:
- across it, velocities carry the tracks at most `FOLLOW_LOST_S` or `coast_s` (or those frame times,
  if longer): a box carried by prediction alone is trusted no further; its uncertainty grows
  over the whole gap;
- across a gap longer than `lost_s`, or where time stamps jump back (a file looping, a camera's
  time stamps restarting), no track survives: what is there after it gets new ids.

A keyframe's detections may arrive late, after later frames were already carried by motion: the
tracker keeps `history_s` seconds of its past (per frame: the tracks and the motion record), so
`update()` on an earlier frame rewinds to that frame, corrects its tracks, and replays the frames
since from their stored motion; the result is the same as if the detections had come in time.
Results of one stream must arrive in frame order; one older than the last one applied, or older
than the history, is not applied (counted in `stale_updates`) and its boxes come back untracked (-1).

What the tracker shows, in source pixels clipped to the frame, never less than `MIN_BOX_PX` wide and
high there: on a keyframe, the detector's boxes with the ids of the tracks they went to (-1: none;
`keyframe_objects.py`); on the frames between,
- every tentative and confirmed track: in a keyframe engine a new object waits a whole interval for
  its second match, and the detector's box on its first keyframe is the best knowledge there is;
- lost tracks for `coast_s` seconds after their last match (default 0: none), but never longer than
  they had been seen before it: a longer `coast_s` keeps an object through a detector's blink on a
  keyframe (blur, a passing occluder, a score just under the threshold), where it would otherwise be
  gone for a whole interval. Whatever `coast_s`, a lost track is followed by motion for
  `FOLLOW_LOST_S`, and waits `lost_s` to be found again with its id.
A track whose box is no longer visible ends: less than `tracks.MIN_VISIBLE` of its area in the frame,
or less than `MIN_BOX_PX` wide or high there (it drove out of the picture, or motion carried it
out). `confidence` and the class (`class_id`, `class_name`) are those of the last detection matched,
the track's label (`data[TRACK_CLASS_ID]`, `data[TRACK_CLASS_NAME]`) the class its detections scored
most (`labels.py`); ids start at 1 and are never reused within a stream.

The thresholds default to ByteTrack's MOT17 settings, for detections reported down to a score of 0.1
(MOTChallenge's public detections), but for the confident and new-track scores, the overlap a new
track carried by prediction alone needs on its second keyframe, the buffer such boxes are compared
with, and how long a lost track waits (chosen by leave-one-out on MOTChallenge sequences, see the
constants). In a pipeline, `build_tracker` sets the confident and new-track scores to the detector's
own `conf`, and a neural detector reports its boxes down to `low_score` for the second stage, flagged
weak (`frame.WEAK`) under `conf`: a track matched by a weak box only is moved to it and otherwise
missed (lost, shown only as `coast_s` shows a missed track; its score, class, label and `lost_s` wait
are those of its last box at `conf`); a keyframe shows none of them. What is shown is what the user's
`conf` calls an object, and no track is gone longer than `lost_s` before it comes back with its id.

Example:
    >>> import numpy as np, supervision as sv
    >>> from streamlens.frame import Frame
    >>> tracker = KeyframeTracker("kalman", fps=10)
    >>> image = np.zeros((100, 200, 3), np.uint8)
    >>> found = sv.Detections(xyxy=np.array([[10.0, 10.0, 30.0, 50.0]]), confidence=np.array([0.9]),
    ...                       class_id=np.array([0]), data={"class_name": np.array(["person"])})
    >>> tracker.update(Frame("cam1", 0, 0.0, 0.0, image), found).tracker_id.tolist()
    [1]
    >>> tracker.propagate(Frame("cam1", 1, 0.1, 0.0, image)).xyxy.round().tolist()
    [[10.0, 10.0, 30.0, 50.0]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import supervision as sv

from ..config.tracker import COAST_S, LOST_S, LOW_SCORE
from ..frame import MIN_BOX_PX, TRACK_CLASS_ID, TRACK_CLASS_NAME, Frame, empty_detections
from .base import Tracker, confident, untracked, weak_mask
from .history import FrameHistory, FrameStep, Replay, StreamClock
from .keyframe_objects import keyframe_objects
from .labels import LabelVotes
from .kalman import MIN_SIZE, BoxKalmanFilter, xywh_to_xyxy, xyxy_to_xywh
from .kernels import carry_tracks, shown_boxes, step_rows, warm_up
from . import association
from .association import Found, match_stages, without_duplicates
from .matching import box_iou, buffered_iou
from .motion import MotionModel, build_motion
from .motion.scale import MotionScale
from . import reassoc
from .tracks import CONFIRMED, LOST, REMOVED, TENTATIVE, TrackTable

# ByteTrack's choices (MOT17 settings), restated in seconds where they were in frames; the two
# scores for detections reported down to 0.1 chosen by leave-one-out over the six shared MOTChallenge
# sequences (tools/results/track_mot.md; ByteTrack's own 0.6 and 0.7 send more of a moving camera's
# boxes, whose predictions overlap them less, to the strict second stage).
#: detections at or above this score are confident: they are matched first, by overlap
HIGH_SCORE = 0.3
#: a confident detection left over starts a track only at or above this score
NEW_TRACK_SCORE = 0.5
#: the least overlap (IoU; for tentative tracks weighted by the detection's score) for each stage
#: of matching (`association.match_stages`). A tentative track's (ByteTrack's 0.3, made for tracks
#: started at NEW_TRACK_SCORE or more) is read against the score that may start a track: with a
#: lower `new_track_score` (the detector's `conf`), it is lowered in proportion, so that a box at
#: that score needs the overlap one at NEW_TRACK_SCORE needs (else the boxes of an object the
#: detector scores near 0.3 could never confirm its track, and it took a new id on every keyframe)
MATCH_IOU = 0.2
LOW_MATCH_IOU = 0.5
TENTATIVE_MATCH_IOU = 0.3
#: the same for a new track carried by prediction alone (a motion model that sees no pixels): it has
#: no velocity yet, so it stayed where it was first seen while its object walked on, and its second
#: keyframe asks only for some overlap (chosen by leave-one-out on MOTChallenge; 0.3 drops walking
#: people at longer keyframe intervals). With flow or mv its box followed the object: 0.3 holds.
BLIND_TENTATIVE_MATCH_IOU = 0.1
#: with a motion model that sees no pixels, a track's box is compared with a detection only after
#: both are grown on every side by this share of their size per second since the track was last
#: matched (buffered IoU): a box carried by prediction alone is off by more the longer it was carried,
#: so at longer keyframe intervals a track finds its own object's box, not a new track. Confirmed
#: and tentative tracks; lost ones are not grown (they claimed other objects' boxes at interval 1).
#: Chosen by leave-one-out on MOTChallenge (tools/results/track_mot.md).
BLIND_BUFFER_PER_S = 0.25
# LOW_SCORE, LOST_S and COAST_S are the pipeline file's defaults of `tracker.low_score`, `lost_s` and
# `coast_s`: stated once, in streamlens/config/tracker.py, where `streamlens schema` shows them.
#: how long a lost track is still followed by motion (its box measured between keyframes, as a shown
#: one is), whatever `coast_s` shows: where it is matters to finding it again
FOLLOW_LOST_S = 0.4
#: how far back a late keyframe result may re-anchor the tracks
HISTORY_S = 2.0
#: the longest step between two frames that is still one stretch of video, in frame times: a
#: decoder skipping a few damaged frames, a frame-rate cap; beyond it, a gap (see the module's docs)
MAX_STEP_FRAMES = 10
#: the frame rate assumed when neither the stream nor time stamps say
DEFAULT_FPS = 30.0


@dataclass(slots=True)
class TrackingSignals:
    """How sure the tracker is of the current frame, for an adaptive keyframe scheduler.

    - `confidence`: the mean, over confirmed tracks, of how well motion followed them since their last
      keyframe (1 right after a keyframe; it falls when flow points or vectors disagree or are missing);
    - `untracked_motion`: the share of the frame outside every track that moved (0 to 1, NaN when the
      motion model cannot tell, as with `kalman`);
    - `births`, `losses`: tracks started and tracks lost at the last keyframe applied, `keyframe`
      that keyframe's frame index (None before the first);
    - `tracks`: confirmed tracks now.
    """

    confidence: float = 1.0
    untracked_motion: float = float("nan")
    births: int = 0
    losses: int = 0
    keyframe: int | None = None
    tracks: int = 0

    def copy(self) -> TrackingSignals:
        """A copy (made for every frame of every stream: `copy.copy` costs ten times this)."""
        return TrackingSignals(self.confidence, self.untracked_motion, self.births, self.losses, self.keyframe,
                               self.tracks)


class KeyframeTracker(Tracker):
    """ByteTrack-style association on keyframes, motion in between, late results caught up.

    `motion` is a `MotionModel` or its name (`kalman`, `flow`, `mv`); `fps` the stream's frame rate
    (used when frames carry no time stamps, and to size the history). Scores and overlaps: see the
    module's docs and constants (`tentative_match_iou` None: by whether the motion model sees pixels,
    see `BLIND_TENTATIVE_MATCH_IOU`); `lost_s`, `coast_s` and `history_s` are in seconds.
    """

    def __init__(self, motion: MotionModel | str = "kalman", fps: float | None = None, *,
                 high_score: float = HIGH_SCORE, low_score: float = LOW_SCORE,
                 new_track_score: float = NEW_TRACK_SCORE, match_iou: float = MATCH_IOU,
                 low_match_iou: float = LOW_MATCH_IOU, tentative_match_iou: float | None = None,
                 lost_s: float = LOST_S, coast_s: float = COAST_S, history_s: float = HISTORY_S,
                 appearance: bool = False):
        self.motion = build_motion(motion) if isinstance(motion, str) else motion
        self.fps = fps if fps and fps > 0 else DEFAULT_FPS
        self.high_score, self.low_score, self.new_track_score = high_score, low_score, new_track_score
        self.match_iou, self.low_match_iou = match_iou, low_match_iou
        if tentative_match_iou is None:  # read against the score that may start a track (see TENTATIVE_MATCH_IOU)
            tentative_match_iou = TENTATIVE_MATCH_IOU if self.motion.sees_pixels else BLIND_TENTATIVE_MATCH_IOU
            tentative_match_iou *= min(1.0, new_track_score / NEW_TRACK_SCORE)
        self.tentative_match_iou = tentative_match_iou
        self.lost_s = lost_s
        self.coast_s = coast_s
        #: how long a lost track is followed by motion, and how far velocity carries across a gap
        self.follow_s = max(coast_s, FOLLOW_LOST_S)
        self._horizon = max(self.follow_s, MAX_STEP_FRAMES / self.fps)
        self.kalman = BoxKalmanFilter()
        self.scale = MotionScale(self.motion.learns_scale)  # the factor its shifts are taken at
        #: lost tracks found again by motion and, with `appearance` and pixels, by look (reassoc.py)
        self.reassoc = reassoc.Reassociation(self.kalman, appearance)
        warm_up()  # the compiled per-frame steps, ready before the first frame
        self.tracks = TrackTable.empty()
        self.labels = LabelVotes()  # each track's label, by vote over its detections
        self.signals = TrackingSignals()
        #: keyframe results not applied: older than the last one applied, or than the history
        self.stale_updates = 0
        self._history = FrameHistory(max_frames=math.ceil(history_s * self.fps) + 1)
        self._replay: Replay | None = None  # a late keyframe's replay not finished yet
        self._next_id = 1
        self._clock = StreamClock(self.fps, lost_s, MAX_STEP_FRAMES)  # the time between its frames
        self._last_corrected: int | None = None
        self._frame_size = (0, 0)

    # -- the Tracker interface ---------------------------------------------------------------------

    def prepare(self, frame: Frame) -> None:
        """What the motion model keeps of `frame` (motion vectors sorted, a small grey image), made
        now, on the calling thread; `propagate` and `update` then use it."""
        frame.observed = self.motion.observe(frame)

    def forget(self) -> None:
        """Let go of the frames' steps, a late keyframe's replay and the tracks: its stream ended."""
        self._history.clear()
        self._replay, self.tracks = None, TrackTable.empty()

    def propagate(self, frame: Frame) -> sv.Detections:
        """Move every track to `frame` by motion and return the objects shown on it."""
        self.catch_up()
        self._advance(frame)
        return self.objects()

    def update(self, frame: Frame, detections: sv.Detections, catch_up: bool = True) -> sv.Detections:
        """Associate `detections` (found on `frame`) with the tracks and return the objects on `frame`.

        `frame` is normally the next frame of the stream. It may also be one that `propagate()`
        already carried (a late detector result): the tracks are then re-anchored on it and caught
        up to the latest frame; `objects()` gives the caught-up objects. With `catch_up=False` the
        frames since are replayed later: by `catch_up()`, a few at a time when the caller has time,
        and in any case before the tracker does anything else.
        """
        self.catch_up()
        latest = self._history.latest
        if latest is None or frame.index > latest.index:
            self._advance(frame)
        step = self._history.find(frame.index)
        if step is None or step.corrected or (self._last_corrected is not None
                                              and frame.index < self._last_corrected):
            self.stale_updates += 1
            return untracked(detections)
        tracks, output = self._correct(step.tracks, detections, step.time, frame)
        step.tracks, step.corrected = tracks, True
        self._last_corrected = self.signals.keyframe = frame.index
        self._replay = Replay(tracks, step, list(self._history.since(step.index)))
        if catch_up:
            self.catch_up()
        return output

    @property
    def catching_up(self) -> bool:
        """A late keyframe result is applied, but the frames since are not all replayed yet."""
        return self._replay is not None

    def catch_up(self, max_steps: int | None = None) -> bool:
        """Replay up to `max_steps` (None: all) of the frames a late keyframe result left to redo, from
        their stored motion. True when the tracks are caught up to the latest frame."""
        replay = self._replay
        if replay is None:
            return True
        total = len(replay.later)
        end = total if max_steps is None else min(total, replay.done + max_steps)
        for k in range(replay.done, end):  # untracked motion: only the latest frame's counts
            later = replay.later[k]
            replay.tracks = self._move(replay.tracks, replay.previous, later, untracked=k == total - 1)
            later.tracks = replay.tracks
            replay.previous = later
        replay.done = end
        if end < total:
            return False
        self.tracks, self._replay = replay.tracks, None
        return True

    def objects(self) -> sv.Detections:
        """The objects shown on the latest frame (after a late update: caught up)."""
        self.catch_up()
        latest = self._history.latest
        return self.objects_of(self.tracks, latest.time if latest else 0.0)

    @property
    def motion_scale(self) -> float | None:
        """The factor its motion model's shifts are taken at, where it learns one (`mv`), else None."""
        return self.scale.gain if self.scale.enabled else None

    def held_boxes(self) -> np.ndarray:
        """Every track's box now (tentative, confirmed and lost alike), in source pixels."""
        return xywh_to_xyxy(self.tracks.means[:, :4]).astype(np.float32, copy=False)

    def objects_of(self, tracks: TrackTable, now: float) -> sv.Detections:
        """The tracks of `tracks` shown at time `now`, as detections (see the module's docs)."""
        boxes, rows, any_shown = shown_boxes(tracks.means, tracks.states, tracks.last_seen, tracks.born, float(now),
                                             float(self.coast_s), *self._frame_size, MIN_BOX_PX)  # compiled
        if not any_shown:
            return empty_detections()
        out = sv.Detections(xyxy=boxes[rows], confidence=tracks.scores[rows].astype(np.float32),
                            class_id=tracks.seen_ids[rows], tracker_id=tracks.ids[rows])
        out.data["class_name"] = tracks.seen_names[rows]
        out.data[TRACK_CLASS_ID], out.data[TRACK_CLASS_NAME] = tracks.class_ids[rows], tracks.class_names[rows]
        return out

    # -- motion between frames ---------------------------------------------------------------------

    def _advance(self, frame: Frame) -> None:
        """Carry the tracks to `frame` by motion and remember the step."""
        self._frame_size = (frame.width, frame.height)
        record = frame.observed if frame.observed is not None else self.motion.observe(frame)
        frame.observed = None  # kept in the history from here
        previous = self._history.latest
        step = FrameStep(frame.index, 0.0, record, self.tracks)
        elapsed, step.cut = self._clock.step(None if previous is None else previous.index, frame)
        if previous is not None:
            step.time = previous.time + elapsed
            self.tracks = step.tracks = self._move(self.tracks, previous, step)
        self._history.append(step)

    def _move(self, tracks: TrackTable, previous: FrameStep, step: FrameStep, untracked: bool = True) -> TrackTable:
        """The tracks one frame later (from `previous` to `step`): predicted by the Kalman filter,
        corrected by measured motion; none across a cut. Tracks lost for longer than `FOLLOW_LOST_S`
        (or `coast_s`, if longer) are only predicted: they are out of view, or the detector would see them."""
        if step.cut:
            tracks = TrackTable.empty()
        if len(tracks) == 0:
            estimate = self.motion.measure(previous.record, step.record, np.empty((0, 4)), untracked)
            if untracked:
                self._note_motion(tracks, estimate.untracked_motion)
            return tracks
        then, dt = previous.time, step.time - previous.time
        states = tracks.states
        # the tracks followed by motion, a lost box keeping its size (ByteTrack), compiled (kernels.step_rows)
        means, visible, boxes = step_rows(tracks.means, states, tracks.last_seen, tracks.born, then, self.follow_s)
        estimate = self.motion.measure(previous.record, step.record, boxes, untracked)
        # the rest of the step compiled (kernels.carry_tracks): the measured change less the camera's
        # motion, the Kalman step, every track moved with the camera, travel and motion quality
        k = self.kalman
        decay = math.exp(-dt / self.lost_s) if self.lost_s > 0 else 0.0  # an unmeasured track's motion quality
        moved_means, covs, travel, quality = carry_tracks(
            means, tracks.covs, visible, estimate.shift, estimate.growth, estimate.noise, estimate.quality,
            np.asarray(estimate.camera, np.float64), self.scale.gain, dt, self._horizon, k.position_noise,
            k.velocity_noise, MIN_SIZE, tracks.travel, tracks.motion_quality, decay, self.scale.enabled)
        # a new table sharing the columns a step leaves alone (a table is never changed in place
        # once kept in the history: `_correct` copies it first)
        moved = TrackTable(tracks.ids, states.copy(), moved_means, covs, tracks.class_ids, tracks.class_names,
                           tracks.seen_ids, tracks.seen_names, tracks.scores, tracks.hits, tracks.born,
                           tracks.last_seen, quality, tracks.anchor, travel)
        moved = moved.in_view(*self._frame_size)
        if untracked:
            self._note_motion(moved, estimate.untracked_motion)
        return moved

    def _note_motion(self, tracks: TrackTable, untracked_motion: float) -> None:
        confirmed = tracks.states == CONFIRMED
        count = np.count_nonzero(confirmed)  # the mean as numpy's: its sum over the count, cheaper than .mean()
        self.signals.confidence = float(np.add.reduce(tracks.motion_quality[confirmed]) / count) if count else 1.0
        self.signals.untracked_motion = untracked_motion
        self.signals.tracks = count

    # -- association on keyframes ------------------------------------------------------------------

    def _correct(self, tracks: TrackTable, detections: sv.Detections, now: float,
                 frame: Frame) -> tuple[TrackTable, sv.Detections]:
        """ByteTrack's two-stage association of `detections` (found on `frame`) with `tracks` at time
        `now`, then the lost tracks left against the confident boxes left (`reassoc.py`)."""
        tracks = tracks.copy()
        found = Found.of(detections)
        first_keyframe = self._last_corrected is None and len(tracks) == 0
        states = tracks.states
        was_confirmed = states == CONFIRMED
        boxes = xywh_to_xyxy(tracks.means[:, :4])
        iou = box_iou(boxes, found.boxes)
        if self.motion.sees_pixels:
            buffered = iou
        else:  # grown by how long prediction carried the box (see BLIND_BUFFER_PER_S)
            grow = np.where(states == LOST, 0.0, BLIND_BUFFER_PER_S * (now - tracks.last_seen))
            buffered = buffered_iou(boxes, found.boxes, grow)
        distance = None  # blind: tracks seen once, by the filter's own uncertainty (association.TENTATIVE_GATE)
        once = (tracks.hits == 1) & (states != LOST)  # a lost one waits for its own box, as a tentative one does not
        if not self.motion.sees_pixels and once.any():
            distance = self.kalman.distance(tracks.means, tracks.covs, xyxy_to_xywh(found.boxes))
            distance[~once] = np.inf
            distance[:, found.scores < self.new_track_score] = np.inf  # only a box that could start a track
            sizes = np.maximum(xyxy_to_xywh(found.boxes)[None, :, 2:4], 1.0)
            held = np.maximum(tracks.means[:, None, 2:4], 1.0)
            ratio = np.maximum(held / sizes, sizes / held).max(axis=2)
            distance[ratio > association.GATED_SIZE_RATIO] = np.inf  # a box's size changes slowly
        weak = weak_mask(detections)
        rows, cols, high = match_stages(states, buffered, iou, found.scores, self.high_score, self.low_score,
                                        self.match_iou, self.low_match_iou, self.tentative_match_iou, distance, weak)
        hit = np.zeros(len(tracks), bool)
        hit[rows] = True
        missed = ~hit & was_confirmed
        states[missed] = LOST
        states[~hit & (states == TENTATIVE)] = REMOVED
        by_weak = np.zeros(len(rows), bool) if weak is None else weak[cols]
        if by_weak.any():  # seen under `conf` only: moved to that box, otherwise missed (lost, not shown)
            held = rows[by_weak]
            self._nudge(tracks, held, found.boxes[cols[by_weak]])
            newly = held[states[held] == CONFIRMED]  # (stage 2 matches no tentative track)
            states[newly] = LOST
            missed[newly] = True
        states[(states == LOST) & (now - tracks.last_seen > self.lost_s)] = REMOVED
        image = (lambda: frame.image) if self.reassoc.appearance else None  # made only when needed
        offered = high[found.scores[high] >= self.new_track_score]  # boxes that could start a track
        back, taken = self.reassoc.match(tracks, np.flatnonzero((states == LOST) & ~hit), found.boxes, offered, image)
        high, missed[back] = high[~np.isin(high, taken)], False
        rows, cols, by_weak = np.r_[rows, back], np.r_[cols, taken], np.r_[by_weak, np.zeros(len(back), bool)]
        self._apply(tracks, rows[~by_weak], found, cols[~by_weak], now)
        self.reassoc.remember(tracks, rows[~by_weak], found.boxes[cols[~by_weak]], back, now, image)

        new = high[found.scores[high] >= self.new_track_score]
        born = self._start(found, new, now, first_keyframe)
        shown = np.full(len(found.scores), -1, np.int64)  # per detection, its track's id
        shown[cols], shown[new] = tracks.ids[rows], born.ids
        tracks = without_duplicates(tracks.select(states != REMOVED).append(born)).in_view(*self._frame_size)
        self.labels.keep(tracks.ids)
        self.reassoc.keep(tracks.ids)
        self.signals.births, self.signals.losses = len(born), int(missed.sum())
        self._note_motion(tracks, self.signals.untracked_motion)
        if weak is not None:
            detections, shown = confident(detections), shown[~weak]
        return tracks, keyframe_objects(detections, shown, tracks, *self._frame_size)

    def _apply(self, tracks: TrackTable, rows: np.ndarray, found: Found, cols: np.ndarray, now: float) -> None:
        """Correct matched tracks with their detections."""
        if len(rows) == 0:
            return
        centres = self.scale.anchors(found.boxes[cols], *self._frame_size)
        self.scale.learn(tracks.travel[rows], centres - tracks.anchor[rows])
        tracks.anchor[rows], tracks.travel[rows] = centres, 0.0
        tracks.means[rows], tracks.covs[rows] = self.kalman.update(
            tracks.means[rows], tracks.covs[rows], xyxy_to_xywh(found.boxes[cols]))
        tracks.states[rows] = CONFIRMED
        tracks.scores[rows] = found.scores[cols]
        tracks.seen_ids[rows], tracks.seen_names[rows] = found.class_ids[cols], found.class_names[cols]
        tracks.class_ids[rows], tracks.class_names[rows] = self.labels.vote(
            tracks.ids[rows], found.class_ids[cols], found.class_names[cols], found.scores[cols])
        tracks.hits[rows] += 1
        tracks.last_seen[rows] = now
        tracks.motion_quality[rows] = 1.0

    def _nudge(self, tracks: TrackTable, rows: np.ndarray, boxes: np.ndarray) -> None:
        """Correct the tracks at `rows` to the detector's weak `boxes`: where they are, nothing else
        (their score, class, label and last sighting stay those of their last box at `conf`)."""
        tracks.means[rows], tracks.covs[rows] = self.kalman.update(tracks.means[rows], tracks.covs[rows],
                                                                   xyxy_to_xywh(boxes))
        tracks.motion_quality[rows] = 1.0
        tracks.anchor[rows], tracks.travel[rows] = self.scale.anchors(boxes, *self._frame_size), 0.0

    def _start(self, found: Found, cols: np.ndarray, now: float, confirmed: bool) -> TrackTable:
        """New tracks from the detections at `cols`."""
        means, covs = self.kalman.initiate(xyxy_to_xywh(found.boxes[cols]))
        count = len(cols)
        ids = np.arange(self._next_id, self._next_id + count, dtype=np.int64)
        self._next_id += count
        self.labels.vote(ids, found.class_ids[cols], found.class_names[cols], found.scores[cols])
        return TrackTable(ids=ids, states=np.full(count, CONFIRMED if confirmed else TENTATIVE, np.int8),
                          means=means, covs=covs, class_ids=found.class_ids[cols],
                          class_names=found.class_names[cols], seen_ids=found.class_ids[cols],
                          seen_names=found.class_names[cols], scores=found.scores[cols].astype(np.float32),
                          hits=np.ones(count, np.int64), born=np.full(count, now), last_seen=np.full(count, now),
                          motion_quality=np.ones(count),
                          anchor=self.scale.anchors(found.boxes[cols], *self._frame_size))

