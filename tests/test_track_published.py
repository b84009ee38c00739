"""A keyframe publishes what the detector saw: its boxes and scores, with the ids of the tracks they
went to; a box no track took with id -1; a track it missed not at all, though the tracker keeps it
and shows it on the frames after (coasting) and finds it again. Crafted detections, and the real
pipeline on a real file."""

from __future__ import annotations

import numpy as np
import pytest
import supervision as sv

import streamlens
from streamlens.detect import build_detector
from streamlens.detect.base import Detector
from streamlens.frame import Frame, FrameResult
from streamlens.graph.run import pipeline as runtime
from streamlens.track import KeyframeTracker

from .conftest import REPO
from .test_pipeline_run import write_pipeline

WIDTH, HEIGHT = 640, 360
BLANK = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (HEIGHT, WIDTH, 3))
SAMPLE = REPO / "samples" / "traffic.mp4"


def frame(index: int) -> Frame:
    return Frame("cam1", index, index / 30, 0.0, BLANK)


def found(boxes, scores) -> sv.Detections:
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    return sv.Detections(xyxy=boxes, confidence=np.asarray(scores, np.float32),
                         class_id=np.zeros(len(boxes), np.int64), data={"class_name": np.array(["person"] * len(boxes), object)})


@pytest.mark.parametrize("coast_s", [None, 0.4])
def test_a_keyframe_shows_its_detections_and_keeps_the_tracks_it_missed(coast_s):
    options = {} if coast_s is None else {"coast_s": coast_s}
    tracker = KeyframeTracker("kalman", 30, high_score=0.5, low_score=0.1, new_track_score=0.5, **options)
    a, b = (lambda i: [100 + 2 * i, 100, 140 + 2 * i, 200]), (lambda i: [400, 120, 450, 220])
    for index in range(0, 12, 3):  # both seen on four keyframes: confirmed
        tracker.update(frame(index), found([a(index), b(index)], [0.9, 0.8]))
        tracker.propagate(frame(index + 1)), tracker.propagate(frame(index + 2))
    # keyframe 12: `b` blinks; a weak box (0.3: under new_track_score, matches no track) appears
    detections = found([a(12), [250, 300, 290, 340]], [0.85, 0.3])
    out = tracker.update(frame(12), detections)
    assert out.xyxy.tolist() == detections.xyxy.tolist()                     # the detector's boxes,
    assert out.confidence.tolist() == pytest.approx([0.85, 0.3])              # its scores,
    assert out.tracker_id.tolist() == [1, -1]                                  # no coasting `b` on it
    assert detections.tracker_id is None                                       # which are left alone
    after = tracker.propagate(frame(13))        # by default the frames after show what the keyframe showed;
    assert sorted(after.tracker_id.tolist()) == ([1, 2] if coast_s else [1])  # with coast_s `b` coasts
    again = tracker.update(frame(15), found([a(15), b(15)], [0.9, 0.8]))      # and is found again
    assert again.tracker_id.tolist() == [1, 2] and again.xyxy.tolist() == found([a(15), b(15)], [1, 1]).xyxy.tolist()


