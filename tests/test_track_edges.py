"""Boxes at the edges of the frame: what a tracker shows always lies inside it with a real size,
and a track that leaves the picture ends.

An object drives out of a 640x360 frame across each edge; the detector sees its visible part (its
box clipped to the frame, as detectors report) until less than 4 px of it is left, then nothing.
Between keyframes the tracker carries it on by prediction (kalman motion, no pixels needed).
"""

from __future__ import annotations

import numpy as np
import pytest
import supervision as sv

from streamlens.frame import Frame
from streamlens.track import KeyframeTracker, PassThrough
from streamlens.track.base import MIN_BOX_PX

WIDTH, HEIGHT, FPS = 640, 360, 30.0
BLANK = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (HEIGHT, WIDTH, 3))
SIZE = np.array([60.0, 40.0])
STEP = 4.0  # pixels a frame
#: where the object starts (its top-left corner) and its direction, per edge it leaves by; its
#: leading side reaches the edge after 25 frames
EXITS = {"left": ((100.0, 160.0), (-1, 0)), "right": ((480.0, 160.0), (1, 0)),
         "top": ((290.0, 100.0), (0, -1)), "bottom": ((290.0, 220.0), (0, 1))}
AT_EDGE = 25


def frame(index: int) -> Frame:
    return Frame("cam1", index, index / FPS, 0.0, BLANK, clock=index / FPS)


def found(boxes) -> sv.Detections:
    xyxy = np.asarray(boxes, np.float32).reshape(-1, 4)
    detections = sv.Detections(xyxy=xyxy, confidence=np.full(len(xyxy), 0.9, np.float32),
                               class_id=np.zeros(len(xyxy), np.int64))
    detections.data["class_name"] = np.array(["car"] * len(xyxy), dtype=object)
    return detections


def object_box(edge: str, index: int) -> np.ndarray:
    start, direction = EXITS[edge]
    corner = np.array(start) + index * STEP * np.array(direction)
    return np.concatenate([corner, corner + SIZE])


def seen(box: np.ndarray) -> list:
    """What a detector reports of `box`: its part inside the frame, if at least 4 px wide and high."""
    clipped = np.clip(box, 0, [WIDTH, HEIGHT, WIDTH, HEIGHT])
    return [clipped] if min(clipped[2] - clipped[0], clipped[3] - clipped[1]) >= 4 else []


def assert_inside_with_a_size(out: sv.Detections) -> None:
    x1, y1, x2, y2 = np.asarray(out.xyxy, np.float64).T
    assert np.all((x1 >= 0) & (y1 >= 0) & (x2 <= WIDTH) & (y2 <= HEIGHT)), out.xyxy
    assert np.all((x2 - x1 >= MIN_BOX_PX) & (y2 - y1 >= MIN_BOX_PX)), out.xyxy


@pytest.mark.parametrize("interval", [1, 5])
@pytest.mark.parametrize("edge", list(EXITS))
def test_an_object_driven_off_an_edge_never_shows_an_empty_box_and_its_track_ends(edge, interval):
    tracker = KeyframeTracker("kalman", FPS)
    gone = None  # the first frame on which the object is wholly outside the frame
    for index in range(AT_EDGE + 40):
        box = object_box(edge, index)
        f = frame(index)
        out = tracker.update(f, found(seen(box))) if index % interval == 0 else tracker.propagate(f)
        assert_inside_with_a_size(out)
        outside = box[2] <= 0 or box[3] <= 0 or box[0] >= WIDTH or box[1] >= HEIGHT
        if outside and gone is None:
            gone = index
        if index == 5:
            assert out.tracker_id.tolist() == [1]
    assert gone is not None and len(tracker.objects()) == 0
    assert 1 not in tracker.tracks.ids, "the track has ended, not only stopped being shown"


@pytest.mark.parametrize("edge", list(EXITS))
def test_a_box_partly_outside_is_clipped_to_the_frame(edge):
    """Carried by prediction 16 px past the edge (less than half its size), the box is shown clipped
    to the frame, with the same id."""
    tracker = KeyframeTracker("kalman", FPS)
    for index in range(AT_EDGE + 1):  # detected until its leading side reaches the edge
        tracker.update(frame(index), found([object_box(edge, index)]))
    for index in range(AT_EDGE + 1, AT_EDGE + 5):
        out = tracker.propagate(frame(index))
    assert out.tracker_id.tolist() == [1]
    assert_inside_with_a_size(out)
    np.testing.assert_allclose(out.xyxy[0], np.clip(object_box(edge, AT_EDGE + 4), 0, [WIDTH, HEIGHT] * 2), atol=1.0)


def test_pass_through_clips_to_the_frame_and_leaves_out_boxes_without_a_size():
    """`tracker: none`: the detector's boxes, clipped to the frame; one less than a pixel wide once
    clipped is left out (it would be published as a box of no width)."""
    boxes = [[-5.0, 10.0, 20.0, 30.0], [100.0, 10.0, 100.4, 30.0], [630.0, 350.0, 700.0, 400.0],
             [-30.0, 10.0, 0.0, 30.0]]
    out = PassThrough().update(frame(0), found(boxes))
    np.testing.assert_allclose(out.xyxy, [[0, 10, 20, 30], [630, 350, 640, 360]])
    assert out.tracker_id.tolist() == [-1, -1] and out.data["class_name"].tolist() == ["car", "car"]
    assert out.confidence.shape == (2,)
