"""One object, one track: a model that boxes one vehicle as two classes gives one box by default
(`detector.agnostic_nms: auto` with a tracker), so one track and one crossing of a line; a track's
label is its detections' vote, on keyframes and between, while each object's own class is what the
detector said of it on its last keyframe."""

from __future__ import annotations

import numpy as np
import pytest
import supervision as sv

from streamlens.analytics import LineRule, StreamAnalytics
from streamlens.config import DetectorConfig
from streamlens.config.model import PipelineConfig
from streamlens.detect.detections import SAME_OBJECT_IOU, to_detections
from streamlens.detect.heads import Candidates
from streamlens.detect.preprocess import letterbox_geometry
from streamlens.frame import TRACK_CLASS_NAME, Frame, track_labels
from streamlens.track import KeyframeTracker

WIDTH, HEIGHT = 640, 360
BLANK = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (HEIGHT, WIDTH, 3))
NAMES = {2: "car", 3: "motorbike", 7: "truck"}
GEOMETRY = letterbox_geometry((WIDTH, HEIGHT), (WIDTH, HEIGHT), center=False)  # input pixels = source pixels
GATE = ((0.0, 200.0), (640.0, 200.0))  # across the picture; a van driving down over it crosses `out`


def frame(index: int) -> Frame:
    return Frame("cam1", index, index / 30, 0.0, BLANK)


def van(index: int) -> list[float]:
    """A van driving down the picture, 4 px a frame, across GATE near frame 25."""
    y = 60 + 4 * index
    return [300.0, y, 380.0, y + 60]


def boxed_twice(index: int) -> Candidates:
    """What a model reports for the van: car and truck on nearly the same box (IoU about 0.9),
    before NMS; the truck's score the higher on every third frame."""
    box = np.array(van(index), np.float32)
    twin = box + np.array([2, 1, -2, 2], np.float32)
    car, truck = (0.62, 0.70) if index % 3 == 2 else (0.75, 0.55)
    return Candidates(np.stack([box, twin]), np.array([car, truck], np.float32), np.array([2, 7]))


def count(agnostic, interval: int) -> tuple[set[int], list[tuple[int, str, str]], list[str], list[str]]:
    """The van through the detector's NMS, the tracker and a line (fed the tracks' labels, as the
    pipeline's analytics are): the track ids shown, the line's crossings (id, direction, label), and
    the track labels and the classes shown on every frame."""
    tracker = KeyframeTracker("kalman", 30, high_score=0.3, new_track_score=0.3)
    analytics = StreamAnalytics(lines=[(LineRule("gate", GATE), None)])
    ids, crossed, labels, classes = set(), [], [], []
    for index in range(50):
        if index % interval == 0:
            found = to_detections(boxed_twice(index), GEOMETRY, NAMES, iou=0.45, agnostic=agnostic)
            out = tracker.update(frame(index), found)
        else:
            out = tracker.propagate(frame(index))
        names = track_labels(out)[1].tolist()
        ids |= set(out.tracker_id.tolist())
        labels += names
        classes += out.data["class_name"].tolist()
        events = analytics.update(index / 30, out.xyxy, out.tracker_id, names, out.confidence).events
        crossed += [(e["object"]["id"], e["direction"], e["object"]["label"]) for e in events
                    if e["event"] == "line_cross"]
    return ids, crossed, labels, classes


@pytest.mark.parametrize("interval", [1, 5])
def test_one_object_boxed_as_two_classes_is_one_track_and_one_crossing(interval):
    ids, crossed, labels, classes = count("auto", interval)
    assert ids == {1}
    assert crossed == [(1, "out", "car")]
    assert set(labels) == {"car"}  # the vote: car scores most over the van's life
    if interval == 1:  # the detector's own class, where truck won its NMS (every third frame)
        assert classes == ["truck" if i % 3 == 2 else "car" for i in range(50)]
    # per class only (agnostic_nms: false), as before: two tracks and two crossings
    ids, crossed, _, _ = count(False, interval)
    assert len(ids) == 2 and sorted(d for _, d, _ in crossed) == ["out", "out"]


def test_auto_keeps_two_objects_of_two_classes_that_overlap_less():
    """A rider on a motorbike: the two boxes overlap by less than SAME_OBJECT_IOU (here IoU 0.5);
    `auto` keeps both, NMS across classes at `iou` (`true`) keeps one."""
    rider = np.array([300, 100, 340, 210], np.float32)
    bike = np.array([298, 140, 342, 230], np.float32)
    found = Candidates(np.stack([rider, bike]), np.array([0.8, 0.7], np.float32), np.array([0, 3]))
    names = {0: "person", 3: "motorbike"}
    assert len(to_detections(found, GEOMETRY, names, iou=0.45, agnostic="auto")) == 2
    assert len(to_detections(found, GEOMETRY, names, iou=0.45, agnostic=True)) == 1
    assert SAME_OBJECT_IOU > 0.45
    # the same across classes for a head that chose its own boxes (RT-DETR, end-to-end exports)
    twins = boxed_twice(0)
    assert len(to_detections(twins, GEOMETRY, NAMES, iou=0.45, apply_nms=False, agnostic="auto")) == 1
    assert len(to_detections(twins, GEOMETRY, NAMES, iou=0.45, apply_nms=False, agnostic=False)) == 2


