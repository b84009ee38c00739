"""The onnx backend with the real YOLOX-Nano model on the real highway clip, and its errors.

The model and clip live in ../shared/data; these tests skip, saying so, when it is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from streamlens.detect.onnx import OnnxDetector
from streamlens.errors import DetectorError
from streamlens.frame import Frame

from .conftest import DATA, REPO, need_video, streamlens as run_cli

YOLOX = DATA / "models" / "yolox_nano" / "yolox_nano.onnx"
SAMPLE_EVERY = 3  # every 3rd frame of the 897: 299 frames, a third of the time


def need_yolox() -> Path:
    if not YOLOX.is_file():
        pytest.skip(f"{YOLOX} not found: the real YOLOX-Nano model lives in ../shared/data outside the repository")
    return YOLOX


@pytest.fixture(scope="module")
def yolox() -> OnnxDetector:
    return OnnxDetector(need_yolox(), conf=0.3, max_batch=4)


def decoded_frames(path: Path, every: int = 1, limit: int | None = None):
    with av.open(str(path)) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if limit is not None and index >= limit:
                return
            if index % every == 0:
                yield Frame("highway", index, None, 0.0, frame.to_ndarray(format="bgr24"))


def test_yolox_reads_its_head_and_convention_from_the_model(yolox):
    assert yolox.head.name == "yolox" and yolox.head.num_classes == 80
    assert yolox.spec.size == (416, 416) and yolox.fixed_batch == 1
    assert (yolox.spec.channels, yolox.spec.std, yolox.spec.pad) == ("bgr", (1.0, 1.0, 1.0), "corner")
    assert yolox.names[2] == "car"


def test_yolox_finds_cars_in_at_least_85_percent_of_the_highway_frames(yolox):
    """Every 3rd frame of highway_720p30.mp4 (299 of 897) to keep the suite quick."""
    clip = need_video("highway_720p30.mp4")
    frames_with_car = total = 0
    batch: list[Frame] = []
    for frame in decoded_frames(clip, every=SAMPLE_EVERY):
        yolox.prepare(frame)  # as a source thread would; detect() then only runs the model
        batch.append(frame)
        if len(batch) == 4:
            for det in yolox.detect(batch):
                total += 1
                frames_with_car += "car" in det.data["class_name"].tolist()
                assert det.xyxy.dtype == np.float32 and (det.xyxy[:, 2] <= 1280).all() and (det.xyxy[:, 3] <= 720).all()
            batch = []
    assert total >= 296
    assert frames_with_car >= 0.85 * total, f"cars in {frames_with_car} of {total} frames"


def test_with_a_weak_floor_the_boxes_at_conf_are_the_same_and_the_weaker_ones_come_flagged(yolox):
    """A tracker's second stage asks for boxes down to 0.1 (`weak_floor`): every box at the
    detector's `conf` is the one it reports without (NMS only ever drops the weaker of two boxes),
    and the others, flagged `WEAK`, score from 0.1 to `conf`. 60 real frames of the highway clip."""
    from streamlens.frame import WEAK
    from streamlens.track.base import confident

    floored = OnnxDetector(need_yolox(), conf=0.3, max_batch=4)
    floored.floor = 0.1
    weak = 0
    for frame in decoded_frames(need_video("highway_720p30.mp4"), every=15):
        plain, both = yolox.detect([frame])[0], floored.detect([frame])[0]
        flags = both.data[WEAK]
        assert flags.tolist() == (both.confidence < 0.3).tolist() and (both.confidence >= 0.1).all()
        kept = confident(both)
        assert WEAK not in kept.data and WEAK not in plain.data
        assert kept.xyxy.tolist() == plain.xyxy.tolist() and kept.class_id.tolist() == plain.class_id.tolist()
        assert kept.confidence.tolist() == plain.confidence.tolist()
        weak += int(flags.sum())
    assert weak > 30  # YOLOX-Nano's cars straddle its threshold: weak boxes there are
    # it keeps a box scoring above `conf`: one at `conf` exactly is weak
    assert floored.under_conf(np.array([0.3, 0.3001], np.float32)).tolist() == [True, False]


def nearest_car(detections, box: np.ndarray) -> np.ndarray | None:
    """The car box of `detections` closest to `box`, or None when there is no car."""
    cars = [b for b, n in zip(detections.xyxy, detections.data["class_name"]) if n == "car"]
    return min(cars, key=lambda b: float(np.abs(b - box).max())) if cars else None


@pytest.fixture(scope="module")
def car_content(yolox) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic 416x234 image: a real car with some road around it (cut from the highway clip's
    first frame) pasted on plain grey at a known place, and the box YOLOX gives it at exactly these
    pixels (no resizing: the model's own reading of the drawing)."""
    clip = need_video("highway_720p30.mp4")
    frame = next(decoded_frames(clip, every=1, limit=1))
    small = cv2.resize(frame.image, (416, 234), interpolation=cv2.INTER_AREA)
    found = yolox.detect([Frame("x", 0, None, 0.0, small)])[0]
    cars = [(s, b) for s, b, n in zip(found.confidence, found.xyxy, found.data["class_name"]) if n == "car"]
    _, box = max(cars, key=lambda c: c[0])  # the surest car of the frame
    margin = 60  # road around the car: a car cut out tight on grey is not a car to the model
    x1, y1, x2, y2 = np.round(box).astype(int)
    left, top = max(0, x1 - margin), max(0, y1 - margin)
    patch = small[top:min(234, y2 + margin), left:min(416, x2 + margin)]
    content = np.full((234, 416, 3), 128, np.uint8)
    at = (40, 50)  # where the patch is drawn (x, y)
    content[at[1]:at[1] + patch.shape[0], at[0]:at[0] + patch.shape[1]] = patch
    drawn = box + np.array([at[0] - left, at[1] - top] * 2, np.float32)  # the car's known pixels
    car = nearest_car(yolox.detect([Frame("x", 0, None, 0.0, content)])[0], drawn)
    assert car is not None and np.abs(car - drawn).max() <= 3, (car, drawn)  # the model sees the drawn car
    return content, car


