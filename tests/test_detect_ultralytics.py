"""A YOLOv8n built by Ultralytics from `yolov8n.yaml` (random weights, nothing downloaded), saved as .pt
and exported to ONNX, through both backends.

Random weights give junk boxes, so these tests pin shapes, types and agreement: the two backends
read the same preprocessed pixels and give the same raw output, and the same detections.
The model is built once for the module, at imgsz 320.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ultralytics", reason="the ultralytics extra is not installed")
pytest.importorskip("onnx", reason="exporting to ONNX needs the onnx package (the ultralytics extra)")

from streamlens.detect.onnx import OnnxDetector  # noqa: E402
from streamlens.detect.preprocess import letterbox_geometry, place  # noqa: E402
from streamlens.detect.ultralytics_backend import UltralyticsDetector  # noqa: E402
from streamlens.detect.ultralytics_offline import import_ultralytics_offline  # noqa: E402
from streamlens.errors import DetectorError  # noqa: E402
from streamlens.frame import Frame  # noqa: E402

from .conftest import REPO  # noqa: E402

IMGSZ = 320


@pytest.fixture(scope="module")
def yolov8n(tmp_path_factory) -> dict[str, Path]:
    """yolov8n.pt (random weights) and its dynamic ONNX export at 320, built offline."""
    import_ultralytics_offline()
    from ultralytics import YOLO

    folder = tmp_path_factory.mktemp("yolov8n")
    pt = folder / "yolov8n.pt"
    YOLO("yolov8n.yaml").save(pt)
    onnx_file = YOLO(str(pt)).export(format="onnx", imgsz=IMGSZ, dynamic=True, simplify=False, verbose=False)
    return {"pt": pt, "onnx": Path(onnx_file)}


@pytest.fixture(scope="module")
def frames() -> list[Frame]:
    """Two frames of different shapes (a 16:9 and a 4:3), with some structure for the model to see."""
    rng = np.random.default_rng(0)
    wide = rng.integers(0, 255, (720, 1280, 3), np.uint8)
    narrow = rng.integers(0, 255, (240, 320, 3), np.uint8)
    return [Frame("a", 0, None, 0.0, wide), Frame("b", 0, None, 0.0, narrow)]


def check_detections(detections, frames, names) -> None:
    assert len(detections) == len(frames)
    for det, frame in zip(detections, frames):
        n = len(det)
        assert det.xyxy.shape == (n, 4) and det.xyxy.dtype == np.float32
        assert det.confidence.shape == (n,) and det.confidence.dtype == np.float32
        assert det.class_id.shape == (n,) and det.class_id.dtype == np.int64
        assert det.data["class_name"].tolist() == [names[int(c)] for c in det.class_id]
        assert (det.xyxy[:, [0, 1]] >= 0).all() and (det.xyxy[:, 2] <= frame.width).all()
        assert (det.xyxy[:, 3] <= frame.height).all()


def test_both_backends_run_the_built_model_end_to_end(yolov8n, frames):
    ultra = UltralyticsDetector(yolov8n["pt"], imgsz=IMGSZ, conf=0.0001, device="cpu", max_batch=2)
    onnx = OnnxDetector(yolov8n["onnx"], conf=0.0001, max_batch=2)
    assert ultra.backend.format == "pt" and ultra.device.type == "cpu" and not ultra.fp16
    assert onnx.head.name == "yolov8" and onnx.head.num_classes == 80 and onnx.spec.size == (IMGSZ, IMGSZ)
    assert (onnx.spec.channels, onnx.spec.pad, onnx.spec.std[0]) == ("rgb", "center", 255.0)  # from metadata
    assert ultra.names == onnx.names and len(onnx.names) == 80
    for detector in (ultra, onnx):
        found = detector.detect(frames)
        check_detections(found, frames, detector.names)
        assert sum(len(d) for d in found) > 0  # random weights still score something above 1e-4


def test_both_backends_agree_on_the_same_pixels(yolov8n, frames):
    ultra = UltralyticsDetector(yolov8n["pt"], imgsz=IMGSZ, device="cpu")
    onnx = OnnxDetector(yolov8n["onnx"])
    prepared = ultra.prepare_input(frames[0])
    raw_torch = ultra.run_raw(prepared.data[None])
    raw_onnx = onnx.run_raw(onnx.prepare_input(frames[0]).data[None])
    assert raw_torch.shape == raw_onnx.shape == (1, 84, 2100)
    assert np.allclose(raw_torch, raw_onnx, rtol=1e-3, atol=1e-3)
    # the same decoded boxes: a threshold that keeps the top tenth of the anchors' best scores
    conf = float(np.quantile(raw_torch[0, 4:].max(axis=0), 0.9))
    ultra.conf = onnx.conf = conf
    for a, b in zip(ultra.detect(frames), onnx.detect(frames)):
        assert len(a) == len(b) > 0
        order_a, order_b = np.lexsort(a.xyxy.T), np.lexsort(b.xyxy.T)
        assert np.allclose(a.xyxy[order_a], b.xyxy[order_b], atol=0.5)
        assert np.array_equal(a.class_id[order_a], b.class_id[order_b])


def test_our_centred_letterbox_is_ultralytics_own(frames):
    import_ultralytics_offline()
    from ultralytics.data.augment import LetterBox

    for frame in frames:
        theirs = LetterBox((IMGSZ, IMGSZ), auto=False, center=True)(image=frame.image)
        ours = place(frame.image, letterbox_geometry((frame.width, frame.height), (IMGSZ, IMGSZ), center=True))
        assert np.array_equal(ours, theirs)


def test_bucket_mode_runs_each_shape_at_its_own_size(yolov8n, frames):
    onnx = OnnxDetector(yolov8n["onnx"], conf=0.0001, resize="bucket")
    sizes = [onnx.prepare_input(f).input_size for f in frames]
    assert sizes == [(320, 192), (320, 256)]  # 16:9 -> 320x180 -> 192; 4:3 -> 320x240 -> 256
    check_detections(onnx.detect(frames), frames, onnx.names)


def test_a_model_name_that_is_not_a_local_file_is_one_clear_error(tmp_path):
    with pytest.raises(DetectorError) as e:
        UltralyticsDetector("yolov8n.pt")
    assert str(e.value).startswith("detector.model: file not found: yolov8n.pt (streamlens never downloads")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(DetectorError) as e:
        UltralyticsDetector(junk)
    assert str(e.value).startswith(f"detector.model: {junk}: Ultralytics cannot load it (") and "\n" not in str(e.value)
    with pytest.raises(DetectorError, match=r"^detector.half: FP16 needs a CUDA device"):
        UltralyticsDetector(junk, device="cpu", half=True)


def test_nothing_touches_the_network(yolov8n, frames, tmp_path):
    """In a fresh interpreter with every socket call trapped: import, load both formats, detect."""
    script = textwrap.dedent(f"""
        import socket, sys
        attempts = []
        def trap(name):
            def refuse(*args, **kwargs):
                attempts.append((name, args[:2]))
                raise OSError("network disabled by the test")
            return refuse
        socket.getaddrinfo = trap("getaddrinfo")
        socket.create_connection = trap("create_connection")
        socket.socket.connect = trap("connect")
        import numpy as np
        from streamlens.detect.ultralytics_backend import UltralyticsDetector
        from streamlens.frame import Frame
        frame = Frame("a", 0, None, 0.0, np.zeros((240, 320, 3), np.uint8))
        for model in ({str(yolov8n['pt'])!r}, {str(yolov8n['onnx'])!r}):
            UltralyticsDetector(model, imgsz={IMGSZ}, device="cpu").detect([frame])
        import ultralytics.utils.checks as checks
        assert checks.check_font("Arial.ttf") is None or checks.check_font("Arial.ttf").exists()
        print("attempts", attempts)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                            "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "attempts []" in proc.stdout, proc.stdout


