"""Detector benchmark: streamlens' backends side by side with a plain hand-written loop and Ultralytics' predict.

    python tools/bench_detect.py [--frames 48] [--reps 3] [--clip PATH] [--out tools/results/detect.md]
    python tools/bench_detect.py --parts runtimes [--threads 1,2] [--resizes letterbox,bucket] [--int8 M.xml] [--half]

Four parts (`--parts`), all in one run on the same frames (these machines are shared and noisy: read the
ratios, which compare things measured a few seconds apart, more than the absolute figures):

1. YOLOX-Nano (../shared/data/models/yolox_nano, 416x416, fixed batch 1): ms per frame for the
   plain loop's detect part (letterbox, onnxruntime, YOLOX decode, cv2 NMS, written here by hand
   without streamlens), once with onnxruntime's defaults and once without spin-waiting (as
   streamlens runs it: spinning threads fight the decode threads for a small machine's cores), and
   for streamlens' onnx backend at batch 1, 4 and 8.
2. YOLOv8n built from yolov8n.yaml (random weights: nothing is downloaded; no boxes survive conf
   0.25, so NMS costs nothing here), saved as .pt and exported to a dynamic ONNX: the plain loop on
   the ONNX, streamlens' onnx backend on the ONNX, streamlens' ultralytics backend on the .pt
   (letterbox 416x416, and `bucket`: 416x256 for 16:9), and Ultralytics' own `model.predict` on
   the .pt (which letterboxes a batch of equal shapes to 416x256 by itself), at batch 1, 4 and 8.
3. The whole clip (highway_720p30.mp4, 897 frames 1280x720): the plain loop end to end (PyAV
   decode + the above, one thread) against `streamlens.Pipeline` with backend onnx, keyframes
   interval 1, tracker none, no sinks; wall time from building to the end, `--reps` times each,
   alternating; medians and the ratio. Target: the pipeline within 10% of the plain loop.
4. `runtimes`: onnxruntime (`backend: onnx`) against OpenVINO FP32 (`backend: openvino`), and an
   INT8 model on OpenVINO when `--int8` names one (`streamlens quantize`), and with `--half` OpenVINO at
   `detector.half: true` (its own precision: BF16 on CPUs with AMX), on YOLOX-Nano: letterbox and
   bucket, `detector.threads` 1 and 2, batch 1/4/8, every runner interleaved round by round;
   ms/frame medians, the median of the paired per-round ratios, and F1 of each one's boxes against
   onnxruntime FP32's (and INT8's against OpenVINO FP32's); with `--reps`, the whole clip through
   `streamlens.Pipeline` with each backend, alternating. Needs the openvino extra.

Each ms-per-frame figure is the median over `--rounds` batches of (batch time / batch size), after
one warm-up batch; the runners of a table take turns batch by batch, so a burst of load from other
work hits them all alike. Prints a Markdown report and writes it to `--out`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import av
import cv2
import numpy as np
import onnxruntime as ort

from streamlens.bench.harness import RESULTS, VIDEOS, YOLOX_NANO, header, need, now, write_page
from streamlens.config import parse_pipeline
from streamlens.detect.onnx import OnnxDetector
from streamlens.frame import Frame
from streamlens.graph.run.pipeline import Pipeline

YOLOX = YOLOX_NANO / "yolox_nano.onnx"
CLIP = VIDEOS / "highway_720p30.mp4"
BATCHES = (1, 4, 8)
CONF, IOU = 0.25, 0.45


# -- the plain loop: what a user would write by hand, without streamlens --------------------------

def plain_session(path: Path, spinning: bool) -> ort.InferenceSession:
    """onnxruntime as a user would open it; `spinning=False` turns off spin-waiting as streamlens does."""
    options = ort.SessionOptions()
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class PlainYolox:
    """letterbox (top-left, 114) -> BGR float 0-255 -> onnxruntime -> YOLOX decode -> cv2 NMS."""

    def __init__(self, path: Path, size: int = 416, spinning: bool = True):
        self.session = plain_session(path, spinning)
        self.input = self.session.get_inputs()[0].name
        self.size = size
        grids, strides = [], []
        for s in (8, 16, 32):
            n = size // s
            ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
            grids.append(np.stack([xs, ys], -1).reshape(-1, 2))
            strides.append(np.full((n * n, 1), s))
        self.grid, self.stride = np.concatenate(grids).astype(np.float32), np.concatenate(strides).astype(np.float32)

    def __call__(self, image: np.ndarray):
        h, w = image.shape[:2]
        r = min(self.size / h, self.size / w)
        canvas = np.full((self.size, self.size, 3), 114, np.uint8)
        nw, nh = round(w * r), round(h * r)
        canvas[:nh, :nw] = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_LINEAR)
        x = canvas.transpose(2, 0, 1)[None].astype(np.float32)
        out = self.session.run(None, {self.input: x})[0][0]
        xy = (out[:, :2] + self.grid) * self.stride
        wh = np.exp(out[:, 2:4]) * self.stride
        cls = out[:, 5:].argmax(1)
        score = out[:, 4] * out[np.arange(len(out)), 5 + cls]
        keep = score > CONF
        boxes = np.concatenate([xy[keep] - wh[keep] / 2, wh[keep]], 1) / r  # x, y, w, h in source pixels
        idx = cv2.dnn.NMSBoxesBatched(boxes.tolist(), score[keep].tolist(), cls[keep].tolist(), CONF, IOU)
        return boxes[np.asarray(idx, int).reshape(-1)], score[keep][np.asarray(idx, int).reshape(-1)]


class PlainYolov8:
    """centred letterbox (114) -> RGB float 0-1 -> onnxruntime -> [84, N] decode -> cv2 NMS."""

    def __init__(self, path: Path, size: int = 416, spinning: bool = True):
        self.session = plain_session(path, spinning)
        self.input = self.session.get_inputs()[0].name
        self.size = size

    def __call__(self, image: np.ndarray):
        h, w = image.shape[:2]
        r = min(self.size / h, self.size / w)
        nw, nh = round(w * r), round(h * r)
        top, left = (self.size - nh) // 2, (self.size - nw) // 2
        canvas = np.full((self.size, self.size, 3), 114, np.uint8)
        canvas[top:top + nh, left:left + nw] = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_LINEAR)
        x = (canvas[..., ::-1].transpose(2, 0, 1)[None].astype(np.float32)) / 255.0
        out = self.session.run(None, {self.input: x})[0][0]
        score = out[4:].max(0)
        keep = np.flatnonzero(score > CONF)
        cls = out[4:, keep].argmax(0)
        cx, cy, bw, bh = out[:4, keep]
        boxes = np.stack([(cx - bw / 2 - left) / r, (cy - bh / 2 - top) / r, bw / r, bh / r], 1)
        idx = cv2.dnn.NMSBoxesBatched(boxes.tolist(), score[keep].tolist(), cls.tolist(), CONF, IOU)
        return boxes[np.asarray(idx, int).reshape(-1)], score[keep][np.asarray(idx, int).reshape(-1)]


def plain_clip(path: Path, model: Path) -> float:
    """The plain loop over a whole clip, one thread: decode, detect (onnxruntime without spin-waiting,
    as streamlens runs it: the stricter baseline on a shared machine). Seconds, including setup."""
    started = time.perf_counter()
    detect = PlainYolox(model, spinning=False)
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            detect(frame.to_ndarray(format="bgr24"))
    return time.perf_counter() - started


def pipeline_clip(path: Path, model: Path, backend: str = "onnx", threads: int | None = None,
                  half: bool = False) -> float:
    """The engine's detect-every-frame pipeline over a whole clip. Seconds, from building to the end."""
    started = time.perf_counter()
    detector = {"backend": backend, "model": str(model), "conf": CONF, "iou": IOU, "half": half}
    if threads:
        detector["threads"] = threads
    cfg = parse_pipeline({"sources": [{"name": "hw", "uri": str(path)}], "detector": detector,
                          "keyframes": {"interval": 1}, "tracker": "none"}, Path(tempfile.gettempdir()) / "p.yaml")
    report = Pipeline(cfg).run()
    if report.status != "done":
        raise SystemExit(f"pipeline failed: {report.error}")
    return time.perf_counter() - started


