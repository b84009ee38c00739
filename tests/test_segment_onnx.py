"""A `-seg` model exported to ONNX, run by streamlens' own `onnx` backend (and `openvino`): the same
boxes and masks as the `ultralytics` backend gives on its .pt, batches of several frames, a pipeline
publishing `mask`, and the shapes it refuses.

The model is Ultralytics' yolov8n-seg built from its yaml with random weights (nothing downloaded),
its batch norms set from a few frames of the sample clip: with the weights as built, every layer's
output shrinks about a hundredfold and all anchors score and mask alike (every box the whole frame,
every mask full or empty), which would compare nothing. With its norms set, the scores spread (a few
1e-3 down to 1e-6), boxes differ and each mask covers part of its box.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

pytest.importorskip("ultralytics", reason="the ultralytics extra is not installed")
pytest.importorskip("onnx", reason="exporting to ONNX needs the onnx package (the ultralytics extra)")

from streamlens.detect.onnx import OnnxDetector  # noqa: E402
from streamlens.detect.ultralytics_backend import UltralyticsDetector  # noqa: E402
from streamlens.detect.ultralytics_offline import import_ultralytics_offline  # noqa: E402
from streamlens.errors import DetectorError  # noqa: E402
from streamlens.frame import Frame  # noqa: E402

from .conftest import REPO  # noqa: E402
from .seg_pipeline import run_seg_pipeline  # noqa: E402

IMGSZ = 320
CLIP = REPO / "samples" / "traffic.mp4"


def clip_frames(every: int, count: int) -> list[Frame]:
    frames = []
    with av.open(str(CLIP)) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index % every == 0:
                frames.append(Frame("traffic", index, None, 0.0, frame.to_ndarray(format="bgr24")))
            if len(frames) == count:
                break
    return frames


@pytest.fixture(scope="module")
def seg_models(tmp_path_factory) -> dict[str, Path]:
    """yolov8n-seg (random weights, batch norms set from 8 frames) as .pt and as a dynamic ONNX export at 320."""
    import cv2
    import torch

    ultralytics = import_ultralytics_offline()
    torch.manual_seed(0)
    model = ultralytics.YOLO("yolov8n-seg.yaml")
    net = model.model
    images = [cv2.resize(f.image[:, :, ::-1], (IMGSZ, IMGSZ)) for f in clip_frames(15, 8)]
    batch = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255
    for layer in net.modules():
        if isinstance(layer, torch.nn.BatchNorm2d):
            layer.reset_running_stats()
            layer.momentum = None  # a plain mean over the batch
    net.train()
    with torch.no_grad():
        net(batch)
    net.eval()
    folder = tmp_path_factory.mktemp("yolov8n_seg")
    pt = folder / "yolov8n-seg.pt"
    model.save(pt)
    exported = ultralytics.YOLO(str(pt)).export(format="onnx", imgsz=IMGSZ, dynamic=True, simplify=False,
                                                verbose=False)
    return {"pt": pt, "onnx": Path(exported)}


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` (N x 4) with every box of `b` (M x 4)."""
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def full_mask(mask, width: int, height: int) -> np.ndarray:
    out = np.zeros((height, width), bool)
    drawn = mask.raster(width, height)
    if drawn is not None:
        part, (x0, y0, x1, y1) = drawn
        out[y0:y1, x0:x1] = part
    return out


@pytest.mark.parametrize("resize", ["letterbox", "bucket"])
def test_the_onnx_backend_gives_the_pt_models_boxes_and_masks(seg_models, resize):
    """8 frames of the clip, 4 a call: each of the .pt path's boxes has one ONNX box of its class at
    IoU >= 0.9 and their masks, drawn over the frame, overlap at IoU >= 0.9; none left over."""
    frames = clip_frames(10, 8)
    options = {"conf": 0.0001, "max_det": 20, "max_batch": 4, "resize": resize}
    pt = UltralyticsDetector(seg_models["pt"], imgsz=IMGSZ, device="cpu", **options)
    onnx = OnnxDetector(seg_models["onnx"], **options)
    assert pt.gives_masks and onnx.gives_masks
    assert (onnx.head.name, onnx.head.num_classes, onnx.head.mask_dim) == ("yolov8", 80, 32)
    assert onnx.names == pt.names
    calls = []
    run_outputs = onnx.run_outputs
    onnx.run_outputs = lambda batch: calls.append(len(batch)) or run_outputs(batch)
    boxes = masks = 0
    worst_box = worst_mask = 1.0
    coverage = []
    for frame, a, b in zip(frames, pt.detect(frames), onnx.detect(frames)):
        assert len(a) == len(b) > 0
        assert len(a.data["masks"]) == len(a) and len(b.data["masks"]) == len(b)
        ious = box_iou(a.xyxy, b.xyxy)
        unused = set(range(len(b)))
        for i in range(len(a)):
            # of the ONNX boxes of its class at IoU >= 0.9, the one scored closest: clipped to the frame,
            # two boxes of one class can be alike (random weights put many on the whole frame)
            fits = [j for j in unused if b.class_id[j] == a.class_id[i] and ious[i, j] >= 0.9]
            assert fits, (i, a.xyxy[i], a.class_id[i])
            j = min(fits, key=lambda j: abs(b.confidence[j] - a.confidence[i]))
            unused.discard(j)
            worst_box = min(worst_box, float(ious[i, j]))
            ma = full_mask(a.data["masks"][i], frame.width, frame.height)
            mb = full_mask(b.data["masks"][j], frame.width, frame.height)
            union = (ma | mb).sum()
            if union:
                worst_mask = min(worst_mask, float((ma & mb).sum() / union))
                coverage.append(ma.sum() / max(1.0, float(np.prod(a.xyxy[i, 2:] - a.xyxy[i, :2]))))
                masks += 1
            boxes += 1
    assert calls == [4, 4]
    assert worst_box >= 0.9 and worst_mask >= 0.9, (worst_box, worst_mask)
    # the comparison compares something: masks that cover part of their boxes, not all or nothing
    assert masks >= 0.8 * boxes and 0.1 < float(np.median(coverage)) < 0.9, (masks, boxes, coverage)


