"""Frames into model inputs and boxes back to source pixels: letterbox, resize and bucket, exactly.

No model here: these pin the geometry on its own. The model-level check (a car comes back within
2 px) is in test_detect_onnx.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamlens.detect.preprocess import (InputSpec, bucket_size, letterbox_geometry, place, resize_geometry,
                                          to_chw)

SIZES = [((1280, 720), (416, 416)), ((1920, 1080), (640, 640)), ((320, 240), (416, 416)),
         ((768, 432), (320, 320)), ((640, 360), (640, 384)), ((333, 777), (416, 416))]


@pytest.mark.parametrize("source,target", SIZES)
@pytest.mark.parametrize("mode", ["corner", "center", "resize"])
def test_boxes_round_trip_exactly(source, target, mode):
    geometry = resize_geometry(source, target) if mode == "resize" else \
        letterbox_geometry(source, target, center=mode == "center")
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 1, (50, 4)) * np.array(source * 2)
    boxes = np.concatenate([np.minimum(xy[:, :2], xy[:, 2:]), np.maximum(xy[:, :2], xy[:, 2:])], axis=1)
    back = geometry.to_source(geometry.to_input(boxes))
    assert np.abs(back - boxes).max() < 1e-3
    # the whole frame maps onto the placed rectangle, and the placed rectangle fits the input
    whole = geometry.to_input(np.array([[0, 0, *source]], np.float32))[0]
    pw, ph = geometry.placed_size
    assert whole.tolist() == [geometry.pad_x, geometry.pad_y, geometry.pad_x + pw, geometry.pad_y + ph]
    assert geometry.pad_x + pw <= target[0] and geometry.pad_y + ph <= target[1]


def test_letterbox_pads_like_the_models_expect():
    corner = letterbox_geometry((1280, 720), (416, 416), center=False)
    assert (corner.placed_size, corner.pad_x, corner.pad_y) == ((416, 234), 0, 0)
    center = letterbox_geometry((1280, 720), (416, 416), center=True)
    assert (center.placed_size, center.pad_x, center.pad_y) == ((416, 234), 0, 91)
    tall = letterbox_geometry((333, 777), (416, 416), center=True)
    assert tall.placed_size == (178, 416) and tall.pad_x == 119  # (416 - 178) // 2
    # the scales are those of the sizes actually used, not the nominal factor
    assert corner.scale_x == 416 / 1280 and corner.scale_y == 234 / 720


def test_bucket_sizes_are_stride_multiples_that_hold_the_frame():
    assert bucket_size((1280, 720), (416, 416)) == (416, 256)
    assert bucket_size((640, 480), (416, 416)) == (416, 320)
    assert bucket_size((720, 1280), (640, 640)) == (384, 640)
    spec = InputSpec((416, 416), resize="bucket", pad="center")
    g = spec.geometry((1280, 720))
    assert g.input_size == (416, 256) and g.placed_size == (416, 234) and g.pad_y == 11


def test_a_rectangle_drawn_in_the_source_lands_where_the_geometry_says():
    """A white block at known source pixels; after `place`, its pixels are where `to_input` puts it."""
    source = np.zeros((720, 1280, 3), np.uint8)
    source[180:360, 320:640] = 255  # x 320..640, y 180..360
    for mode in ("corner", "center", "resize"):
        geometry = (resize_geometry((1280, 720), (416, 416)) if mode == "resize"
                    else letterbox_geometry((1280, 720), (416, 416), center=mode == "center"))
        canvas = place(source, geometry, pad_value=114)
        x1, y1, x2, y2 = geometry.to_input(np.array([[320, 180, 640, 360]]))[0]
        inside = canvas[int(np.ceil(y1)) + 1:int(y2) - 1, int(np.ceil(x1)) + 1:int(x2) - 1]
        assert inside.min() == 255, mode
        block = np.argwhere(canvas[..., 0] > 127)
        (top, left), (bottom, right) = block.min(0), block.max(0) + 1
        assert abs(left - x1) <= 1 and abs(right - x2) <= 1 and abs(top - y1) <= 1 and abs(bottom - y2) <= 1, mode
        if mode != "resize":  # the padding is the pad value, the frame's area is not
            assert (canvas[geometry.pad_y + geometry.placed_size[1]:] == 114).all()
            assert (canvas[:geometry.pad_y] == 114).all()


def test_integer_downscale_reproduces_the_content_exactly():
    """A frame made by repeating each pixel 2x2 letterboxes back to exactly the original content
    (the property the 2 px model test relies on)."""
    rng = np.random.default_rng(1)
    content = rng.integers(0, 255, (234, 416, 3), np.uint8)
    source = content.repeat(2, axis=0).repeat(2, axis=1)
    geometry = letterbox_geometry((832, 468), (416, 416), center=False)
    assert np.array_equal(place(source, geometry)[:234], content)


def test_channel_order_and_normalisation():
    canvas = np.array([[[10, 20, 30]]], np.uint8)  # B, G, R
    yolox = to_chw(canvas, InputSpec((1, 1), channels="bgr", std=(1.0, 1.0, 1.0)))
    assert yolox[:, 0, 0].tolist() == [10.0, 20.0, 30.0]
    ultra = to_chw(canvas, InputSpec((1, 1), channels="rgb", std=(255.0, 255.0, 255.0)))
    assert np.allclose(ultra[:, 0, 0], [30 / 255, 20 / 255, 10 / 255])
    imagenet = to_chw(canvas, InputSpec((1, 1), channels="rgb", mean=(30.0, 20.0, 10.0), std=(2.0, 4.0, 5.0)))
    assert imagenet[:, 0, 0].tolist() == [0.0, 0.0, 0.0]


def test_agnostic_nms_keeps_one_box_where_the_model_sees_one_object_as_two_classes():
    """A van scored as car and as truck in the same place: class-aware NMS keeps both (two tracks,
    two crossings), `agnostic_nms` keeps the better one; boxes of other places stay either way."""
    from streamlens.detect.detections import to_detections
    from streamlens.detect.heads import Candidates

    geometry = letterbox_geometry((416, 416), (416, 416), center=False)
    found = Candidates(np.array([[10, 10, 60, 50], [11, 10, 61, 51], [200, 200, 240, 230]], np.float32),
                       np.array([0.6, 0.8, 0.7], np.float32), np.array([2, 7, 2]))
    names = {2: "car", 7: "truck"}
    aware = to_detections(found, geometry, names, iou=0.45)
    agnostic = to_detections(found, geometry, names, iou=0.45, agnostic=True)
    assert sorted(aware.data["class_name"].tolist()) == ["car", "car", "truck"]
    assert agnostic.data["class_name"].tolist() == ["truck", "car"] and agnostic.confidence.tolist() == pytest.approx([0.8, 0.7])