# -- measuring ------------------------------------------------------------------------------------

def interleaved_ms_per_frame(runners: dict, frames: list, rounds: int, raw: bool = False) -> dict:
    """Median ms per frame of each runner (`name: (run_batch, batch size)`), measured in rounds: each
    round runs one batch of every runner in turn, so all of them see the same load on a shared
    machine. One warm-up batch each first. Runner k's batches walk through `frames`, wrapping.
    `raw`: each runner's list of per-round figures instead of their median."""
    per_frame: dict[str, list[float]] = {name: [] for name in runners}
    for run_batch, batch in runners.values():
        run_batch(frames[:batch])
    for r in range(rounds):
        for name, (run_batch, batch) in runners.items():
            start = (r * batch) % len(frames)
            chunk = (frames + frames)[start:start + batch]
            t = time.perf_counter()
            run_batch(chunk)
            per_frame[name].append((time.perf_counter() - t) * 1000 / batch)
    return per_frame if raw else {name: statistics.median(values) for name, values in per_frame.items()}


def sample_frames(path: Path, count: int) -> list[Frame]:
    """`count` frames spread over the clip, decoded once."""
    with av.open(str(path)) as container:
        total = container.streams.video[0].frames or 897
        step = max(1, total // count)
        frames = [Frame("hw", i, None, 0.0, f.to_ndarray(format="bgr24"))
                  for i, f in enumerate(container.decode(video=0)) if i % step == 0]
    return frames[:count]


def build_yolov8n(folder: Path, imgsz: int) -> tuple[Path, Path]:
    from streamlens.detect.ultralytics_offline import import_ultralytics_offline

    import_ultralytics_offline()
    from ultralytics import YOLO

    pt = folder / "yolov8n.pt"
    YOLO("yolov8n.yaml").save(pt)
    onnx_file = YOLO(str(pt)).export(format="onnx", imgsz=imgsz, dynamic=True, simplify=False, verbose=False)
    return pt, Path(onnx_file)


def table(rows: list[tuple[str, list[float]]], baseline: list[float]) -> list[str]:
    head = "| what | " + " | ".join(f"batch {b}: ms/frame (x plain)" for b in BATCHES) + " |"
    lines = [head, "|---|" + "---|" * len(BATCHES)]
    for name, values in rows:
        cells = [f"{v:.1f} ({v / p:.2f})" for v, p in zip(values, baseline)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def paired_ratio(ours: list[float], theirs: list[float]) -> float:
    """The median of per-round ratios ours / theirs (each pair measured a moment apart)."""
    return statistics.median(a / b for a, b in zip(ours, theirs))


def runtimes_part(args, frames: list[Frame]) -> list[str]:
    """4. onnxruntime against OpenVINO FP32 (and `--int8`'s model on OpenVINO) on YOLOX-Nano: the same
    frames, letterbox and bucket, threads 1 and 2, batch 1/4/8, all runners interleaved round by
    round; ms/frame medians, the median of the paired per-round ratios, and F1 of each runtime's
    boxes against onnxruntime FP32's (same resize)."""
    import openvino

    from streamlens.bench.accuracy import detections_f1
    from streamlens.detect.openvino_backend import OpenVinoDetector

    kinds = [("onnxruntime FP32", OnnxDetector, YOLOX, {}), ("OpenVINO FP32", OpenVinoDetector, YOLOX, {"half": False})]
    if args.int8:
        kinds.append(("OpenVINO INT8", OpenVinoDetector, args.int8, {"half": False}))
    if args.half:  # `detector.half: true`: OpenVINO's own precision (BF16 on CPUs that have it)
        precision = openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
        kinds.append((f"OpenVINO half ({precision})", OpenVinoDetector, YOLOX, {"half": True}))
    resizes, threads = args.resizes.split(","), [int(t) for t in args.threads.split(",")]
    detectors = {(kind, resize, t): cls(model, conf=CONF, iou=IOU, max_batch=8, threads=t, resize=resize, **more)
                 for resize in resizes for t in threads for kind, cls, model, more in kinds}
    boxes = {(kind, resize): [detectors[kind, resize, threads[0]].detect([f])[0] for f in frames]
             for kind, *_ in kinds for resize in resizes}
    f1 = {key: detections_f1(found, boxes["onnxruntime FP32", key[1]]) for key, found in boxes.items()}
    f1_fp32 = {key: detections_f1(found, boxes["OpenVINO FP32", key[1]]) for key, found in boxes.items()}
    runners = {(kind, resize, t, b): (detectors[kind, resize, t].detect, b)
               for resize in resizes for t in threads for b in BATCHES for kind, *_ in kinds}
    per_round = interleaved_ms_per_frame(runners, frames, args.rounds, raw=True)
    more = [k for k, *_ in kinds[2:]]  # INT8 and half, each: ms/frame and its ratios
    head = ["| resize | threads | batch | " + " | ".join(f"{k}: ms/frame" for k, *_ in kinds[:2])
            + " | OpenVINO / onnxruntime |"
            + "".join(f" {k}: ms/frame | {k} / onnxruntime | {k} / OpenVINO FP32 |" for k in more),
            "|---|---|---|---|---|---|" + "---|---|---|" * len(more)]
    rows = []
    for resize in resizes:
        for t in threads:
            for b in BATCHES:
                ort_ms, ov_ms = per_round["onnxruntime FP32", resize, t, b], per_round["OpenVINO FP32", resize, t, b]
                row = (f"| {resize} | {t} | {b} | {statistics.median(ort_ms):.1f} | {statistics.median(ov_ms):.1f} | "
                       f"**{paired_ratio(ov_ms, ort_ms):.2f}** |")
                for kind in more:
                    q_ms = per_round[kind, resize, t, b]
                    row += (f" {statistics.median(q_ms):.1f} | {paired_ratio(q_ms, ort_ms):.2f} | "
                            f"**{paired_ratio(q_ms, ov_ms):.2f}** |")
                rows.append(row)
    agree = [f"- {kind}, {resize}: {sum(map(len, boxes[kind, resize]))} boxes; F1 against onnxruntime FP32's boxes "
             f"**{f1[kind, resize]:.4f}**" + (f", against OpenVINO FP32's **{f1_fp32[kind, resize]:.4f}**"
                                             if kind in more else "")
             for kind, *_ in kinds for resize in resizes]
    lines = ["## onnxruntime against OpenVINO on YOLOX-Nano (`backend: onnx` / `backend: openvino`)", "",
             f"OpenVINO {openvino.__version__}; YOLOX-Nano 416x416 (fixed batch 1: a batch of n is n calls); "
             f"{args.rounds} rounds, every runner once a round in turn; ms/frame: median over rounds; ratios: the "
             f"median of the per-round ratios (< 1: faster than the baseline). Accuracy: conf {CONF}, IoU "
             f"{IOU}, F1 of boxes at IoU 0.5, class-aware, matched per frame, over the {len(frames)} frames."
             + (f" INT8 model: `{args.int8.name}`." if args.int8 else ""), "", *head, *rows, "", *agree, ""]
    if args.reps:
        runs: dict[str, list[float]] = {"onnx": [], "openvino": [], **({"openvino, half": []} if args.half else {})}
        for _ in range(args.reps):
            for name in runs:
                runs[name].append(pipeline_clip(args.clip, YOLOX, name.split(",")[0], threads=1, half="half" in name))
        o, v = runs["onnx"], runs["openvino"]
        lines += [f"Whole clip ({args.clip.name}, every frame detected, `streamlens.Pipeline`, tracker none, "
                  f"no sinks, `detector.threads: 1`, {args.reps} runs each, alternating): onnx "
                  f"{', '.join(f'{r:.1f}' for r in o)} s, openvino {', '.join(f'{r:.1f}' for r in v)} s; "
                  f"medians {statistics.median(o):.1f} / {statistics.median(v):.1f} s, ratio of the pairs' "
                  f"median **{paired_ratio(v, o):.2f}**"
                  + (f"; openvino with `half: true` {', '.join(f'{r:.1f}' for r in runs['openvino, half'])} s, "
                     f"median {statistics.median(runs['openvino, half']):.1f} s, ratio to onnx "
                     f"**{paired_ratio(runs['openvino, half'], o):.2f}**" if args.half else "") + ".", ""]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=48, help="frames spread over the clip for the ms/frame parts")
    ap.add_argument("--rounds", type=int, default=8, help="measured batches of each runner (interleaved)")
    ap.add_argument("--reps", type=int, default=3, help="whole-clip runs of each, alternating")
    ap.add_argument("--clip", type=Path, default=CLIP)
    ap.add_argument("--imgsz", type=int, default=416)
    ap.add_argument("--out", type=Path, default=RESULTS / "detect.md")
    ap.add_argument("--skip-ultralytics", action="store_true")
    ap.add_argument("--parts", default="yolox,yolov8,clip,runtimes",
                    help="which parts to run: yolox, yolov8, clip, runtimes (onnxruntime against OpenVINO)")
    ap.add_argument("--threads", default="1,2", help="runtimes part: the detector.threads values")
    ap.add_argument("--resizes", default="letterbox,bucket", help="runtimes part: the resize modes")
    ap.add_argument("--int8", type=Path, help="runtimes part: an INT8 model (`streamlens quantize`) on OpenVINO too")
    ap.add_argument("--half", action="store_true",
                    help="runtimes part: OpenVINO with detector.half too (its own precision: BF16 where the "
                         "CPU has it)")
    args = ap.parse_args()
    parts = set(args.parts.split(",")) - ({"yolov8"} if args.skip_ultralytics else set())
    need(YOLOX, args.clip)

    frames = sample_frames(args.clip, args.frames)
    report = [header(f"Detector benchmark ({now()})",
                     more=[f"Load average {os.getloadavg()[0]:.1f} at the start; onnxruntime {ort.__version__}, "
                           "CPU only.",
                           f"Frames: {len(frames)} frames spread over {args.clip.name} (1280x720)."])]

    # 1. YOLOX-Nano
    if "yolox" in parts:
        report += yolox_part(args, frames)
    if "yolov8" in parts:
        report += yolov8_part(args, frames)
    if "clip" in parts and args.reps:
        report += clip_part(args)
    if "runtimes" in parts:
        report += runtimes_part(args, frames)
    text = "\n".join(report)
    print(text)
    write_page(args.out, text)
    return 0


def yolox_part(args, frames: list[Frame]) -> list[str]:
    report: list[str] = []
    plain = PlainYolox(YOLOX)
    plain_quiet = PlainYolox(YOLOX, spinning=False)
    onnx = OnnxDetector(YOLOX, conf=CONF, iou=IOU, max_batch=8)
    runners = {"plain": (lambda fs: [plain(f.image) for f in fs], 1),
               "quiet": (lambda fs: [plain_quiet(f.image) for f in fs], 1)}
    runners.update({f"onnx{b}": (onnx.detect, b) for b in BATCHES})
    ms = interleaved_ms_per_frame(runners, frames, args.rounds)
    plain_ms = ms["plain"]
    report += ["## YOLOX-Nano 416x416 (fixed batch 1: a batch of n runs as n model calls)", "",
               f"Plain loop (letterbox, onnxruntime, decode, cv2 NMS), detect part only: "
               f"**{plain_ms:.1f} ms/frame**.", ""]
    report += table([("plain loop (batch 1)", [plain_ms] * 3),
                     ("plain loop, onnxruntime without spin-waiting (batch 1)", [ms["quiet"]] * 3),
                     ("streamlens onnx backend", [ms[f"onnx{b}"] for b in BATCHES])], [plain_ms] * 3) + [""]
    return report


def yolov8_part(args, frames: list[Frame]) -> list[str]:
    """2. YOLOv8n, random weights."""
    from streamlens.detect.ultralytics_backend import UltralyticsDetector

    report: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="bench_yolov8n_"))
    pt, onnx_file = build_yolov8n(folder, args.imgsz)
    from ultralytics import YOLO

    plain8 = PlainYolov8(onnx_file, args.imgsz)
    plain8_quiet = PlainYolov8(onnx_file, args.imgsz, spinning=False)
    onnx8 = OnnxDetector(onnx_file, conf=CONF, iou=IOU, max_batch=8)
    ultra = UltralyticsDetector(pt, imgsz=args.imgsz, conf=CONF, iou=IOU, device="cpu", max_batch=8)
    ultra_bucket = UltralyticsDetector(pt, imgsz=args.imgsz, conf=CONF, iou=IOU, device="cpu", max_batch=8,
                                       resize="bucket")
    predictor = YOLO(str(pt))

    def predict(fs):
        return predictor.predict([f.image for f in fs], imgsz=args.imgsz, conf=CONF, iou=IOU, device="cpu",
                                 verbose=False)

    named = {"streamlens onnx backend, .onnx": onnx8.detect,
             f"streamlens ultralytics backend, .pt, letterbox {args.imgsz}x{args.imgsz}": ultra.detect,
             "streamlens ultralytics backend, .pt, bucket (16:9 -> 416x256)": ultra_bucket.detect,
             "Ultralytics model.predict, .pt (letterboxes 16:9 to 416x256 itself)": predict}
    runners = {"plain": (lambda fs: [plain8(f.image) for f in fs], 1),
               "quiet": (lambda fs: [plain8_quiet(f.image) for f in fs], 1)}
    runners.update({f"{name}|{b}": (run, b) for name, run in named.items() for b in BATCHES})
    ms = interleaved_ms_per_frame(runners, frames, args.rounds)
    plain8_ms = ms["plain"]
    rows = [("plain loop on the .onnx (batch 1)", [plain8_ms] * 3),
            ("plain loop, onnxruntime without spin-waiting (batch 1)", [ms["quiet"]] * 3)]
    rows += [(name, [ms[f"{name}|{b}"] for b in BATCHES]) for name in named]
    report += [f"## YOLOv8n {args.imgsz}, random weights (built from yolov8n.yaml; .pt and dynamic .onnx)", ""]
    report += table(rows, [plain8_ms] * 3) + [""]
    return report