def same_boxes(ours, theirs, top: int = 20) -> None:
    """The `top` best boxes of ours and of Ultralytics' `Results` are the same boxes (as sets: equal
    scores may come in either order). Boxes that lie in the padding are left out: Ultralytics clips
    them to slivers at the frame's edge, streamlens drops them."""
    def real(xyxy: np.ndarray) -> np.ndarray:
        xyxy = xyxy[((xyxy[:, 2] - xyxy[:, 0]) > 2) & ((xyxy[:, 3] - xyxy[:, 1]) > 2)][:top]
        return np.array(sorted(map(tuple, np.round(xyxy, 1).tolist())))

    height, width = theirs.orig_shape
    boxes = theirs.boxes.xyxy.cpu().numpy().clip(0, [width, height, width, height])  # RT-DETR's are not clipped
    mine, boxes = real(ours.xyxy), real(boxes)
    assert len(mine) > 0 and mine.shape == boxes.shape and np.allclose(mine, boxes, atol=0.2)


def test_bucket_mode_gives_what_ultralytics_predict_gives(yolov8n, frames):
    """Ultralytics' predict letterboxes a .pt model's frames into the smallest stride multiple (320x192
    for 16:9), which is `bucket`; then both read the same pixels and must return the same boxes."""
    from ultralytics import YOLO

    ultra = UltralyticsDetector(yolov8n["pt"], imgsz=IMGSZ, conf=0.0001, device="cpu", resize="bucket")
    theirs = YOLO(str(yolov8n["pt"])).predict(frames[0].image, imgsz=IMGSZ, conf=0.0001, iou=0.45,
                                                       verbose=False)[0]
    same_boxes(ultra.detect(frames[:1])[0], theirs)