def test_agnostic_nms_is_auto_by_default_and_false_without_a_tracker(tmp_path):
    assert DetectorConfig(backend="motion").agnostic_nms == "auto"
    base = {"sources": [{"name": "cam1", "uri": "samples/traffic.mp4"}],
            "detector": {"backend": "onnx", "model": str(tmp_path / "m.onnx")}}
    (tmp_path / "m.onnx").write_bytes(b"")

    def resolved(**extra):
        return PipelineConfig.model_validate({**base, **extra, "path": tmp_path / "p.yaml"}).detector.agnostic_nms

    assert resolved() == "auto" and resolved(tracker="mv") == "auto"
    assert resolved(tracker="none") is False
    assert resolved(detector={**base["detector"], "agnostic_nms": True}, tracker="none") is True
    with pytest.raises(ValueError, match="expected auto, true or false, got 'maybe'"):
        resolved(detector={**base["detector"], "agnostic_nms": "maybe"})


def test_a_label_is_the_vote_of_the_track_s_detections():
    """Score-weighted: a van called car 0.8, truck 0.6, car 0.7, truck 0.6 stays a car (1.5 against
    1.2), on its keyframes too, where the box, score and class are the detection's; it becomes a
    truck once truck has scored more (1.9 against 1.5). Between keyframes the class is the last
    detection's."""
    tracker = KeyframeTracker("kalman", 30, high_score=0.25, new_track_score=0.25)
    seen = [("car", 0.8), ("truck", 0.6), ("car", 0.7), ("truck", 0.6), ("truck", 0.7), ("truck", 0.9)]
    labels = []
    for k, (name, score) in enumerate(seen):
        index = 3 * k
        found = sv.Detections(xyxy=np.array([[100.0 + index, 100, 160 + index, 150]]), confidence=np.array([score]),
                              class_id=np.array([{"car": 2, "truck": 7}[name]]),
                              data={"class_name": np.array([name], object)})
        out = tracker.update(frame(index), found)
        assert out.confidence.tolist() == pytest.approx([score]) and out.xyxy.tolist() == found.xyxy.tolist()
        assert out.data["class_name"].tolist() == [name] and out.class_id.tolist() == [{"car": 2, "truck": 7}[name]]
        labels.append(out.data[TRACK_CLASS_NAME][0])
        assert track_labels(out)[0][0] == {"car": 2, "truck": 7}[labels[-1]]
        between = tracker.propagate(frame(index + 1))
        assert between.data[TRACK_CLASS_NAME].tolist() == [labels[-1]]
        assert between.data["class_name"].tolist() == [name]
    assert labels == ["car", "car", "car", "car", "truck", "truck"]
    assert list(tracker.tracks.ids) == [1]


def test_a_result_says_what_the_detector_saw_and_the_track_s_label():
    """On the wire (schema v1) each tracked object carries `cls`/`label`, the detector's class on its
    last keyframe, and `track_cls`/`track_label`, its track's vote; without a tracker, neither of
    the latter."""
    from streamlens.frame import FrameResult, empty_detections
    from streamlens.wire.schema import frame_message

    tracker = KeyframeTracker("kalman", 30, high_score=0.25, new_track_score=0.25)
    objects = []
    for index, (name, cls, score) in enumerate([("car", 2, 0.9), ("truck", 7, 0.5)]):
        found = sv.Detections(xyxy=np.array([[100.0 + index, 100, 160 + index, 150]]), confidence=np.array([score]),
                              class_id=np.array([cls]), data={"class_name": np.array([name], object)})
        out = tracker.update(frame(index), found)
        objects.append(frame_message(FrameResult(frame(index), index, True, out))["objects"][0])
    between = tracker.propagate(frame(2))
    objects.append(frame_message(FrameResult(frame(2), 2, False, between))["objects"][0])
    assert [(o["id"], o["cls"], o["label"], o["track_cls"], o["track_label"]) for o in objects] == [
        (1, 2, "car", 2, "car"), (1, 7, "truck", 2, "car"), (1, 7, "truck", 2, "car")]
    raw = sv.Detections(xyxy=np.array([[1.0, 1, 20, 20]]), confidence=np.array([0.9]), class_id=np.array([2]),
                        data={"class_name": np.array(["car"], object)})
    untracked = frame_message(FrameResult(frame(0), 0, True, raw))["objects"][0]
    assert untracked["label"] == "car" and "track_label" not in untracked
    assert frame_message(FrameResult(frame(0), 0, True, empty_detections()))["objects"] == []