@pytest.mark.parametrize("motion", ["kalman", "mv"])
def test_a_track_seen_weakly_is_kept_out_of_sight_and_found_again_with_its_id(motion):
    """A pipeline's detector reports boxes under its `conf` too, flagged weak, for the tracker alone.
    A walker seen on four keyframes going right, then for 1.5 s (under `lost_s`, 2 s) only weakly
    while it stands, then confidently again: no keyframe or frame between shows it in the weak
    stretch, and it comes back with its id. Without the weak boxes its track, carried on to the
    right, is far from it and it comes back as a new track. Weak boxes alone keep no
    track past `lost_s`: a walker seen only weakly from then on is gone for good."""
    from streamlens.frame import WEAK

    def walker(i: int) -> list[float]:
        x = 200 + 3 * min(i, 12)  # walks right, then stands
        return [x, 100, x + 40, 200]

    def run(weak_boxes: bool, strong_again: int = 57) -> tuple[list[int], list[int]]:
        tracker = KeyframeTracker(motion, 30, high_score=0.5, low_score=0.1, new_track_score=0.5)
        hidden, ids = [], []  # what the weak stretch showed (boxes on keyframes and between); ids after it
        for index in range(0, 120, 3):
            strong = index < 12 or index >= strong_again
            detections = found([walker(index)], [0.9 if strong else 0.3])
            detections.data[WEAK] = np.array([not strong])
            if not (strong or weak_boxes):
                detections = found([], [])
            out = tracker.update(frame(index), detections)
            assert WEAK not in out.data
            between = [tracker.propagate(frame(index + 1)), tracker.propagate(frame(index + 2))]
            if strong and index >= 12:
                ids += out.tracker_id.tolist()
            elif not strong:
                hidden += [len(out), *(len(b) for b in between)]
        return hidden, ids

    hidden, ids = run(weak_boxes=True)
    assert set(hidden) == {0} and set(ids) == {1}
    hidden, ids = run(weak_boxes=False)
    assert set(hidden) == {0} and set(ids) == {2}
    hidden, ids = run(weak_boxes=True, strong_again=105)  # 3 s of weak boxes only
    assert set(hidden) == {0} and set(ids) == {2}
    # keyframes 3 s apart: one weak box after `lost_s` keeps nothing either
    sparse = KeyframeTracker(motion, 30, high_score=0.5, low_score=0.1, new_track_score=0.5, coast_s=0.4)
    sparse.update(frame(0), found([walker(12)], [0.9]))
    weak = found([walker(12)], [0.3])
    weak.data[WEAK] = np.array([True])
    for index in range(1, 90):
        sparse.propagate(frame(index))
    assert len(sparse.update(frame(90), weak)) == 0 and len(sparse.propagate(frame(91))) == 0
    for index in range(92, 180):
        sparse.propagate(frame(index))
    assert sparse.update(frame(180), found([walker(12)], [0.9])).tracker_id.tolist() == [2]
    # weak whatever its score: with `high_score` under it, a weak box still starts no track
    low_high = KeyframeTracker(motion, 30, high_score=0.2, low_score=0.1, new_track_score=0.2)
    assert len(low_high.update(frame(0), weak)) == 0 and len(low_high.propagate(frame(1))) == 0
    assert len(low_high.tracks) == 0


class Recording(Detector):
    """The pipeline's own detector, its detections on every keyframe kept by frame index."""

    def __init__(self, inner: Detector):
        self.inner, self.names, self.seen = inner, inner.names, {}

    def detect(self, frames):
        out = self.inner.detect(frames)
        for f, d in zip(frames, out):
            self.seen[f.index] = (d.xyxy.copy(), d.confidence.copy(), d.class_id.copy())
        return out

    def close(self):
        self.inner.close()


def recorded_detectors(monkeypatch) -> list[Recording]:
    """The pipeline's detectors, each wrapped in a `Recording` as the runtime builds it."""
    recorders: list[Recording] = []

    def recording(cfg, weak_floor=None):
        recorders.append(Recording(build_detector(cfg, weak_floor)))
        return recorders[-1]

    monkeypatch.setattr(runtime, "build_detector", recording)
    return recorders


def rows(xyxy, scores, classes, size: tuple[int, int] = (WIDTH, HEIGHT)) -> list[tuple]:
    """Boxes as sorted rows (x1, y1, x2, y2, score, class), clipped to the frame as published."""
    xyxy = np.clip(np.asarray(xyxy, np.float64).reshape(-1, 4), 0, [*size, *size])
    return sorted((*np.round(box, 3).tolist(), round(float(s), 4), int(c)) for box, s, c in zip(xyxy, scores, classes))


