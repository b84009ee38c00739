"""An INT8 copy of an ONNX detector, calibrated on the user's own video: what `streamlens quantize`
runs (streamlens/commands/quantize.py says what the command checks and prints).

1. `sample_frames`: frames spread evenly over the videos (the pipeline's own cameras); they go
   through the detector's own preprocessing (`OnnxDetector.prepare_input`: the model's input
   convention, letterboxed at the model's own size) before calibrating.
2. `quantize`: NNCF post-training quantization (`nncf.quantize`, its ONNX backend): weights INT8 per
   output channel (a model of opset < 13 is converted to 13 first: opset 11's DequantizeLinear has
   no axis, and per-tensor weights wreck a BN-folded model such as YOLOX-Nano: F1 0.0), activations
   asymmetric (the MIXED preset: SiLU outputs are not symmetric about zero; the symmetric default
   gave F1 0.0 here), NNCF's default range estimation and fast bias correction. The head
   (`head_nodes`: the last convolution on every path to the output, and what follows it: box,
   objectness and class outputs share no scale) stays FP32 unless asked.
3. `activations_to_uint8`: NNCF writes activations as int8 with a zero point; they are rewritten as
   uint8 (zero point + 128: the same values), the form x86 INT8 kernels take (OpenVINO runs the
   int8 form to wrong boxes).

The INT8 file is an ONNX model (QDQ): `backend: openvino` runs it fast on x86. onnxruntime runs it
too, with the same boxes but slower than its FP32 (its own QDQ fusions do not take NNCF's form).
Needs the quantize extra (openvino, nncf).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..frame import Frame


def sample_frames(videos: list[Path], count: int) -> list[Frame]:
    """`count` frames spread evenly over all the videos (decoded once each)."""
    import av

    totals = []
    for video in videos:
        with av.open(str(video)) as container:
            totals.append(container.streams.video[0].frames or sum(1 for _ in container.decode(video=0)))
    step = max(1, sum(totals) // count)
    frames: list[Frame] = []
    for video in videos:
        with av.open(str(video)) as container:
            for i, frame in enumerate(container.decode(video=0)):
                if i % step == 0:
                    frames.append(Frame(video.stem, i, None, 0.0, frame.to_ndarray(format="bgr24")))
    return frames[:count]


def head_nodes(model) -> list[str]:
    """Nodes of the ONNX graph with no convolution between them and an output: the last convolution
    on every path to an output, and everything after it (decode, concatenation of box and class)."""
    users: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    conv_below: dict[int, bool] = {}
    for node in reversed(model.graph.node):
        after = [u for out in node.output for u in users.get(out, [])]
        conv_below[id(node)] = any(u.op_type == "Conv" or conv_below[id(u)] for u in after)
    return [node.name for node in model.graph.node if not conv_below[id(node)]]


def activations_to_uint8(model) -> int:
    """Rewrite int8 activation Quantize/DequantizeLinear pairs (scalar zero point) as uint8, zero
    point + 128: the same dequantized values. Weights (per-channel zero points) stay int8."""
    import onnx
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    zero_points = set()
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and len(node.input) > 2 and node.input[2] in inits:
            value = numpy_helper.to_array(inits[node.input[2]])
            if value.dtype == np.int8 and value.ndim == 0:
                zero_points.add(node.input[2])
    for name in zero_points:
        value = numpy_helper.to_array(inits[name]).astype(np.int16) + 128
        inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.uint8), name))
    outputs = {n.output[0] for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[2] in zero_points}
    for info in model.graph.value_info:
        if info.name in outputs:
            info.type.tensor_type.elem_type = onnx.TensorProto.UINT8
    return len(zero_points)


def quantize(model_path: Path, calibration: list[np.ndarray], quantize_head: bool):
    """The INT8 ONNX model (see the module's docstring), and how many nodes were kept FP32."""
    import nncf
    import onnx
    from onnx import version_converter

    model = onnx.load(str(model_path))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset < 13:
        model = version_converter.convert_version(model, 13)
    kept = [] if quantize_head else head_nodes(model)
    quantized = nncf.quantize(model, nncf.Dataset([{model.graph.input[0].name: x} for x in calibration]),
                              preset=nncf.QuantizationPreset.MIXED, subset_size=len(calibration),
                              ignored_scope=nncf.IgnoredScope(names=kept, validate=False))
    activations_to_uint8(quantized)
    del quantized.metadata_props[:]
    quantized.metadata_props.extend(onnx.load(str(model_path), load_external_data=False).metadata_props)
    return quantized, len(kept)


def interleaved(runners: dict, frames: list[Frame], rounds: int) -> dict[str, list[float]]:
    """ms per frame of each runner, one frame each in turn per round (after one warm-up each)."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    for run in runners.values():
        run([frames[0]])
    for r in range(rounds):
        for name, run in runners.items():
            start = time.perf_counter()
            run([frames[r % len(frames)]])
            times[name].append((time.perf_counter() - start) * 1000)
    return times


__all__ = ["activations_to_uint8", "head_nodes", "interleaved", "quantize", "sample_frames"]