def test_rtdetr_runs_as_ultralytics_runs_it(tmp_path, frames):
    """RT-DETR (built from rtdetr-l.yaml, random weights): stretched to the input by default, its own
    box selection, the same boxes as Ultralytics' predict."""
    from ultralytics import RTDETR

    pt = tmp_path / "rtdetr-l.pt"
    RTDETR("rtdetr-l.yaml").save(pt)
    detector = UltralyticsDetector(pt, imgsz=IMGSZ, conf=0.0, device="cpu")
    assert detector.is_rtdetr and detector.spec.resize == "resize"
    ours = detector.detect(frames[:1])[0]
    theirs = RTDETR(str(pt)).predict(frames[0].image, imgsz=IMGSZ, conf=0.0, verbose=False)[0]
    check_detections([ours], frames[:1], detector.names)
    same_boxes(ours, theirs, top=10)


# -- on a CUDA device (skipped without one; run on the GPU machine with tools/bench_gpu.py) ----------

def cuda_or_skip():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: the CUDA path (pinned copies, FP16) needs an NVIDIA GPU")


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want.astype(np.float64)))


def test_cuda_gives_the_cpu_output_in_fp32_and_close_to_it_in_fp16(yolov8n, frames):
    cuda_or_skip()
    cpu = UltralyticsDetector(yolov8n["pt"], imgsz=IMGSZ, device="cpu")
    batch = np.stack([cpu.prepare_input(f).data for f in frames])
    want = cpu.run_raw(batch)
    fp32 = UltralyticsDetector(yolov8n["pt"], imgsz=IMGSZ, device="cuda")
    fp16 = UltralyticsDetector(yolov8n["pt"], imgsz=IMGSZ, device="cuda", half=True)
    assert fp32.device.type == "cuda" and not fp32.fp16 and fp16.fp16
    assert relative_error(fp32.run_raw(batch), want) < 5e-3  # cuDNN convolutions in TF32
    assert relative_error(fp16.run_raw(batch), want) < 2e-2
    check_detections(fp16.detect(frames), frames, fp16.names)


def test_batches_in_flight_each_reach_the_gpu_intact(yolov8n):
    """Six batches queued before any is read back: every batch on the device is its own frames, both
    from inputs letterboxed into pinned memory (whose blocks are freed and reused for new inputs while
    the copies may still run) and from numpy inputs gathered through the two staging buffers; and the
    detections equal those of running each batch alone."""
    cuda_or_skip()
    import torch

    rng = np.random.default_rng(1)
    shots = [Frame("s", i, None, 0.0, rng.integers(0, 255, (720, 1280, 3), np.uint8)) for i in range(24)]
    detector = UltralyticsDetector(yolov8n["pt"], imgsz=IMGSZ, conf=0.0001, device="cuda", max_batch=2)
    inputs = [detector.prepare_input(f) for f in shots[:12]]
    assert all(isinstance(p.data, torch.Tensor) and p.data.is_pinned() for p in inputs)
    wanted = [np.stack([p.data.numpy().copy() for p in inputs[i:i + 2]]) for i in range(0, 12, 2)]
    on_device = [detector._to_device(inputs[i:i + 2]) for i in range(0, 12, 2)]
    del inputs
    scribbles = [detector.prepare_input(f) for f in shots[12:]]  # may reuse the freed pinned blocks
    for want, tensor in zip(wanted, on_device):
        assert np.array_equal(tensor.cpu().numpy(), want)
    staged = [[type(p)(p.data.numpy().copy(), p.geometry) for p in scribbles[i:i + 2]] for i in range(0, 12, 2)]
    on_device = [detector._to_device(group) for group in staged]
    for group, tensor in zip(staged, on_device):
        assert np.array_equal(tensor.cpu().numpy(), np.stack([p.data for p in group]))
    groups = [scribbles[i:i + 2] for i in range(0, 12, 2)]
    together = detector.run_groups(groups)
    alone = [detector.run_chunk(group) for group in groups]
    for a_group, b_group in zip(together, alone):
        for a, b in zip(a_group, b_group):
            assert len(a.boxes) > 0 and np.allclose(a.boxes, b.boxes, atol=1e-3)
            assert np.array_equal(a.class_ids, b.class_ids)