def clip_part(args) -> list[str]:
    """3. The whole clip: the plain loop against the pipeline, `--reps` times each."""
    report: list[str] = []
    plain_runs, pipe_runs = [], []
    for _ in range(args.reps):
        plain_runs.append(plain_clip(args.clip, YOLOX))
        pipe_runs.append(pipeline_clip(args.clip, YOLOX))
    with av.open(str(args.clip)) as c:
        total = sum(1 for _ in c.decode(video=0))
    p, q = statistics.median(plain_runs), statistics.median(pipe_runs)
    pair_ratios = [b / a for a, b in zip(plain_runs, pipe_runs)]
    ratio = statistics.median(pair_ratios)
    report += [f"## The whole clip: {args.clip.name}, {total} frames, YOLOX-Nano on every frame", "",
               "| what | runs (s) | median (s) | ms/frame | x plain |", "|---|---|---|---|---|",
               f"| plain loop (decode, letterbox, onnxruntime without spin-waiting, NMS; one thread) | "
               f"{', '.join(f'{r:.1f}' for r in plain_runs)} | {p:.1f} | {p * 1000 / total:.1f} | 1.00 |",
               f"| streamlens.Pipeline (onnx, interval 1, tracker none, no sinks) | "
               f"{', '.join(f'{r:.1f}' for r in pipe_runs)} | {q:.1f} | {q * 1000 / total:.1f} | {q / p:.2f} |", "",
               f"Each pipeline run follows a plain run; the ratios of those pairs: "
               f"{', '.join(f'{r:.2f}' for r in pair_ratios)}, median **{ratio:.2f}**. "
               f"Target (the pipeline within 10% of the plain loop): {'met' if ratio <= 1.10 else 'NOT met'}.", ""]
    return report


if __name__ == "__main__":
    sys.exit(main())