@pytest.mark.parametrize("resize,scale", [("letterbox", (2, 2)), ("resize", (2, 3)), ("bucket", (2, 2))])
def test_a_car_at_known_pixels_comes_back_within_2px(yolox, car_content, resize, scale):
    """The synthetic frame is the content with each pixel repeated (sx x sy): letterbox (2x2, 832x468
    into 416x416), resize (2x3 of a 416x416 content, 832x1248 stretched back) and bucket (832x468 into
    416x256: the fixed-size model run at a size it was not exported for) give the model the very
    content again, so the box must come back at exactly the content's box times the scale."""
    content, car = car_content
    if resize == "resize":
        content = np.concatenate([content, np.full((416 - 234, 416, 3), 128, np.uint8)])
    sx, sy = scale
    frame = Frame("x", 0, None, 0.0, content.repeat(sy, axis=0).repeat(sx, axis=1))
    detector = OnnxDetector(YOLOX, conf=0.3, resize=resize)
    expected = car * np.array([sx, sy, sx, sy])
    found = nearest_car(detector.detect([frame])[0], expected)
    assert found is not None and np.abs(found - expected).max() <= 2.0, (found, expected)


def test_a_car_in_a_full_size_frame_comes_back_where_it_was_drawn(yolox, car_content):
    """The same car in a real 1280x720 frame (content scaled up by 1280/416, bilinear): the model sees
    slightly different pixels, so allow 2 input pixels (6 source pixels at this scale)."""
    content, car = car_content
    frame = Frame("x", 0, None, 0.0, cv2.resize(content, (1280, 720), interpolation=cv2.INTER_LINEAR))
    expected = car * np.array([1280 / 416, 720 / 234] * 2)
    found = nearest_car(yolox.detect([frame])[0], expected)
    assert found is not None and np.abs(found - expected).max() <= 2 * 1280 / 416, (found, expected)


def matched_share(ours: np.ndarray, theirs: np.ndarray, iou: float = 0.7) -> float:
    """The share of `ours` boxes that some box of `theirs` overlaps by at least `iou`."""
    if len(ours) == 0:
        return 1.0
    if len(theirs) == 0:
        return 0.0
    lo = np.maximum(ours[:, None, :2], theirs[None, :, :2])
    hi = np.minimum(ours[:, None, 2:], theirs[None, :, 2:])
    inter = np.clip(hi - lo, 0, None).prod(axis=2)
    area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])  # noqa: E731
    union = area(ours)[:, None] + area(theirs)[None, :] - inter
    return float(((inter / union).max(axis=1) >= iou).mean())


def test_bucket_runs_the_fixed_size_model_on_less_and_finds_the_same_cars(yolox):
    """YOLOX-Nano was exported for 416x416; `bucket` frees its height and width, runs a 16:9 frame at
    416x256 (no padding rows to compute), and finds the letterboxed run's boxes (every 30th frame)."""
    clip = need_video("highway_720p30.mp4")
    bucket = OnnxDetector(YOLOX, conf=0.3, resize="bucket")
    assert bucket.spec.size == (416, 416) and bucket.session.get_inputs()[0].shape[2:] == ["height", "width"]
    found = wanted = both = 0
    for frame in decoded_frames(clip, every=30):
        assert bucket.prepare_input(frame).input_size == (416, 256)
        ours, theirs = bucket.detect([frame])[0].xyxy, yolox.detect([frame])[0].xyxy
        found, wanted = found + len(ours), wanted + len(theirs)
        both += matched_share(theirs, ours) * len(theirs)
        assert matched_share(ours, theirs) >= 0.8
    assert wanted >= 150 and both >= 0.95 * wanted and abs(found - wanted) <= 0.05 * wanted


