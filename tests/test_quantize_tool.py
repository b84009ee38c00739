"""`streamlens quantize`: an INT8 copy of YOLOX-Nano from the highway clip, kept only when its boxes agree.

Needs the quantize extra (nncf, openvino) and ../shared/data; skips, saying which, without them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import REPO, need_video
from .test_detect_onnx import need_yolox

def test_the_head_is_the_last_convolutions_and_what_follows_them():
    onnx = pytest.importorskip("onnx")
    from streamlens.detect.quantize import head_nodes

    model = onnx.load(str(need_yolox()))
    head = set(head_nodes(model))
    preds = {n.name for n in model.graph.node if n.op_type == "Conv" and "_preds" in n.input[1]}
    assert len(preds) == 9 and preds <= head  # cls, reg and obj at three strides
    assert {n.op_type for n in model.graph.node if n.name in head} <= {"Conv", "Sigmoid", "Concat", "Reshape",
                                                                       "Transpose"}
    assert not any(n.name in head for n in model.graph.node[:50])


def test_quantize_reports_f1_and_speed_and_keeps_the_model_only_when_it_agrees(tmp_path):
    pytest.importorskip("nncf", reason="nncf is not installed (pip install -e '.[quantize]')")
    pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install -e '.[quantize]')")
    model, clip = need_yolox(), need_video("highway_720p30.mp4")
    out = tmp_path / "int8.onnx"
    base = [sys.executable, "-m", "streamlens", "quantize", str(model), str(clip), "--out", str(out), "--frames", "24",
            "--rounds", "2"]
    strict = subprocess.run(base + ["--min-f1", "1.01"], capture_output=True, text=True, timeout=600)
    assert strict.returncode == 1 and not out.exists(), strict.stdout + strict.stderr
    assert "F1 INT8 against onnxruntime FP32 0." in strict.stdout and "not written: F1" in strict.stdout
    forced = subprocess.run(base + ["--min-f1", "1.01", "--force"], capture_output=True, text=True, timeout=600)
    assert forced.returncode == 0 and out.is_file(), forced.stdout + forced.stderr
    # the INT8 file is an ONNX model both backends run; loaded in a process of its own, so that a
    # native crash in a runtime fails this test instead of taking the test worker down with it
    load = ("import sys\n"
            "from streamlens.detect.onnx import OnnxDetector\n"
            "from streamlens.detect.openvino_backend import OpenVinoDetector\n"
            "for cls in (OnnxDetector, OpenVinoDetector):\n"
            "    d = cls(sys.argv[1], threads=1)\n"
            "    print(cls.__name__, d.head.name, *d.spec.size, getattr(d, 'precision', '-'))\n")
    loaded = subprocess.run([sys.executable, "-c", load, str(out)], capture_output=True, text=True, timeout=300,
                            cwd=REPO)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    # an INT8 model keeps FP32 beside its INT8 layers whatever the CPU: in BF16 (the default where the
    # CPU has it) OpenVINO could not compile it on a Xeon with AMX
    assert loaded.stdout.split("\n")[:2] == ["OnnxDetector yolox 416 416 -", "OpenVinoDetector yolox 416 416 f32"]
