"""`backend: openvino`: the onnx backend's models run by OpenVINO, against onnxruntime on real frames.

The model and clip live in ../shared/data, and OpenVINO is an extra (`pip install 'streamlens[openvino]'`);
these tests skip, saying which, when either is absent. The config and missing-package tests need neither.
"""

from __future__ import annotations

import json
import sys

import pytest

from streamlens.bench.accuracy import detections_f1
from streamlens.config import parse_pipeline
from streamlens.detect import build_detector
from streamlens.errors import ConfigError, DetectorError

from .conftest import REPO, need_video, streamlens as run_cli
from .test_detect_onnx import YOLOX, decoded_frames, need_yolox, tiny_onnx


def need_openvino():
    return pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'streamlens[openvino]')")


@pytest.fixture(scope="module")
def detectors():
    """onnxruntime and OpenVINO (FP32: `half: false`) on YOLOX-Nano, letterbox and bucket, one thread each."""
    need_openvino()
    from functools import partial

    from streamlens.detect.onnx import OnnxDetector
    from streamlens.detect.openvino_backend import OpenVinoDetector

    model = need_yolox()
    return {(runtime, resize): cls(model, conf=0.25, threads=1, resize=resize, max_batch=4)
            for runtime, cls in (("ort", OnnxDetector), ("ov", partial(OpenVinoDetector, half=False)))
            for resize in ("letterbox", "bucket")}


@pytest.fixture(scope="module")
def frames():
    """Every 20th frame of highway_720p30.mp4 (45 frames 1280x720)."""
    return list(decoded_frames(need_video("highway_720p30.mp4"), every=20))


def test_openvino_reads_the_model_as_onnxruntime_does(detectors):
    ov, ort = detectors["ov", "letterbox"], detectors["ort", "letterbox"]
    assert ov.session.get_providers() == ["OpenVINO CPU"]
    assert (ov.head.name, ov.head.num_classes, ov.spec, ov.names, ov.fixed_batch) == \
           (ort.head.name, ort.head.num_classes, ort.spec, ort.names, ort.fixed_batch)


@pytest.mark.parametrize("resize", ["letterbox", "bucket"])
def test_openvino_boxes_match_onnxruntimes_on_real_frames(detectors, frames, resize):
    """F1 >= 0.99 at IoU 0.5 (class-aware, matched per frame) against onnxruntime's boxes, in batches of 4."""
    ov, ort = detectors["ov", resize], detectors["ort", resize]
    if resize == "bucket":
        assert ov.prepare_input(frames[0]).input_size == (416, 256)
        assert ov.session.get_inputs()[0].shape[2:] == ["height", "width"]
    ours, theirs = [], []
    for i in range(0, len(frames), 4):
        ours += ov.detect(frames[i:i + 4])
        theirs += ort.detect(frames[i:i + 4])
    assert sum(map(len, theirs)) >= 200
    assert detections_f1(ours, theirs) >= 0.99


def test_half_runs_the_cpus_own_precision_and_keeps_the_boxes_close(detectors, frames):
    """`detector.half: true`: OpenVINO's own precision for the CPU (BF16 on one with AMX or AVX-512
    BF16, FP32 elsewhere) instead of the FP32 that keeps onnxruntime's boxes; its boxes agree with
    onnxruntime's at F1 >= 0.95 on real frames (0.976-0.979 on the 48 frames of detect.md)."""
    import openvino

    from streamlens.detect.openvino_backend import OpenVinoDetector

    native = openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    data = {"sources": [{"uri": str(REPO / "samples" / "traffic.mp4")}],
            "detector": {"backend": "openvino", "model": str(need_yolox()), "threads": 1, "half": True}}
    configured = build_detector(parse_pipeline(data, REPO / "p.yaml").detector)
    assert isinstance(configured, OpenVinoDetector) and configured.half
    half = OpenVinoDetector(need_yolox(), conf=0.25, threads=1, resize="letterbox", max_batch=4, half=True)
    ort, full = detectors["ort", "letterbox"], detectors["ov", "letterbox"]
    ours = [half.detect([f])[0] for f in frames]
    shapes = list(half.session._requests)
    assert half.session._requests[shapes[0]].get_compiled_model().get_property("INFERENCE_PRECISION_HINT") == native
    assert full.session.request(shapes[0]).get_compiled_model().get_property(
        "INFERENCE_PRECISION_HINT") == openvino.Type.f32
    agreement = detections_f1(ours, [ort.detect([f])[0] for f in frames])
    print(f"half ({native}) against onnxruntime FP32: F1 {agreement:.4f}")
    assert agreement >= 0.95


