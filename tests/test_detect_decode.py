"""Output decoders, NMS, class names and the classes filter, on tensors made by hand."""

from __future__ import annotations

import numpy as np
import pytest

from streamlens.detect.detections import to_detections
from streamlens.detect.heads import (Candidates, End2EndHead, YoloxHead, Yolov8Head, anchor_count,
                                     identify_head)
from streamlens.detect.names import read_names_file, resolve_names, wanted_class_ids
from streamlens.detect.nms import nms
from streamlens.detect.preprocess import letterbox_geometry
from streamlens.errors import DetectorError


def test_yolox_raw_head_decodes_grid_and_stride():
    head = YoloxHead(num_classes=3)
    raw = np.zeros((1, anchor_count((64, 64)), 8), np.float32)  # 64 + 16 + 4 anchor points
    # stride 16 level starts after the 8x8 stride-8 grid: cell (x=2, y=1) is row 64 + 1 * 4 + 2
    row = 64 + 1 * 4 + 2
    raw[0, row] = [0.5, 0.25, np.log(2.0), np.log(1.0), 0.9, 0.1, 0.8, 0.2]
    found = head.decode(raw, (64, 64), conf=0.5)[0]
    cx, cy, w, h = (2 + 0.5) * 16, (1 + 0.25) * 16, 2.0 * 16, 1.0 * 16
    assert np.allclose(found.boxes, [[cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]])
    assert np.allclose(found.scores, [0.9 * 0.8]) and found.class_ids.tolist() == [1]
    assert len(head.decode(raw, (64, 64), conf=0.5, wanted=np.array([0, 2]))[0].scores) == 0


def test_yolov8_head_decodes_centre_size_boxes():
    head = Yolov8Head(num_classes=2)
    raw = np.zeros((2, 6, anchor_count((64, 64))), np.float32)
    raw[1, :, 5] = [30, 20, 10, 8, 0.1, 0.7]
    found = head.decode(raw, (64, 64), conf=0.25)
    assert len(found[0].scores) == 0
    assert np.allclose(found[1].boxes, [[25, 16, 35, 24]]) and found[1].class_ids.tolist() == [1]


def test_end2end_head_keeps_rows_above_conf():
    raw = np.array([[[1, 2, 3, 4, 0.9, 5], [0, 0, 1, 1, 0.1, 0]]], np.float32)
    found = End2EndHead(0).decode(raw, (64, 64), conf=0.25)[0]
    assert found.boxes.tolist() == [[1, 2, 3, 4]] and found.class_ids.tolist() == [5]


@pytest.mark.parametrize("shape,ultralytics,end2end,name", [
    ((1, 3549, 85), False, False, "yolox"),
    ((1, 84, 3549), True, False, "yolov8"),
    ((1, 84, 3549), False, False, "yolov8"),
    ((1, 300, 6), True, True, "end2end"),
])
def test_heads_are_told_apart_by_shape(shape, ultralytics, end2end, name):
    assert identify_head(shape, (416, 416), ultralytics=ultralytics, end2end=end2end).name == name


def test_a_shape_that_fits_no_head_is_one_clear_error():
    with pytest.raises(DetectorError) as e:
        identify_head((1, 10), (416, 416), ultralytics=False, where="detector.model: /m.onnx")
    assert str(e.value) == ("detector.model: /m.onnx: output shape [1, 10] fits no known head for input 416x416 "
                            "(YOLOX [1, 3549, 5+C], YOLOv8 [1, 4+C, 3549], end-to-end [1, K, 6])")