def test_openvino_runs_the_seg_export_as_onnxruntime_does(seg_models):
    """`backend: openvino` is the `onnx` backend on another runtime: the same boxes and masks."""
    pytest.importorskip("openvino", reason="the openvino extra is not installed")
    from streamlens.detect.openvino_backend import OpenVinoDetector

    frames = clip_frames(10, 4)
    options = {"conf": 0.0001, "max_det": 20, "max_batch": 4}
    vino = OpenVinoDetector(seg_models["onnx"], half=False, **options)  # FP32, as onnxruntime
    assert vino.gives_masks
    for a, b in zip(vino.detect(frames), OnnxDetector(seg_models["onnx"], **options).detect(frames)):
        assert len(a) == len(b) > 0 and np.allclose(a.xyxy, b.xyxy, atol=0.5)
        for x, y in zip(a.data["masks"], b.data["masks"]):
            assert x.bits.shape == y.bits.shape and (x.bits == y.bits).mean() >= 0.99


def test_a_pipeline_with_the_onnx_seg_model_publishes_masks(tmp_path, seg_models):
    _, objects = run_seg_pipeline(tmp_path, f"""
sources: [{{uri: {CLIP}}}]
detector: {{backend: onnx, model: {seg_models['onnx']}, conf: 0.0001, max_det: 3}}
keyframes: {{interval: 10}}
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    assert objects and all("mask" in o for o in objects)
    polygons = [p for o in objects for p in o["mask"]]
    assert polygons and all(len(p) >= 6 and len(p) % 2 == 0 for p in polygons)  # polygon, the default


def seg_onnx(path: Path, outputs: dict[str, list[int]], names: int | None = None) -> Path:
    """An ONNX model with input [1, 3, 64, 64] whose outputs are constants of the given shapes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.zeros(shape, np.float32)))
             for name, shape in outputs.items()]
    graph = helper.make_graph(nodes, "seg", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 64, 64])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if names is not None:
        for key, value in {"author": "Ultralytics", "task": "segment",
                           "names": str({i: f"c{i}" for i in range(names)})}.items():
            model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))
    return path


def test_seg_shapes_that_do_not_fit_are_one_clear_error(tmp_path):
    """At 64x64 there are 84 anchors and the prototypes must be 16x16."""
    good = seg_onnx(tmp_path / "good.onnx", {"output0": [1, 4 + 80 + 32, 84], "output1": [1, 32, 16, 16]})
    detector = OnnxDetector(good, imgsz=64)
    assert detector.gives_masks and (detector.head.num_classes, detector.head.mask_dim) == (80, 32)

    small = seg_onnx(tmp_path / "small.onnx", {"output0": [1, 4 + 80 + 32, 84], "output1": [1, 32, 8, 8]})
    with pytest.raises(DetectorError) as e:
        OnnxDetector(small, imgsz=64)
    assert str(e.value) == (f"detector.model: {small}: outputs [1, 116, 84] and [1, 32, 8, 8] fit no known -seg "
                            f"head for input 64x64 (YOLOv8-seg: [1, 4+C+32, 84] and prototypes [1, 32, 16, 16])")

    few = seg_onnx(tmp_path / "few.onnx", {"output0": [1, 4 + 80 + 32, 84], "output1": [1, 32, 16, 16]}, names=3)
    with pytest.raises(DetectorError, match=rf"^detector.model: {few}: its metadata names 3 classes but its "
                                            rf"output has 80$"):
        OnnxDetector(few, imgsz=64)

    alone = seg_onnx(tmp_path / "alone.onnx", {"output0": [1, 4 + 3 + 32, 84]}, names=3)
    with pytest.raises(DetectorError, match=rf"^detector.model: {alone}: an Ultralytics 'segment' model whose "
                                            rf"outputs \(output0 \[1, 39, 84\]\) are not boxes and prototypes"):
        OnnxDetector(alone, imgsz=64)