@pytest.mark.parametrize("flags, expected", [({"avx512_bf16": True}, "bf16"), ({"amx_bf16": True}, "bf16"),
                                             ({"avx2": True, "avx512f": True}, "f32")])
def test_by_default_bf16_only_where_the_cpu_has_it_and_half_false_keeps_fp32(monkeypatch, frames, flags, expected):
    """`detector.half` unset: BF16 on a CPU with AVX-512 BF16 or AMX, FP32 on one without (the CPU's
    flags given here, as /proc/cpuinfo would); `half: false` is FP32 whatever the CPU."""
    need_openvino()
    import streamlens.detect.openvino_backend as backend

    monkeypatch.setattr(backend, "has_bf16", lambda: bool(flags.get("avx512_bf16") or flags.get("amx_bf16")))
    data = {"sources": [{"uri": str(REPO / "samples" / "traffic.mp4")}],
            "detector": {"backend": "openvino", "model": str(need_yolox()), "threads": 1}}
    default = build_detector(parse_pipeline(data, REPO / "p.yaml").detector)
    data["detector"]["half"] = False
    off = build_detector(parse_pipeline(data, REPO / "p.yaml").detector)
    assert (default.precision, off.precision) == (expected, "f32")
    default.detect(frames[:1])
    (request,) = default.session._requests.values()
    import openvino

    wanted = openvino.Type.bf16 if expected == "bf16" else openvino.Type.f32
    assert request.get_compiled_model().get_property("INFERENCE_PRECISION_HINT") == wanted


def test_bucket_compiles_each_shape_once(detectors, frames):
    """A 4:3 frame and a 16:9 one land in two buckets: two compiled shapes, kept for the next frames."""
    import numpy as np

    from streamlens.frame import Frame

    ov = detectors["ov", "bucket"]
    square = Frame("sq", 0, None, 0.0, np.ascontiguousarray(frames[0].image[:, 160:1120]))  # 960x720
    before = set(ov.session._requests)
    ov.detect([frames[0], square])
    ov.detect([frames[1], square])
    shapes = set(ov.session._requests) - before
    assert {s[2:] for s in set(ov.session._requests)} >= {(256, 416), (320, 416)} and len(shapes) <= 2


def test_an_openvino_ir_keeps_the_onnx_metadata(tmp_path, frames, detectors):
    """An IR saved by OpenVINO from the ONNX model (with Ultralytics-style names in its metadata)
    gives the same boxes, and the names come from the metadata kept in the IR."""
    onnx = pytest.importorskip("onnx")
    ov = need_openvino()
    from streamlens.detect.openvino_backend import OpenVinoDetector

    model = onnx.load(str(need_yolox()))
    onnx.helper.set_model_props(model, {"names": str({i: f"thing{i}" for i in range(80)})})
    onnx.save(model, str(tmp_path / "named.onnx"))
    # compress_to_fp16 (save_model's default) would store FP16 weights: F1 0.98 against onnxruntime here
    ov.save_model(ov.Core().read_model(str(tmp_path / "named.onnx")), str(tmp_path / "named.xml"),
                  compress_to_fp16=False)
    ir = OpenVinoDetector(tmp_path / "named.xml", conf=0.25, threads=1, half=False)  # FP32, as onnxruntime
    assert ir.names[2] == "thing2" and ir.head.name == "yolox"
    reference = detectors["ort", "letterbox"]
    assert detections_f1([ir.detect([f])[0] for f in frames[:12]], [reference.detect([f])[0] for f in frames[:12]]) >= 0.99