def test_nms_matches_torchvision_batched_nms():
    torchvision = pytest.importorskip("torchvision")
    import torch

    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 300, (400, 2))
    wh = rng.uniform(10, 80, (400, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, 400).astype(np.float32)
    classes = rng.integers(0, 4, 400)
    for iou in (0.3, 0.5, 0.7):
        ours = nms(boxes, scores, classes, iou, max_det=1000)
        theirs = torchvision.ops.batched_nms(torch.from_numpy(boxes), torch.from_numpy(scores),
                                             torch.from_numpy(classes), iou).numpy()
        assert ours.tolist() == theirs.tolist()



def _greedy_nms(boxes, scores, classes, iou, max_det, across):
    """Greedy NMS written out in numpy, as streamlens ran it before it was compiled: the reference."""
    x1, y1, x2, y2 = np.asarray(boxes, np.float64).T
    areas = (x2 - x1).clip(0) * (y2 - y1).clip(0)
    order, keep = np.argsort(-scores, kind="stable"), []
    while order.size and len(keep) < max_det:
        best, rest = order[0], order[1:]
        keep.append(int(best))
        w = (np.minimum(x2[best], x2[rest]) - np.maximum(x1[best], x1[rest])).clip(0)
        h = (np.minimum(y2[best], y2[rest]) - np.maximum(y1[best], y1[rest])).clip(0)
        union = areas[best] + areas[rest] - w * h
        overlap = np.divide(w * h, union, out=np.zeros_like(union), where=union > 0)
        order = rest[overlap <= np.where(classes[rest] == classes[best], iou, across)]
    return keep


@pytest.mark.parametrize("seed", range(6))
def test_nms_across_classes_and_its_cap_keep_the_boxes_the_numpy_greedy_keeps(seed):
    rng = np.random.default_rng(seed)
    count = int(rng.integers(0, 120))
    xy, wh = rng.uniform(0, 300, (count, 2)), rng.uniform(0, 80, (count, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = rng.choice([0.3, 0.5, 0.8, 0.9], count).astype(np.float32)  # ties: kept in index order
    classes = rng.integers(0, 3, count)
    for across in (0.7, 0.45):
        for max_det in (300, 5):
            assert nms(boxes, scores, classes, 0.45, max_det, across=across).tolist() == \
                _greedy_nms(boxes, scores, classes, 0.45, max_det, across)

def test_to_detections_maps_back_and_drops_boxes_in_the_padding():
    geometry = letterbox_geometry((1280, 720), (416, 416), center=False)  # frame rows 0..234 of the input
    found = Candidates(np.array([[13, 13, 26, 26], [13, 13, 26, 26.5], [10, 300, 50, 400]], np.float32),
                       np.array([0.9, 0.8, 0.7], np.float32), np.array([2, 2, 0]))
    det = to_detections(found, geometry, {0: "person", 2: "car"}, iou=0.45)
    assert det.xyxy.tolist() == [[40.0, 40.0, 80.0, 80.0]]  # the duplicate is suppressed, the padding box gone
    assert det.confidence.dtype == np.float32 and det.class_id.tolist() == [2]
    assert det.data["class_name"].tolist() == ["car"] and det.tracker_id.tolist() == [-1]


def test_names_from_files_and_the_classes_filter(tmp_path):
    (tmp_path / "a.txt").write_text("car\ntruck\n\n")
    (tmp_path / "b.yaml").write_text("names: {0: car, 1: truck}\n")
    (tmp_path / "c.json").write_text('["car", "truck"]')
    for name in ("a.txt", "b.yaml", "c.json"):
        assert read_names_file(tmp_path / name) == {0: "car", 1: "truck"}
    assert resolve_names(80)[2] == "car"  # COCO when an 80-class model says nothing
    with pytest.raises(DetectorError, match=r"detector.names: .*a.txt: 2 names for a model with 80 classes"):
        resolve_names(80, names_file=tmp_path / "a.txt")
    names = resolve_names(80)
    assert wanted_class_ids(["car", "bus", 7], names).tolist() == [2, 5, 7]
    with pytest.raises(DetectorError, match=r"detector.classes\[1\]: 'lorry' is not a class of the model"):
        wanted_class_ids(["car", "lorry"], names)
