"""MotionDetector on real video: the synthetic sample (with its ground truth) and a real highway camera.

The sample `samples/traffic.mp4` is made by `tools/make_sample.py`, whose `object_boxes(frame_index)`
gives the true box of every object; the highway clip lies in ../shared/data and the tests that need it
skip when that folder is absent.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from streamlens.detect.motion import MotionDetector, shrink_to_grey
from streamlens.frame import Frame

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "traffic.mp4"
MAKE_SAMPLE = ROOT / "tools" / "make_sample.py"
SHARED_DATA = ROOT.parent / "shared" / "data"
HIGHWAY = SHARED_DATA / "video" / "highway_720p30.mp4"

FIRST_SCORED_FRAME = 30


def load_make_sample():
    """tools/make_sample.py as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("make_sample", MAKE_SAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def iter_frames(path: Path, stream: str) -> Iterator[Frame]:
    """The frames of `path` one by one, as `Frame`s of `stream`, decoded with PyAV."""
    with av.open(str(path)) as container:
        for index, image in enumerate(container.decode(video=0)):
            yield Frame(stream=stream, index=index, pts=image.time, ts=0.0, image=image.to_ndarray(format="bgr24"))


def decode_frames(path: Path, stream: str) -> list[Frame]:
    """Every frame of `path` as a `Frame` of `stream`."""
    return list(iter_frames(path, stream))


def iou(a, b) -> float:
    """Intersection over union of two x1, y1, x2, y2 boxes."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def fully_visible(boxes, size) -> list[tuple]:
    """The ground-truth boxes of objects wholly inside the frame and overlapping no other object."""
    width, height = size
    inside = [box for box in boxes if box[1] > 0 and box[2] > 0 and box[3] < width and box[4] < height]
    return [box for box in inside if not any(other is not box and iou(box[1:], other[1:]) > 0 for other in boxes)]


def score_on_sample(frames: list[Frame], results, size) -> tuple[float, int, int]:
    """(recall at IoU 0.5 of fully visible objects, boxes touching no object, all boxes) from frame 30."""
    make_sample = load_make_sample()
    matched = expected = stray = reported = 0
    for frame, detections in zip(frames, results):
        if frame.index < FIRST_SCORED_FRAME:
            continue
        truth = make_sample.object_boxes(frame.index, size=size)
        for box in fully_visible(truth, size):
            expected += 1
            matched += any(iou(box[1:], found) >= 0.5 for found in detections.xyxy)
        for found in detections.xyxy:
            reported += 1
            stray += not any(iou(box[1:], found) > 0 for box in truth)
    return matched / max(expected, 1), stray, reported


@pytest.fixture(scope="module")
def sample_frames() -> list[Frame]:
    assert SAMPLE.exists(), f"{SAMPLE} is missing: run `python tools/make_sample.py`"
    return decode_frames(SAMPLE, "traffic")


@pytest.fixture(scope="module")
def highway_video() -> Path:
    if not HIGHWAY.exists():
        pytest.skip(f"real video {HIGHWAY} is absent (../shared/data is only in the project's workplace)")
    return HIGHWAY


def assert_well_formed(detections, frame: Frame) -> None:
    """Every field the graph relies on is there, boxes lie in the frame, confidences in [0, 1]."""
    count = len(detections)
    assert detections.xyxy.dtype == np.float32 and detections.xyxy.shape == (count, 4)
    assert detections.confidence.shape == (count,) and detections.class_id.shape == (count,)
    assert np.all(detections.class_id == 0)
    assert np.all(detections.tracker_id == -1)
    assert list(detections.data["class_name"]) == ["motion"] * count
    x1, y1, x2, y2 = detections.xyxy.T
    assert np.all((0 <= x1) & (x1 < x2) & (x2 <= frame.width)), detections.xyxy
    assert np.all((0 <= y1) & (y1 < y2) & (y2 <= frame.height)), detections.xyxy
    assert np.all((0 <= detections.confidence) & (detections.confidence <= 1)), detections.confidence


def test_finds_the_moving_objects_of_the_sample(sample_frames):
    detector = MotionDetector()
    results = detector.detect(sample_frames)
    for frame, detections in zip(sample_frames, results):
        assert_well_formed(detections, frame)
    assert all(len(detections) == 0 for detections in results[: detector.warmup])
    recall, stray, reported = score_on_sample(sample_frames, results, (640, 360))
    assert recall >= 0.85, f"recall {recall:.3f}"
    assert stray <= 0.02 * reported, f"{stray} of {reported} boxes touch no object"


def test_boxes_are_in_source_pixels_whatever_the_size(sample_frames):
    """The same scene at 1280x720: the work image is the same, the boxes come back twice as large."""
    frames = [
        Frame("traffic_720p", f.index, f.pts, 0.0, cv2.resize(f.image, (1280, 720), interpolation=cv2.INTER_LINEAR))
        for f in sample_frames[:150]
    ]
    results = MotionDetector().detect(frames)
    for frame, detections in zip(frames, results):
        assert_well_formed(detections, frame)
    recall, stray, reported = score_on_sample(frames, results, (1280, 720))
    assert recall >= 0.85, f"recall {recall:.3f}"
    assert stray <= 0.02 * reported, f"{stray} of {reported} boxes touch no object"


def test_every_fifth_frame_still_finds_the_moving_objects(sample_frames):
    keyframes = sample_frames[::5]
    results = MotionDetector().detect(keyframes)
    recall, stray, reported = score_on_sample(keyframes, results, (640, 360))
    assert recall >= 0.85, f"recall {recall:.3f}"
    assert stray <= 0.05 * reported, f"{stray} of {reported} boxes touch no object"


def test_streams_in_one_batch_keep_separate_backgrounds(sample_frames):
    """Frames of two streams interleaved in batches give exactly what each stream gives alone."""
    frames = sample_frames[:120]
    mirrored = [Frame("mirrored", f.index, f.pts, 0.0, np.ascontiguousarray(f.image[:, ::-1])) for f in frames]
    alone_a = MotionDetector().detect(frames)
    alone_b = MotionDetector().detect(mirrored)
    interleaved = [frame for pair in zip(frames, mirrored) for frame in pair]
    detector = MotionDetector()
    together = []
    for start in range(0, len(interleaved), 8):  # batches of 8: four frames of each stream
        together.extend(detector.detect(interleaved[start : start + 8]))
    assert sum(len(d) for d in alone_a) > 100
    differs = False
    for index, (a, b) in enumerate(zip(alone_a, alone_b)):
        np.testing.assert_array_equal(together[2 * index].xyxy, a.xyxy)
        np.testing.assert_array_equal(together[2 * index].confidence, a.confidence)
        np.testing.assert_array_equal(together[2 * index + 1].xyxy, b.xyxy)
        differs = differs or a.xyxy.shape != b.xyxy.shape or not np.array_equal(a.xyxy, b.xyxy)
    assert differs, "the two streams should not give the same boxes"


def test_a_new_frame_size_starts_a_new_background():
    detector = MotionDetector(warmup=2)
    small = Frame("cam", 0, None, 0.0, np.full((90, 160, 3), 80, np.uint8))
    large = Frame("cam", 1, None, 0.0, np.full((360, 640, 3), 80, np.uint8))
    assert len(detector.detect([small, small, small])[2]) == 0
    assert len(detector.detect([large])[0]) == 0
    assert detector.work_size("cam") == (320, 180)
    assert len(detector.detect([small])[0]) == 0, "back to the small size: a fresh model, warming up again"
    assert detector.work_size("cam") == (160, 90), "a frame narrower than work_width is never enlarged"
    assert detector.work_size("other") is None


def test_shrink_to_grey_averages_like_an_area_resize(sample_frames):
    image = cv2.resize(sample_frames[100].image, (1280, 720))
    expected = cv2.resize(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), (320, 180), interpolation=cv2.INTER_AREA)
    difference = np.abs(shrink_to_grey(image, (320, 180)).astype(int) - expected.astype(int))
    assert difference.mean() < 1.0 and difference.max() <= 3


def test_finds_cars_on_a_real_highway_camera(highway_video):
    detector = MotionDetector()
    frames_with_boxes = scored = 0
    for frame in iter_frames(highway_video, "highway"):  # 897 frames of 1280x720: one at a time
        detections = detector.detect([frame])[0]
        assert_well_formed(detections, frame)
        if frame.index >= FIRST_SCORED_FRAME:
            scored += 1
            frames_with_boxes += len(detections) > 0
    assert frames_with_boxes >= 0.85 * scored, f"boxes on {frames_with_boxes} of {scored} frames"


def test_make_sample_is_deterministic(tmp_path):
    """Two runs write the same file, frame for frame (and byte for byte), and the CLI honours --size."""
    outputs = []
    for run in ("a", "b"):
        out = tmp_path / f"{run}.mp4"
        command = [sys.executable, str(MAKE_SAMPLE), "--out", str(out), "--seconds", "1", "--size", "320x180"]
        subprocess.run(command, check=True, capture_output=True, timeout=60)
        outputs.append(out)
    frames_a, frames_b = (decode_frames(out, "run") for out in outputs)
    assert len(frames_a) == len(frames_b) == 30
    assert frames_a[0].image.shape == (180, 320, 3)
    for a, b in zip(frames_a, frames_b):
        np.testing.assert_array_equal(a.image, b.image)
    digests = {hashlib.sha256(out.read_bytes()).hexdigest() for out in outputs}
    assert len(digests) == 1


def test_a_sudden_change_of_light_starts_the_background_over(sample_frames):
    """From frame 100 the whole picture is brighter (lights on). No frame-sized box, ever; the model
    starts over from frame 100, so the objects on that frame leave ghosts for a while (the slow truck
    longest), and 50 frames later the moving objects are found again."""
    frames = [
        Frame("lights", f.index, f.pts, 0.0, cv2.add(f.image, 60) if f.index >= 100 else f.image)
        for f in sample_frames[:200]
    ]
    results = MotionDetector().detect(frames)
    half_frame = 0.5 * 640 * 360
    for detections in results:
        assert np.all(detections.area < half_frame), detections.xyxy
    recall, stray, reported = score_on_sample(frames[150:], results[150:], (640, 360))
    assert recall >= 0.75, f"recall {recall:.3f}"
