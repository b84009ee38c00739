"""`streamlens quantize MODEL.onnx VIDEO ... --out MODEL_int8.onnx`: an INT8 copy of an ONNX
detector, calibrated on your own video, kept only when its boxes agree.

Frames spread evenly over the videos (the pipeline's own cameras): every other one calibrates
(NNCF, streamlens/detect/quantize.py), the rest validate (`--validate VIDEO ...`: frames of those
videos validate instead, for a check on scenes it was not calibrated on). Validation: F1 of boxes
at IoU 0.5 (class-aware, per frame) of the INT8 model on OpenVINO against the FP32 model on
onnxruntime (the `onnx` backend's boxes) and on OpenVINO, and ms/frame of the three at
`detector.threads: 1`, interleaved, medians and paired ratios. The model is written only when F1 >=
`--min-f1` against onnxruntime FP32 (or with `--force`); else the exit status is 1 and nothing is
written. Needs the quantize extra (`pip install "streamlens[quantize]"`: openvino, nncf); results
on the shared clip: tools/results/detect.md.

Example:
    $ streamlens quantize yolox_nano.onnx cam1.mp4 cam2.mp4 --out yolox_nano_int8.onnx
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ..errors import StreamlensError


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    """Add the `quantize` subcommand to the `streamlens` parser's subparsers."""
    p = sub.add_parser("quantize", parents=[common], help="an INT8 copy of an ONNX detector, checked on your video",
                       description="Calibrate an INT8 copy of an ONNX detector on frames of VIDEO (NNCF) and write "
                                   "it to --out only when its boxes agree with the FP32 model's (F1 >= --min-f1).")
    p.add_argument("model", type=Path, help="the ONNX detector (FP32)")
    p.add_argument("videos", type=Path, nargs="+", metavar="VIDEO", help="videos of your cameras to calibrate on")
    p.add_argument("--out", type=Path, required=True, help="the INT8 ONNX file to write")
    p.add_argument("--validate", type=Path, nargs="+", metavar="VIDEO",
                   help="validate on frames of these videos instead")
    p.add_argument("--frames", type=int, default=200, help="frames sampled: half calibrate, half validate")
    p.add_argument("--resize", default="letterbox", choices=["letterbox", "resize", "bucket"])
    p.add_argument("--conf", type=float, default=0.25)
    p.add_argument("--min-f1", type=float, default=0.97, help="least F1 against onnxruntime FP32 to keep it")
    p.add_argument("--quantize-head", action="store_true", help="quantize the head too (default: FP32)")
    p.add_argument("--rounds", type=int, default=30, help="timed frames of each runtime")
    p.add_argument("--force", action="store_true", help="write the model whatever its F1")


def run(args) -> int:
    """Quantize, validate, print the figures; write the model when it agrees (see the module)."""
    try:
        import nncf  # noqa: F401
        import onnx

        from ..detect.openvino_backend import OpenVinoDetector
    except ImportError as e:
        raise StreamlensError(f"quantize needs openvino and nncf (pip install 'streamlens[quantize]'): {e}") from None
    from ..bench.accuracy import detections_f1
    from ..detect.onnx import OnnxDetector
    from ..detect.quantize import interleaved, quantize, sample_frames

    for path in (args.model, *args.videos, *(args.validate or ())):
        if not path.is_file():
            raise StreamlensError(f"quantize: file not found: {path}")
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
        onnx.save(model, str(candidate))
        common = dict(conf=args.conf, threads=1, resize=args.resize)
        runners = {"onnxruntime FP32": OnnxDetector(args.model, **common),
                   "OpenVINO FP32": OpenVinoDetector(args.model, half=False, **common),
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
        print(f"validation ({len(validation)} frames, {where}, resize {args.resize}): "
              f"{sum(map(len, boxes['onnxruntime FP32']))} boxes FP32, "
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


__all__ = ["add_parser", "run"]
