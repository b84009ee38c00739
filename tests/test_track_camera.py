"""Camera motion compensation on a real encoded clip: a camera that starts to pan.

The test encodes a small H.264 clip with PyAV (libx264): a window onto a wide textured scene, still
for the first frames, then panning right by `PAN` pixels a frame, so the scene slides left. Three
textured squares stand in the scene (two still, one walking right). The detector (played by the
test) reports every square on every `INTERVAL`-th frame, except that it misses square 0 on two
keyframes in a row; the camera starts to pan in between. The tracker reads the decoder's motion
vectors (`mv`) or optical flow between keyframes.

While square 0 is missed its track is lost: after a short while it is no longer shown, and nothing
measures it. Moved by the camera's motion, its box stays on the square and the square keeps its id
when it is detected again; moved by its own velocity alone (nil: it stood still while it was seen),
the box is left behind where the square was, and the square comes back as a new object.
"""

from __future__ import annotations

import threading
from pathlib import Path

import av
import numpy as np
import pytest
import supervision as sv

from streamlens.sources.file import FileSource
from streamlens.track import KeyframeTracker
from streamlens.track.matching import box_iou
from streamlens.track.motion import MotionVectors, SparseFlow

from .test_track_motion import _smooth

WIDTH, HEIGHT, FRAMES, SIZE = 320, 240, 60, 56
INTERVAL = 8
#: the camera stands still until this frame, then pans right by PAN pixels a frame
PAN_FROM, PAN = 28, 4
#: where each square stands in the scene at frame 0 (x, y) and how fast it walks (pixels a frame)
SQUARES = [((180, 30), 0), ((240, 150), 0), ((40, 90), 3)]
#: keyframes on which the detector misses square 0 (it is back on the next one)
MISSED = (24, 32)


def camera_x(index: int) -> int:
    return PAN * max(0, index - PAN_FROM)


def square_at(k: int, index: int) -> list[float]:
    """Square `k`'s box on frame `index`, in the picture."""
    (x, y), walk = SQUARES[k]
    x = x + walk * index - camera_x(index)
    return [float(x), float(y), float(x + SIZE), float(y + SIZE)]


def encode_clip(path: Path) -> Path:
    rng = np.random.default_rng(11)
    scene = _smooth(rng.random((HEIGHT, WIDTH + camera_x(FRAMES))) * 255, 3)
    patterns = [_smooth(rng.random((SIZE, SIZE)) * 255, 1) for _ in SQUARES]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"bf": "0", "g": "120", "preset": "veryfast", "crf": "20"}
        for index in range(FRAMES):
            left = camera_x(index)
            image = scene[:, left:left + WIDTH].copy()
            for k, pattern in enumerate(patterns):
                x1, y1 = (int(v) for v in square_at(k, index)[:2])
                image[y1:y1 + SIZE, x1:x1 + SIZE] = pattern
            grey = np.clip(image, 0, 255).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.dstack([grey] * 3), format="bgr24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def detections_on(index: int) -> sv.Detections:
    shown = [k for k in range(len(SQUARES)) if not (k == 0 and index in MISSED)]
    detections = sv.Detections(xyxy=np.array([square_at(k, index) for k in shown], np.float32),
                               confidence=np.full(len(shown), 0.9, np.float32), class_id=np.zeros(len(shown), int))
    detections.data["class_name"] = np.full(len(shown), "square", dtype=object)
    return detections


def run(path: Path, motion) -> list[sv.Detections]:
    """The tracker's objects on every frame, detections on every INTERVAL-th."""
    tracker = KeyframeTracker(motion, 30)
    out = []
    with FileSource("clip", path, export_mvs=True) as source:
        for frame in source.frames(threading.Event()):
            is_key = frame.index % INTERVAL == 0
            out.append(tracker.update(frame, detections_on(frame.index)) if is_key else tracker.propagate(frame))
    return out


def ids_of(objects: sv.Detections, index: int) -> list[int | None]:
    """Per square, the id of the object on it on frame `index` (IoU >= 0.5), or None."""
    if len(objects) == 0:
        return [None] * len(SQUARES)
    iou = box_iou(np.array([square_at(k, index) for k in range(len(SQUARES))]), objects.xyxy)
    return [int(objects.tracker_id[row.argmax()]) if row.max() >= 0.5 else None for row in iou]


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return encode_clip(tmp_path_factory.mktemp("pan") / "pan.mp4")


@pytest.mark.parametrize("motion", ["mv", "flow"])
def test_tracks_stay_on_their_objects_when_the_camera_pans(clip, motion):
    frames = run(clip, MotionVectors() if motion == "mv" else SparseFlow())
    assert len(frames) == FRAMES
    first = ids_of(frames[0], 0)
    assert None not in first and len(set(first)) == len(SQUARES)
    for index, objects in enumerate(frames):
        ids = ids_of(objects, index)
        # every square is covered by its own track whenever it is shown, through the pan and the misses
        assert all(i in (None, first[k]) for k, i in enumerate(ids)), (index, ids, first)
        if not (MISSED[0] <= index < MISSED[-1] + INTERVAL):
            assert ids == first, (index, ids)
    last = FRAMES - 1
    assert len(frames[last]) == len(SQUARES)        # the lost track was found again, not doubled


def test_prediction_alone_loses_the_missed_object(clip):
    """The Kalman prediction (no pixels) carries square 0's box where the square was: it comes back
    with a new id."""
    frames = run(clip, "kalman")
    first, back = ids_of(frames[0], 0), ids_of(frames[MISSED[-1] + INTERVAL], MISSED[-1] + INTERVAL)
    assert back[0] is not None and back[0] != first[0]
