"""Masks from a detector that has them (an Ultralytics `-seg` model): each box's mask mapped from the
model's input back to source pixels, cut at its box, and carried between keyframes with no SAM."""

from __future__ import annotations


import numpy as np
import pytest

from streamlens.sinks.base import Sink
from streamlens.detect.detections import to_detections
from streamlens.detect.heads import Candidates
from streamlens.detect.preprocess import InputSpec, letterbox_geometry

from .conftest import REPO
from .seg_pipeline import run_seg_pipeline


def rectangle_logits(side: int, rectangle) -> np.ndarray:
    """Logits over `side` x `side` prototype cells: the signed distance to `rectangle` (x1, y1, x2,
    y2 in cells), positive inside."""
    cells = np.arange(side) + 0.5
    x1, y1, x2, y2 = rectangle
    dx = np.minimum(cells - x1, x2 - cells)
    dy = np.minimum(cells - y1, y2 - cells)
    return np.minimum(dy[:, None], dx[None, :])[None].astype(np.float32)


def test_a_seg_models_mask_lands_in_source_pixels_through_the_letterbox():
    """A 640x360 frame letterboxed (centred) into 320x320: scale 0.5, 70 rows of pad above. Logits
    over 80x80 prototypes (4 input pixels a cell) are the signed distance to an input rectangle, so
    the mask must be that rectangle in source pixels, cut at the box."""
    geometry = letterbox_geometry((640, 360), (320, 320), center=True)
    logits = rectangle_logits(80, np.array([40, 110, 120, 190]) / 4)  # the mask, in cells
    found = Candidates(np.array([[20, 90, 100, 230]], np.float32), np.array([0.9], np.float32),
                       np.array([0]), logits, 80 / 320)
    det = to_detections(found, geometry, {0: "person"}, iou=0.45)
    assert det.xyxy.tolist() == [[40.0, 40.0, 200.0, 320.0]]
    mask = det.data["masks"][0]
    points = np.concatenate([np.array(p).reshape(-1, 2) for p in mask.polygons()])
    # the rectangle (80, 80)-(240, 240) in source pixels, cut at the box's right edge (200)
    assert np.allclose([*points.min(0), *points.max(0)], [80, 80, 200, 240], atol=2.0), points


def test_a_seg_models_mask_lands_in_frame_pixels_from_a_region_of_the_frame():
    """`detector.regions: motion` on a fixed-size input: the region (200, 100)-(520, 340) of a 640x360
    frame fitted into 160x160 (scale 0.5, at the corner). Logits over 40x40 prototypes are the signed
    distance to the input rectangle (20, 20)-(100, 80), so the mask must be that rectangle in frame
    pixels, (240, 140)-(400, 260), cut at the box: where the region lies in the frame counts."""
    geometry = InputSpec((160, 160), pad="corner").region_geometry((640, 360), (200, 100, 520, 340))
    assert geometry.origin == (200, 100) and geometry.scale_x == 0.5 and (geometry.pad_x, geometry.pad_y) == (0, 0)
    logits = rectangle_logits(40, np.array([20, 20, 100, 80]) / 4)  # the mask, in cells
    found = Candidates(np.array([[10, 10, 90, 100]], np.float32), np.array([0.9], np.float32),
                       np.array([0]), logits, 40 / 160)
    det = to_detections(found, geometry, {0: "person"}, iou=0.45)
    assert det.xyxy.tolist() == [[220.0, 120.0, 380.0, 300.0]]
    polygons = det.data["masks"][0].polygons()
    assert polygons, "an empty mask: its logits were read elsewhere than under its box"
    points = np.concatenate([np.array(p).reshape(-1, 2) for p in polygons])
    # the rectangle (240, 140)-(400, 260) in frame pixels, cut at the box's right edge (380)
    assert np.allclose([*points.min(0), *points.max(0)], [240, 140, 380, 260], atol=2.0), points


@pytest.fixture(scope="module")
def seg_model(tmp_path_factory):
    """Ultralytics' yolov8n-seg built from its yaml (random weights, the same on every run), saved as
    a .pt: no download."""
    import torch

    from streamlens.detect.ultralytics_offline import import_ultralytics_offline

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("seg") / "seg.pt"
    import_ultralytics_offline().YOLO("yolov8n-seg.yaml").save(path)
    return path


class KeyframesKept(Sink):
    """Keeps the pixels and the objects of the first few keyframes a run publishes."""

    name = "keyframes-kept"

    def __init__(self, most: int = 6):
        self.most = most
        self.kept: list[tuple[np.ndarray, list]] = []

    def write(self, item, message, payload) -> None:
        if message.get("type") == "frame" and message.get("keyframe") and len(self.kept) < self.most:
            self.kept.append((item.frame.image.copy(), message["objects"]))


def test_a_seg_detector_gives_masks_without_a_segment_section(tmp_path, seg_model):
    """Random weights score every box near zero, so `conf` is set under that: the run completes, every
    object carries `mask` (RLE, as `segment.output` asks, with no `segment.model`), and on a keyframe
    each object's mask is the one the detector gives its box on that frame's pixels: the right mask
    went to the right track, through the contract's RLE. (These weights make each mask nearly all of
    its box or nothing, so whether its pixels lie inside its box tells nothing; where the pixels of a
    mask with a shape land is checked with known logits above.)"""
    from streamlens.detect.ultralytics_backend import UltralyticsDetector
    from streamlens.frame import Frame
    from streamlens.segment.masks import rle_decode
    from streamlens.track.matching import box_iou

    keyframes = KeyframesKept()
    _, objects = run_seg_pipeline(tmp_path, f"""
sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}}}]
detector: {{backend: ultralytics, model: {seg_model}, imgsz: 320, conf: 0.0001, max_det: 3}}
keyframes: {{interval: 10}}
segment: {{output: rle}}
sinks: [{{type: jsonl, path: out.jsonl}}]
""", sinks=[keyframes])
    assert objects and all("mask" in o for o in objects)
    detector = UltralyticsDetector(seg_model, imgsz=320, conf=0.0001, max_det=3)
    checked = 0
    for image, shown in keyframes.kept:
        found = detector.detect([Frame("cam1", 0, 0.0, 0.0, image)])[0]
        height, width = image.shape[:2]
        for obj in shown:
            overlap = box_iou(np.array([obj["box"]], np.float64), found.xyxy.astype(np.float64))[0]
            k = int(overlap.argmax())
            assert overlap[k] > 0.99, (obj["box"], found.xyxy)
            mine, want = rle_decode(obj["mask"]), rle_decode(found.data["masks"][k].rle(height, width))
            assert (mine == want).all(), (obj["box"], mine.sum(), want.sum(), (mine != want).sum())
            checked += 1
    detector.close()
    assert checked >= 6, checked