def test_bucket_on_a_fixed_size_model_that_cannot_run_at_another_size_is_one_clear_error(tmp_path):
    """A graph whose output does not follow its input's size (a global pool, then fixed weights) gives a
    YOLOX-shaped output at 64x64 only: freeing its size is refused, naming the model and why."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    anchors = 8 * 8 + 4 * 4 + 2 * 2  # a YOLOX head at 64x64: strides 8, 16, 32
    weights = numpy_helper.from_array(np.ones((3, anchors * 6), np.float32), "weights")
    shape = numpy_helper.from_array(np.array([1, anchors, 6], np.int64), "shape")
    nodes = [helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
             helper.make_node("MatMul", ["flat", "weights"], ["rows"]),
             helper.make_node("Reshape", ["rows", "shape"], ["output"])]
    graph = helper.make_graph(nodes, "fixed", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 64, 64])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, anchors, 6])],
                              initializer=[weights, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "fixed.onnx"
    onnx.save(model, str(path))
    assert OnnxDetector(path).head.name == "yolox"  # at its own size it is a detector
    with pytest.raises(DetectorError) as e:
        OnnxDetector(path, resize="bucket")
    assert str(e.value).startswith(f"detector.resize: bucket: {path} takes a fixed 64x64 input and does not run "
                                   f"at another size (") and "\n" not in str(e.value)


def test_not_an_onnx_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"this is not a model\n" * 10)
    with pytest.raises(DetectorError) as e:
        OnnxDetector(bad)
    message = str(e.value)
    assert message.startswith(f"detector.model: {bad}: not a usable ONNX model (") and "\n" not in message


def tiny_onnx(path: Path, output: str = "pool") -> Path:
    """An ONNX model with input [1, 3, 64, 64] and output [1, 3] (a global average): no detector head."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    nodes = [helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["output"], axis=1)]
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 64, 64])]
    graph = helper.make_graph(nodes, "tiny", inputs, [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_model_whose_output_fits_no_head_is_one_clear_error(tmp_path):
    model = tiny_onnx(tmp_path / "tiny.onnx")
    with pytest.raises(DetectorError) as e:
        OnnxDetector(model)
    assert str(e.value) == (f"detector.model: {model}: output shape [1, 3] fits no known head for input 64x64 "
                            f"(YOLOX [1, 84, 5+C], YOLOv8 [1, 4+C, 84], end-to-end [1, K, 6])")


def test_settings_that_contradict_the_model_are_clear_errors(tmp_path):
    model = need_yolox()
    with pytest.raises(DetectorError, match=r"^detector.imgsz: \[640, 640\] but .* takes a fixed 416x416 input"):
        OnnxDetector(model, imgsz=640)
    with pytest.raises(DetectorError, match=r"^detector.classes\[0\]: 'lorry' is not a class"):
        OnnxDetector(model, classes=["lorry"])
    with pytest.raises(DetectorError, match=r"^detector.device: 'cuda': onnxruntime here has no CUDA provider"):
        import onnxruntime

        if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            pytest.skip("this machine has CUDA")
        OnnxDetector(model, device="cuda")


def test_the_cli_reports_a_bad_model_in_one_line(tmp_path):
    clip = REPO / "samples" / "traffic.mp4"
    (tmp_path / "m.onnx").write_bytes(b"junk")
    (tmp_path / "p.yaml").write_text(f"sources: [{{uri: {clip}}}]\ndetector: {{backend: onnx, model: m.onnx}}\n")
    proc = run_cli("run", "-q", str(tmp_path / "p.yaml"))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"streamlens: error: detector.model: {tmp_path / 'm.onnx'}: "
                                                    f"not a usable ONNX model"), proc.stderr


def test_pipeline_with_the_onnx_backend_writes_labelled_cars(tmp_path):
    clip = need_video("highway_720p30.mp4")
    need_yolox()
    (tmp_path / "p.yaml").write_text(f"""
sources: [{{name: hw, uri: {clip}, max_fps: 2}}]
detector: {{backend: onnx, model: {YOLOX}, classes: [car, truck, bus], conf: 0.3, max_batch: 4}}
keyframes: {{interval: 1}}
tracker: none
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    proc = run_cli("run", "-q", str(tmp_path / "p.yaml"))
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    frames = [m for m in lines if m["type"] == "frame"]
    assert len(frames) == 60 and all(m["keyframe"] for m in frames)
    labels = {o["label"] for m in frames for o in m["objects"]}
    assert "car" in labels and labels <= {"car", "truck", "bus"}
    assert sum(1 for m in frames if m["objects"]) >= 0.85 * len(frames)
