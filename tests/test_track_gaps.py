"""KeyframeTracker across gaps in a stream: an outage, a loop seam, dropped frames.

Frames are crafted with the times a source gives them: `pts` (media time: it restarts when a file
loops and may when a camera reconnects) and `clock` (`time.monotonic()` when the frame became
available). No pixels are needed (kalman motion).
"""

from __future__ import annotations

import numpy as np
import pytest
import supervision as sv

from streamlens.frame import Frame
from streamlens.track import KeyframeTracker
from streamlens.track.matching import box_iou
from streamlens.track.tracker import FOLLOW_LOST_S

WIDTH, HEIGHT, FPS = 640, 360, 30.0
BLANK = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (HEIGHT, WIDTH, 3))
START = 1000.0  # the monotonic clock when the stream started


def frame(index: int, pts: float | None, clock: float) -> Frame:
    return Frame("cam1", index, pts, 0.0, BLANK, clock=START + clock)


def found(*boxes) -> sv.Detections:
    xyxy = np.asarray(boxes, np.float32).reshape(-1, 4)
    detections = sv.Detections(xyxy=xyxy, confidence=np.full(len(xyxy), 0.9, np.float32),
                               class_id=np.zeros(len(xyxy), np.int64))
    detections.data["class_name"] = np.array(["car"] * len(xyxy), dtype=object)
    return detections


def box_at(x: float, y: float = 150.0) -> list[float]:
    return [x, y, x + 40.0, y + 30.0]


def id_near(detections: sv.Detections, box: list[float]) -> int | None:
    """The id of the output box that overlaps `box` by IoU >= 0.5, else None."""
    if len(detections) == 0:
        return None
    iou = box_iou(np.array([box]), detections.xyxy)[0]
    return int(detections.tracker_id[iou.argmax()]) if iou.max() >= 0.5 else None


def steady(tracker: KeyframeTracker, frames: int, x=lambda i: 100.0, interval: int = 1) -> None:
    """`frames` frames of a paced stream from 0, the object at `x(i)`, detected every `interval`-th."""
    for i in range(frames):
        f = frame(i, i / FPS, i / FPS)
        tracker.update(f, found(box_at(x(i)))) if i % interval == 0 else tracker.propagate(f)


@pytest.mark.parametrize("pts_after", ["continues", "restarts", "none"])
def test_an_outage_longer_than_lost_s_ends_every_track(pts_after):
    """A camera is gone for 60 s and comes back with the same scene; whatever is at the spot now is
    another object: a new id, and nothing is shown between (the old track is not carried over).
    The time stamps after the outage may continue, restart (a reconnect) or be missing."""
    tracker = KeyframeTracker("kalman", FPS)
    steady(tracker, 30)
    assert id_near(tracker.objects(), box_at(100)) == 1
    back = 30 / FPS + 60.0
    pts = {"continues": back, "restarts": 0.0, "none": None}[pts_after]
    assert len(tracker.propagate(frame(30, pts, back))) == 0
    after = tracker.update(frame(31, None if pts is None else pts + 1 / FPS, back + 1 / FPS), found(box_at(100)))
    assert id_near(after, box_at(100)) == 2
    assert tracker.tracks.ids.tolist() == [2]


def test_a_loop_seam_ends_every_track():
    """A file played in a loop: pts goes back to 0 while the clock runs on. The cars of the clip's
    last frame are not the cars of its first: new ids, even where a box is at the same place."""
    tracker = KeyframeTracker("kalman", FPS)
    for i in range(45):
        f = frame(i, (i % 28) / FPS, i / FPS)  # 28 frames a pass: the seam is before frame 28
        out = tracker.update(f, found(box_at(100))) if i % 5 == 0 else tracker.propagate(f)
        if i == 27:
            assert id_near(out, box_at(100)) == 1
        if i in (28, 29):
            assert len(out) == 0, "nothing is carried over the seam"
    assert id_near(tracker.objects(), box_at(100)) == 2