def test_a_bad_model_is_one_clear_line(tmp_path):
    need_openvino()
    from streamlens.detect.openvino_backend import OpenVinoDetector

    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"this is not a model\n" * 10)
    with pytest.raises(DetectorError) as e:
        OpenVinoDetector(bad)
    assert str(e.value) == f"detector.model: {bad}: not a usable ONNX or OpenVINO IR model (Model can't be parsed)"
    assert "\n" not in str(e.value)
    with pytest.raises(DetectorError, match=r"^detector.model: file not found: "):
        OpenVinoDetector(tmp_path / "missing.onnx")
    model = tiny_onnx(tmp_path / "tiny.onnx")
    with pytest.raises(DetectorError, match=r"^detector.model: .*: output shape \[1, 3\] fits no known head"):
        OpenVinoDetector(model)
    with pytest.raises(DetectorError, match=r"^detector.device: 'cuda': backend openvino runs on OpenVINO's devices"):
        OpenVinoDetector(model, device="cuda")


def test_the_cli_reports_a_bad_model_in_one_line(tmp_path):
    need_openvino()
    clip = REPO / "samples" / "traffic.mp4"
    (tmp_path / "m.onnx").write_bytes(b"junk")
    (tmp_path / "p.yaml").write_text(f"sources: [{{uri: {clip}}}]\ndetector: {{backend: openvino, model: m.onnx}}\n")
    proc = run_cli("run", "-q", str(tmp_path / "p.yaml"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"streamlens: error: detector.model: {tmp_path / 'm.onnx'}: not a usable "), proc.stderr


def test_without_the_openvino_package_it_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    (tmp_path / "m.onnx").write_bytes(b"junk")
    (tmp_path / "clip.mp4").write_bytes(b"")
    cfg = parse_pipeline({"sources": [{"uri": "clip.mp4"}], "detector": {"backend": "openvino", "model": "m.onnx"}},
                         tmp_path / "p.yaml")
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino now raises ImportError
    monkeypatch.delitem(sys.modules, "streamlens.detect.openvino_backend", raising=False)
    with pytest.raises(DetectorError) as e:
        build_detector(cfg.detector)
    assert str(e.value).startswith("detector.backend: openvino needs the openvino package "
                                   "(pip install 'streamlens[openvino]')") and "\n" not in str(e.value)


def test_config_takes_openvino_with_the_onnx_keys_only(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"junk")
    (tmp_path / "clip.mp4").write_bytes(b"")
    head = {"sources": [{"uri": "clip.mp4"}]}
    cfg = parse_pipeline({**head, "detector": {"backend": "openvino", "model": "m.onnx", "threads": 1,
                                               "resize": "bucket", "input": {"channels": "rgb"}}}, tmp_path / "p.yaml")
    assert (cfg.detector.backend, cfg.detector.threads, cfg.detector.resize) == ("openvino", 1, "bucket")
    with pytest.raises(ConfigError, match=r"detector.min_area: only for backend motion"):
        parse_pipeline({**head, "detector": {"backend": "openvino", "model": "m.onnx", "min_area": 0.1}},
                       tmp_path / "p.yaml")
    with pytest.raises(ConfigError, match=r"detector.threads: only for backend onnx or openvino"):
        parse_pipeline({**head, "detector": {"backend": "motion", "threads": 1}}, tmp_path / "p.yaml")
    with pytest.raises(ConfigError, match=r"detector.model: missing"):
        parse_pipeline({**head, "detector": {"backend": "openvino"}}, tmp_path / "p.yaml")


def test_pipeline_with_the_openvino_backend_writes_labelled_cars(tmp_path):
    need_openvino()
    clip = need_video("highway_720p30.mp4")
    (tmp_path / "p.yaml").write_text(f"""
sources: [{{name: hw, uri: {clip}, max_fps: 2}}]
detector: {{backend: openvino, model: {YOLOX}, classes: [car, truck, bus], conf: 0.3, threads: 1, resize: bucket}}
keyframes: {{interval: 1}}
tracker: none
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    need_yolox()
    proc = run_cli("run", "-q", str(tmp_path / "p.yaml"))
    assert proc.returncode == 0, proc.stderr
    frames = [m for m in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines()) if m["type"] == "frame"]
    assert len(frames) == 60 and all(m["keyframe"] for m in frames)
    labels = {o["label"] for m in frames for o in m["objects"]}
    assert "car" in labels and labels <= {"car", "truck", "bus"}
    assert sum(1 for m in frames if m["objects"]) >= 0.85 * len(frames)
