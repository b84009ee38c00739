"""Masks from a detector that has them (an Ultralytics `-seg` model): each box's mask mapped from the
model's input back to source pixels, cut at its box, and carried between keyframes with no SAM."""

from __future__ import annotations

import json

import numpy as np
import pytest

import streamlens
from streamlens.detect.detections import to_detections
from streamlens.detect.heads import Candidates
from streamlens.detect.preprocess import InputSpec, letterbox_geometry

from .conftest import REPO


def test_a_seg_models_mask_lands_in_source_pixels_through_the_letterbox():
    """A 640x360 frame letterboxed (centred) into 320x320: scale 0.5, 70 rows of pad above. Logits
    over 80x80 prototypes (4 input pixels a cell) are the signed distance to an input rectangle, so
    the mask must be that rectangle in source pixels, cut at the box."""
    geometry = letterbox_geometry((640, 360), (320, 320), center=True)
    cells = np.arange(80) + 0.5
    x1, y1, x2, y2 = np.array([40, 110, 120, 190]) / 4  # the mask, in cells
    dx = np.minimum(cells - x1, x2 - cells)
    dy = np.minimum(cells - y1, y2 - cells)
    logits = np.minimum(dy[:, None], dx[None, :])[None].astype(np.float32)
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
    cells = np.arange(40) + 0.5
    x1, y1, x2, y2 = np.array([20, 20, 100, 80]) / 4  # the mask, in cells
    dx = np.minimum(cells - x1, x2 - cells)
    dy = np.minimum(cells - y1, y2 - cells)
    logits = np.minimum(dy[:, None], dx[None, :])[None].astype(np.float32)
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
    """Ultralytics' yolov8n-seg built from its yaml (random weights), saved as a .pt: no download."""
    from streamlens.detect.ultralytics_offline import import_ultralytics_offline

    path = tmp_path_factory.mktemp("seg") / "seg.pt"
    import_ultralytics_offline().YOLO("yolov8n-seg.yaml").save(path)
    return path


def test_a_seg_detector_gives_masks_without_a_segment_section(tmp_path, seg_model):
    """Random weights score every box near zero, so `conf` is set under that: the run completes, every
    object carries `mask` (RLE, as `segment.output` asks, with no `segment.model`), and the mask lies
    inside its box (a `-seg` model's masks are cut at their boxes)."""
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}}}]
detector: {{backend: ultralytics, model: {seg_model}, imgsz: 320, conf: 0.0001, max_det: 3}}
keyframes: {{interval: 10}}
segment: {{output: rle}}
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    with streamlens.Pipeline.from_yaml(path) as pipe:
        report = pipe.run()
        stats = pipe.segment_stats()
    assert report.exit_code == 0, report.error
    assert stats["source"] == "detector" and stats["masks"] > 0
    from streamlens.segment.masks import rle_decode

    frames = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    objects = [o for m in frames if m["type"] == "frame" for o in m["objects"]]
    assert objects and all("mask" in o for o in objects)
    for obj in objects[:50]:
        full = rle_decode(obj["mask"])
        x1, y1, x2, y2 = obj["box"]
        ys, xs = np.nonzero(full)
        if len(xs):
            assert xs.min() >= int(x1) - 1 and xs.max() <= x2 + 1 and ys.min() >= int(y1) - 1 and ys.max() <= y2 + 1