@pytest.mark.parametrize("tracker", ["kalman", "mv"])
def test_in_the_pipeline_every_keyframe_publishes_exactly_its_detections(tmp_path, monkeypatch, tracker):
    """File mode, the real pipeline: every published keyframe's boxes and scores are the detector's
    on that frame (the motion detector on samples/traffic.mp4: boxes of several sizes, some at the
    frame's edge), its tracked boxes with their tracks' ids; frames between carry tracks only."""
    recorders = recorded_detectors(monkeypatch)
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}}}]
detector: {{backend: motion}}
keyframes: {{interval: 4}}
tracker: {{motion: {tracker}}}
""")
    keyframes = between = 0
    with streamlens.Pipeline.from_yaml(path) as pipeline:
        for item in pipeline.results():
            if not isinstance(item, FrameResult):
                continue
            det = item.detections
            if item.keyframe:
                keyframes += 1
                xyxy, scores, classes = recorders[0].seen[item.frame.index]
                assert rows(det.xyxy, det.confidence, det.class_id) == rows(xyxy, scores, classes), item.frame.index
                assert (det.tracker_id >= 1).sum() > 0 or len(det) == 0
            else:
                between += 1
                assert (det.tracker_id >= 1).all()
    assert keyframes == 75 and between == 225
    assert sum(len(v[0]) for v in recorders[0].seen.values()) > 50  # the sample has objects to box


def test_with_a_neural_detector_a_keyframe_publishes_its_boxes_at_conf_and_never_a_weak_one(tmp_path, monkeypatch):
    """File mode, the real pipeline, YOLOX-Nano on the real highway clip with a tracker: the detector
    reports boxes down to the tracker's `low_score` (0.1), and every published keyframe's boxes are
    exactly those at the detector's `conf` (0.3); none under it is published, on keyframes or between."""
    from .conftest import DATA, need_video

    model = DATA / "models" / "yolox_nano" / "yolox_nano.onnx"
    if not model.is_file():
        pytest.skip(f"{model} not found: the real YOLOX-Nano model lives in ../shared/data outside the repository")
    recorders = recorded_detectors(monkeypatch)
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {need_video("highway_720p30.mp4")}}}]
detector: {{backend: onnx, model: {model}, conf: 0.3, classes: [2, 5, 7], resize: bucket}}
keyframes: {{interval: 5}}
tracker: {{motion: mv}}
""")
    keyframes = 0
    with streamlens.Pipeline.from_yaml(path) as pipeline:
        for item in pipeline.results():
            if not isinstance(item, FrameResult):
                continue
            det = item.detections
            assert (det.confidence >= 0.3).all(), item.frame.index
            if item.keyframe:
                keyframes += 1
                xyxy, scores, classes = recorders[0].seen[item.frame.index]
                strong = scores >= 0.3
                assert rows(det.xyxy, det.confidence, det.class_id, (1280, 720)) == rows(
                    xyxy[strong], scores[strong], classes[strong], (1280, 720)), item.frame.index
    assert keyframes == 180
    assert sum(int((v[1] < 0.3).sum()) for v in recorders[0].seen.values()) > 100  # weak boxes were reported


def test_a_real_rtsp_camera_with_the_defaults_publishes_nothing_under_conf(tmp_path, monkeypatch):
    """A camera of a real RTSP server (GStreamer's, the highway clip), decoded in its worker process
    as cameras are by default, live keyframes (any whose detections come late goes out by motion and
    they are applied when they come), YOLOX-Nano at conf 0.3 and the `mv` tracker with their defaults: the
    detector reports weak boxes for the tracker, and no published object, on a keyframe or between,
    scores at or under `conf`; a keyframe published with its detections shows exactly those above it."""
    from .conftest import DATA, need_video
    from .rtsp_server import GstRtspServer, gst_missing

    model = DATA / "models" / "yolox_nano" / "yolox_nano.onnx"
    if not model.is_file():
        pytest.skip(f"{model} not found: the real YOLOX-Nano model lives in ../shared/data outside the repository")
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    recorders = recorded_detectors(monkeypatch)
    with GstRtspServer({"cam": need_video("highway_720p30.mp4")}, tmp_path) as server:
        path = write_pipeline(tmp_path, f"""
sources: [{{name: cam, uri: '{server.url("cam")}'}}]
detector: {{backend: onnx, model: {model}, conf: 0.3, classes: [2, 5, 7], resize: bucket}}
tracker: mv
""")
        published = keyframes = 0
        with streamlens.Pipeline.from_yaml(path) as pipeline:
            for item in pipeline.results():
                if not isinstance(item, FrameResult):
                    continue
                published += 1
                det = item.detections
                assert (det.confidence > 0.3).all(), (item.frame.index, det.confidence)
                if item.keyframe:
                    keyframes += 1
                    xyxy, scores, classes = recorders[0].seen[item.frame.index]
                    strong = scores > 0.3
                    assert rows(det.xyxy, det.confidence, det.class_id, (1280, 720)) == rows(
                        xyxy[strong], scores[strong], classes[strong], (1280, 720)), item.frame.index
                # a loaded machine publishes more keyframes late (by motion, then applied): read on
                # until enough came with their detections, as a camera goes on anyway
                if published >= 240 and keyframes > 10 or published >= 6000:
                    break
            pipeline.stop()
            print("late keyframes:", pipeline.stats["cam"].late_keyframes)
    assert keyframes > 10
    assert sum(int((v[1] <= 0.3).sum()) for v in recorders[0].seen.values()) > 20  # weak boxes were reported
