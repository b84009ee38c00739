"""An INT8 copy of an ONNX detector, calibrated on your own video, kept only when its boxes agree.

    python tools/quantize.py MODEL.onnx VIDEO [VIDEO ...] --out MODEL_int8.onnx
        [--frames 200] [--resize letterbox] [--conf 0.25] [--min-f1 0.97] [--quantize-head] [--force]

1. Frames spread evenly over the videos (the pipeline's own cameras) go through the detector's own
   preprocessing (`OnnxDetector.prepare_input`: the model's input convention, letterboxed at the
   model's own size); every other one calibrates, the rest validate (`--validate VIDEO ...`: frames
   of those videos validate instead, for a check on scenes it was not calibrated on).
2. NNCF post-training quantization (`nncf.quantize`, its ONNX backend): weights INT8 per output
   channel (a model of opset < 13 is converted to 13 first: opset 11's DequantizeLinear has no
   axis, and per-tensor weights wreck a BN-folded model such as YOLOX-Nano: F1 0.0), activations
   asymmetric (the MIXED preset: SiLU outputs are not symmetric about zero; the symmetric default
   gave F1 0.0 here), NNCF's default range estimation and fast bias correction. The head (the last convolution on every path to the
   output, and what follows it: box, objectness and class outputs share no scale) stays FP32 unless
   `--quantize-head`.
3. NNCF writes activations as int8 with a zero point; they are rewritten as uint8 (zero point + 128:
   the same values), the form x86 INT8 kernels take (OpenVINO runs the int8 form to wrong boxes).
4. Validation: F1 of boxes at IoU 0.5 (class-aware, per frame) of the INT8 model on OpenVINO against
   the FP32 model on onnxruntime (the `onnx` backend's boxes) and on OpenVINO, and ms/frame of the
   three at `detector.threads: 1`, interleaved, medians and paired ratios. The model is written only
   when F1 >= `--min-f1` against onnxruntime FP32 (or with `--force`); else exit status 1.

The INT8 file is an ONNX model (QDQ): `backend: openvino` runs it fast on x86. onnxruntime runs it
too, with the same boxes but slower than its FP32 (its own QDQ fusions do not take NNCF's form).
Needs the quantize extra (`pip install -e ".[quantize]"`: openvino, nncf). Results on the shared clip:
tools/results/detect.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streamlens.bench.accuracy import detections_f1  # noqa: E402
from streamlens.detect.onnx import OnnxDetector  # noqa: E402
from streamlens.frame import Frame  # noqa: E402


def sample_frames(videos: list[Path], count: int) -> list[Frame]:
    """`count` frames spread evenly over all the videos (decoded once each)."""
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("videos", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--validate", type=Path, nargs="+", help="validate on frames of these videos instead")
    ap.add_argument("--frames", type=int, default=200, help="frames sampled: half calibrate, half validate")
    ap.add_argument("--resize", default="letterbox", choices=["letterbox", "resize", "bucket"])
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--min-f1", type=float, default=0.97, help="least F1 against onnxruntime FP32 to keep it")
    ap.add_argument("--quantize-head", action="store_true", help="quantize the head too (default: FP32)")
    ap.add_argument("--rounds", type=int, default=30, help="timed frames of each runtime")
    ap.add_argument("--force", action="store_true", help="write the model whatever its F1")
    args = ap.parse_args()
    try:
        import nncf  # noqa: F401

        from streamlens.detect.openvino_backend import OpenVinoDetector
    except ImportError as e:
        raise SystemExit(f"quantize: needs openvino and nncf (pip install -e '.[quantize]'): {e}") from None

    frames = sample_frames(args.videos, args.frames)
    calibration, validation = frames[0::2], frames[1::2]
    if args.validate:
        calibration, validation = frames, sample_frames(args.validate, args.frames // 2)
    letterbox = OnnxDetector(args.model, conf=args.conf, threads=1)  # calibration at the model's own size
    started = time.perf_counter()
    model, kept = quantize(args.model, [letterbox.prepare_input(f).data[None] for f in calibration],
                           args.quantize_head)
    took = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        candidate = Path(folder) / args.out.name
        import onnx

        onnx.save(model, str(candidate))
        common = dict(conf=args.conf, threads=1, resize=args.resize)
        runners = {"onnxruntime FP32": OnnxDetector(args.model, **common),
                   "OpenVINO FP32": OpenVinoDetector(args.model, **common),
                   "OpenVINO INT8": OpenVinoDetector(candidate, **common)}
        boxes = {name: [d.detect([f])[0] for f in validation] for name, d in runners.items()}
        f1 = detections_f1(boxes["OpenVINO INT8"], boxes["onnxruntime FP32"])
        f1_ov = detections_f1(boxes["OpenVINO INT8"], boxes["OpenVINO FP32"])
        times = interleaved({name: d.detect for name, d in runners.items()}, validation, args.rounds)
        ratio = {name: statistics.median(a / b for a, b in zip(t, times["onnxruntime FP32"]))
                 for name, t in times.items()}
        print(f"{args.model.name}: INT8 from {len(calibration)} calibration frames of "
              f"{', '.join(v.name for v in args.videos)} in {took:.0f} s; head kept FP32: "
              f"{'no' if args.quantize_head else f'yes ({kept} nodes)'}")
        where = ", ".join(v.name for v in args.validate) if args.validate else "other frames"
        print(f"validation ({len(validation)} frames, {where}, resize {args.resize}): {sum(map(len, boxes['onnxruntime FP32']))} boxes FP32, "
              f"{sum(map(len, boxes['OpenVINO INT8']))} INT8; F1 INT8 against onnxruntime FP32 {f1:.4f}, "
              f"against OpenVINO FP32 {f1_ov:.4f}")
        for name, t in times.items():
            print(f"  {name}: {statistics.median(t):.1f} ms/frame (threads 1), x onnxruntime FP32 {ratio[name]:.2f}")
        if f1 < args.min_f1 and not args.force:
            print(f"not written: F1 {f1:.4f} < {args.min_f1} (--force writes it anyway)")
            return 1
        args.out.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(args.out))
        print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
