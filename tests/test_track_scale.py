"""The tracker learns by how much a stream's motion vectors overstate its objects' motion.

An encoder with several reference frames predicts some blocks from two or three frames back, and
their vectors read two or three frames' motion as one (`streamlens.track.motion.scale`). These
streams are drawn: objects move a known distance a frame, their blocks' vectors say more (or
exactly that), and the detector's boxes come every tenth frame.
"""

from __future__ import annotations

import numpy as np
import pytest
import supervision as sv

from streamlens.frame import Frame
from streamlens.track import KeyframeTracker
from streamlens.track.motion import MotionVectors

WIDTH, HEIGHT = 640, 360
BLANK = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (HEIGHT, WIDTH, 3))
SPEED = 3.0     # px a frame, to the right
SIZE = (48, 48)
ROWS = (40, 130, 220)  # three objects, one above the other
INTERVAL = 10


class UnlearnedVectors(MotionVectors):
    """The mv model as it was: its measurements taken as they are."""

    learns_scale = False


def boxes_at(index: int, start: float = 60.0) -> np.ndarray:
    x = start + SPEED * (index % 120)   # each object crosses the frame, then a new one comes in
    return np.array([[x, y, x + SIZE[0], y + SIZE[1]] for y in ROWS], float)


def vectors_at(index: int, reads: float, start: float = 60.0) -> np.ndarray:
    """Each 16x16 block's vector: `reads` times the motion of the object it belongs to (background 0)."""
    xs, ys = np.meshgrid(np.arange(8, WIDTH, 16), np.arange(8, HEIGHT, 16))
    xs, ys = xs.ravel().astype(float), ys.ravel().astype(float)
    moving = np.zeros(xs.size, bool)
    for x1, y1, x2, y2 in boxes_at(index, start):
        moving |= (xs >= x1) & (xs < x2) & (ys >= y1) & (ys < y2)
    dx = np.where(moving, SPEED * reads, 0.0)
    return np.stack([xs, ys, dx, np.zeros(xs.size)], axis=1).astype(np.float32)


def play(model, reads: float, frames: int = 110, start: float = 60.0) -> tuple[KeyframeTracker, list[float]]:
    """Run a tracker over the drawn stream; per frame between keyframes, how far its boxes' centres
    are from the objects' (px, the largest of the three)."""
    tracker = KeyframeTracker(model, 30)
    errors = []
    for i in range(frames):
        frame = Frame("cam", i, i / 30, 0.0, BLANK, motion_vectors=vectors_at(i, reads, start) if i else None)
        truth = boxes_at(i, start)
        if i % INTERVAL == 0:
            tracker.update(frame, sv.Detections(xyxy=truth, confidence=np.full(3, 0.9), class_id=np.zeros(3, int),
                                                data={"class_name": np.array(["car"] * 3)}))
            continue
        shown = tracker.propagate(frame).xyxy
        assert len(shown) == 3
        centres = (np.sort(shown, axis=0)[:, :2] + np.sort(shown, axis=0)[:, 2:]) / 2
        errors.append(float(np.abs(centres - (truth[:, :2] + truth[:, 2:]) / 2).max()))
    return tracker, errors


@pytest.mark.parametrize("reads,truth", [(1.25, 0.8), (0.75, 4 / 3)])
def test_vectors_that_read_too_far_or_too_short_are_learned_and_the_boxes_stay_on_their_objects(reads, truth):
    """1.25: an encoder with several reference frames; 0.75: B-frames whose blocks come from nearer
    than the source divides by."""
    learned, with_scale = play(MotionVectors(), reads=reads)
    plain, without = play(UnlearnedVectors(), reads=reads)
    # the prior still holds a little of 1
    assert min(truth, 1.0) <= learned.scale.gain <= max(truth, 1.0) and abs(learned.scale.gain - truth) < 0.1
    assert plain.scale.gain == 1.0 and plain.motion_scale is None and learned.motion_scale == learned.scale.gain
    late = slice(len(with_scale) // 2, None)       # once some keyframes have been matched
    assert max(with_scale[late]) < 0.5 * max(without[late])
    assert max(without[late]) > 5.0                # the unlearned boxes drift several pixels a second


def test_exact_vectors_leave_the_boxes_as_they_were():
    learned, with_scale = play(MotionVectors(), reads=1.0)
    _, without = play(UnlearnedVectors(), reads=1.0)
    assert learned.scale.matches > 0 and learned.scale.gain == 1.0
    assert with_scale == without


def test_boxes_cut_by_the_frames_edge_teach_nothing():
    """Objects entering at the left edge: a box there is cut, and its centre moves with the cut."""
    tracker, _ = play(MotionVectors(), reads=1.25, frames=9 * INTERVAL + 1, start=-20.0)
    assert tracker.scale.matches < 3 * 9           # the three objects' first matches, from the edge, left out
    first, _ = play(MotionVectors(), reads=1.25, frames=INTERVAL + 1, start=-20.0)
    assert first.scale.matches == 0


def test_a_streams_stats_say_the_factor_its_mv_tracker_learned(tmp_path):
    """The shipped sample through a pipeline, the motion detector boxing what moves: with `mv` every
    `stats` message carries the stream's `motion_scale`; with `kalman` (nothing learned) none does."""
    import streamlens

    from .test_pipeline_run import write_pipeline
    from .test_runtime_trust import SAMPLE, Collect

    for motion in ("mv", "kalman"):
        path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}}}]
detector: {{backend: motion}}
keyframes: {{interval: 10}}
tracker: {{motion: {motion}}}
""")
        sink = Collect()
        report = streamlens.Pipeline.from_yaml(path, sinks=[sink]).run(stats_every_s=0.05)
        assert report.exit_code == 0
        stats = [m for m in sink.messages if m["type"] == "stats"]
        assert stats
        if motion == "mv":
            assert all(0.5 <= m.get("motion_scale", 0) <= 1.5 for m in stats), [(m["frames"], m.get("motion_scale")) for m in stats]
        else:
            assert not any("motion_scale" in m for m in stats)