@pytest.mark.parametrize("with_pts", [True, False])
def test_a_paced_stream_keeps_its_ids(with_pts):
    """Nothing breaks a stream that runs as it should, with or without time stamps: the moving car
    keeps its id over 10 s, detected on every 5th frame."""
    tracker = KeyframeTracker("kalman", FPS)
    for i in range(300):
        f = frame(i, i / FPS if with_pts else None, i / FPS)
        x = 50.0 + i * 1.5
        out = tracker.update(f, found(box_at(x))) if i % 5 == 0 else tracker.propagate(f)
        assert id_near(out, box_at(x)) == 1, i


def test_a_time_stamp_jump_the_clock_does_not_see_is_no_gap():
    """A camera's time stamps may jump (a resynchronisation) while frames keep coming at their pace:
    the clock says one frame passed, and the tracks go on."""
    tracker = KeyframeTracker("kalman", FPS)
    steady(tracker, 30)
    out = tracker.propagate(frame(30, 30 / FPS + 60.0, 30 / FPS))
    assert id_near(out, box_at(100)) == 1


@pytest.mark.parametrize("numbered", [True, False])
def test_dropped_frames_keep_ids_and_are_predicted_across(numbered):
    """Two frames never reach the tracker (numbered: the source dropped them and counted them; not
    numbered: the decoder never produced them). Across the gap the car moves as it did."""
    speed = 3.0  # pixels a frame
    tracker = KeyframeTracker("kalman", FPS)
    steady(tracker, 20, x=lambda i: 100.0 + speed * i)
    index = 22 if numbered else 20
    out = tracker.propagate(frame(index, 22 / FPS, 22 / FPS))
    assert id_near(out, box_at(100.0 + speed * 22)) == 1
    assert out.xyxy[0, 0] == pytest.approx(100.0 + speed * 22, abs=1.0)


@pytest.mark.parametrize("numbered", [True, False])
def test_a_long_gap_does_not_extrapolate_velocity_for_seconds(numbered):
    """With lost_s raised to a minute, tracks outlive a 10 s outage, but the car is not thrown 10 s
    ahead at its last speed (1000 px, out of the picture), nor is the gap taken for one frame: it
    moves on for `FOLLOW_LOST_S`. The same whether the source numbered the frames it dropped or not."""
    tracker = KeyframeTracker("kalman", FPS, lost_s=60.0)
    steady(tracker, 30, x=lambda i: 100.0 + i * 100.0 / FPS)  # 100 px/s
    out = tracker.propagate(frame(30 + 300 * numbered, 29 / FPS + 10.0, 29 / FPS + 10.0))
    assert out.tracker_id.tolist() == [1]
    last_seen = 100.0 + 29 * 100.0 / FPS
    assert out.xyxy[0, 0] == pytest.approx(last_seen + 100.0 * tracker.follow_s, abs=3.0)
    assert tracker.follow_s == max(tracker.coast_s, FOLLOW_LOST_S)


def test_lost_s_zero_is_no_division_by_zero():
    tracker = KeyframeTracker("kalman", FPS, lost_s=0.0, coast_s=0.0)
    steady(tracker, 10)
    assert id_near(tracker.propagate(frame(10, 10 / FPS, 10 / FPS)), box_at(100)) == 1


def test_a_late_keyframe_result_does_not_carry_tracks_across_a_seam():
    """A slow detector answers for the last keyframe before a loop seam after the seam: the result is
    applied on its own frame and the frames since are replayed, but no track crosses the seam, just
    as when the answer comes in time."""
    on_time, late = KeyframeTracker("kalman", FPS), KeyframeTracker("kalman", FPS)
    frames = [frame(i, (i % 30) / FPS, i / FPS) for i in range(34)]
    for i, f in enumerate(frames[:25]):
        on_time.update(f, found(box_at(100)))
        late.update(f, found(box_at(100)))
    on_time.update(frames[25], found(box_at(100), box_at(300)))
    for f in frames[26:]:
        expected = on_time.propagate(f)
    for f in frames[25:]:
        late.propagate(f)
    late.update(frames[25], found(box_at(100), box_at(300)))
    assert len(expected) == 0 and len(late.objects()) == 0 and len(late.tracks) == 0
    assert late.stale_updates == 0
    assert late.update(frame(34, 4 / FPS, 34 / FPS), found(box_at(100))).tracker_id.tolist() == [3]
