"""The CUDA path, checked and timed on a machine with an NVIDIA GPU (one call, a few minutes).

    python tools/bench_gpu.py [--clip highway_720p30.mp4] [--out tools/results/gpu.md] [--json gpu.json]
                              [--deadline-s 420] [--live-streams 8-64]

What it does, in order, each part in its own try (a failure is reported and the rest still runs),
stopping early when `--deadline-s` would be passed:

1. The machine: GPU, driver, torch, CUDA, CPU cores.
2. The CUDA tests of tests/test_detect_ultralytics.py and tests/test_live_source.py (skipped on a
   machine without a GPU): CUDA FP32 gives the CPU's raw output, FP16 close to it; six batches queued
   through the two pinned buffers each reach the GPU intact; decoded frames land in pinned memory.
3. Host-to-device copies of one batch (8 letterboxed 640x640 frames, 9.8 MB): pageable memory
   against pinned memory with a non-blocking copy, GB/s.
4. The detector (`UltralyticsDetector`, YOLOv8n built from yolov8n.yaml: random weights, nothing
   downloaded, at 640x640) in FP32 and FP16, at batch 1 to 64: the model alone on a batch already on
   the GPU, and `detect()` on frames letterboxed ahead (as the pipeline does, on the decode threads):
   copies, model, NMS, read-back and mapping to source pixels; once from inputs letterboxed into
   pinned memory (streamlens' way) and once from numpy inputs gathered into a pinned staging buffer
   first. Medians over `--reps`.
   Letterboxing a 1280x720 frame on the CPU is timed on its own.
5. Whole clip, as fast as it goes, FP16: detect every frame (`runtime.mode: bulk`: interval 1, no
   tracker, batches of 32) and, read unpaced in real-time mode, every 5th frame with the `mv`
   tracker between; and Ultralytics' own `model.track(stream=True)` at
   640 on the same GPU (every frame), frames per second.
6. `streamlens bench` with the GPU pipeline: the largest number of live 720p30 streams within 33 ms
   p95 keeping 97% of frames (`--live-streams`, short trials), the decode-only limit of this machine.

Random weights score every box below Ultralytics' default threshold, so the pipelines run with
conf 0.0001 and max_det 20: twenty junk boxes a keyframe give the tracker and NMS the work of a
busy road. Keyframes come every 5th frame, not adaptively: junk boxes that no motion follows would
make the adaptive schedule detect on every frame. Prints a Markdown report and writes it to `--out`,
all figures to `--json`.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import av
import numpy as np

from streamlens.bench import harness
from streamlens.bench.harness import REPO, RESULTS, VIDEOS, command_line, machine_line, now
from streamlens.config import parse_pipeline
from streamlens.detect.ultralytics_backend import UltralyticsDetector
from streamlens.detect.ultralytics_offline import import_ultralytics_offline
from streamlens.frame import Frame
from streamlens.graph.run.pipeline import Pipeline

CLIP = VIDEOS / "highway_720p30.mp4"
BATCHES = (1, 4, 8, 16, 32, 64)
IMGSZ = 640
#: random weights: keep the best twenty junk boxes a frame, so NMS and the tracker have work
JUNK = {"conf": 0.0001, "max_det": 20}
GPU_TESTS = ["tests/test_detect_ultralytics.py", "tests/test_live_source.py::test_frames_are_pinned_on_a_real_gpu"]


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def sh(command: str) -> str:
    try:
        return subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine() -> dict:
    import torch

    info = {"date": now(), **harness.machine(), "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "av": av.__version__, "numpy": np.__version__}
    try:
        import numba

        info["numba"] = numba.__version__
    except ImportError:
        pass
    import ultralytics

    info["ultralytics"] = ultralytics.__version__
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["driver"] = sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return info


def clip_frames(clip: Path, count: int) -> list[np.ndarray]:
    """`count` BGR frames spread over the clip."""
    with av.open(str(clip)) as container:
        total = container.streams.video[0].frames or 900
        step = max(1, total // count)
        images = [f.to_ndarray(format="bgr24") for i, f in enumerate(container.decode(video=0)) if i % step == 0]
    return images[:count]


def build_yolov8n(folder: Path) -> Path:
    import_ultralytics_offline()
    from ultralytics import YOLO

    pt = folder / "yolov8n.pt"
    YOLO("yolov8n.yaml").save(pt)
    return pt


def median_ms(run, reps: int, sync) -> float:
    run()
    sync()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        run()
        sync()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


# -- parts ----------------------------------------------------------------------------------------

def part_tests(deadline: Deadline) -> dict:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "-k", "cuda or gpu", *GPU_TESTS]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=max(30, deadline.left()))
    tail = [line for line in done.stdout.splitlines() if line.strip()][-12:]
    return {"command": shlex.join(command[2:]), "returncode": done.returncode, "tail": tail}


def synchronizer(device: str):
    import torch

    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def part_transfer(device: str, reps: int) -> dict:
    import torch

    batch = torch.from_numpy(np.random.default_rng(0).integers(0, 255, (8, IMGSZ, IMGSZ, 3), np.uint8))
    pinned = batch.pin_memory() if device.startswith("cuda") else batch
    sync = synchronizer(device)
    mb = batch.numel() / 1e6
    pageable_ms = median_ms(lambda: batch.to(device), reps, sync)
    pinned_ms = median_ms(lambda: pinned.to(device, non_blocking=True), reps, sync)
    return {"megabytes": round(mb, 2), "pageable_ms": round(pageable_ms, 3), "pinned_ms": round(pinned_ms, 3),
            "pageable_gb_s": round(mb / pageable_ms, 1), "pinned_gb_s": round(mb / pinned_ms, 1)}


def part_detector(pt: Path, images: list[np.ndarray], device: str, batches: list[int], reps: int,
                  deadline: Deadline) -> dict:
    import torch

    sync = synchronizer(device)
    frames = [Frame("hw", i, None, 0.0, image) for i, image in enumerate(images)]
    out: dict = {"rows": []}
    for half in (False, True) if device.startswith("cuda") else (False,):
        detector = UltralyticsDetector(pt, imgsz=IMGSZ, device=device, half=half, max_batch=max(batches))
        started = time.perf_counter()
        prepared = [detector.prepare_input(f) for f in frames]
        out["letterbox_ms_per_frame"] = round((time.perf_counter() - started) * 1000 / len(frames), 3)
        for batch in batches:
            if deadline.left() < 60:
                out["stopped"] = "deadline"
                return out
            chunk = [prepared[i % len(prepared)] for i in range(batch)]
            on_gpu = detector._to_device(chunk)
            with torch.inference_mode():
                model_ms = median_ms(lambda: detector.backend(detector._model_input(on_gpu)), reps, sync)
            shots = [frames[i % len(frames)] for i in range(batch)]

            def detect():
                for f, p in zip(shots, chunk):
                    f.prepared = p
                detector.detect(shots)

            detect_ms = median_ms(detect, reps, sync)
            staged = [type(p)(p.data.numpy() if hasattr(p.data, "numpy") else p.data, p.geometry) for p in chunk]

            def detect_staged():
                for f, p in zip(shots, staged):
                    f.prepared = p
                detector.detect(shots)

            staged_ms = median_ms(detect_staged, reps, sync)
            out["rows"].append({"precision": "fp16" if half else "fp32", "batch": batch,
                                "model_ms": round(model_ms, 3), "detect_ms": round(detect_ms, 3),
                                "staged_ms": round(staged_ms, 3),
                                "model_fps": round(batch * 1000 / model_ms, 1),
                                "detect_fps": round(batch * 1000 / detect_ms, 1),
                                "staged_fps": round(batch * 1000 / staged_ms, 1)})
            print("  ", out["rows"][-1], flush=True)
        detector.close()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def pipeline_fps(clip: Path, pt: Path, device: str, keyframes: dict, tracker, mode: str) -> dict:
    cfg = parse_pipeline({"sources": [{"name": "hw", "uri": str(clip)}],
                          "detector": {"backend": "ultralytics", "model": str(pt), "imgsz": IMGSZ, "device": device,
                                       "half": device.startswith("cuda"), **JUNK},
                          "keyframes": keyframes, "tracker": tracker, "runtime": {"mode": mode}},
                         Path(tempfile.gettempdir()) / "gpu.yaml")
    started = time.perf_counter()
    report = Pipeline(cfg).run()
    wall = time.perf_counter() - started
    if report.status != "done":
        raise RuntimeError(f"pipeline ended {report.status}: {report.error}")
    frames = sum(s.frames for s in report.streams)
    keys = sum(s.keyframes for s in report.streams)
    return {"frames": frames, "keyframes": keys, "seconds": round(wall, 2), "fps": round(frames / wall, 1)}


def part_pipelines(clip: Path, pt: Path, device: str, baseline_frames: int) -> dict:
    from streamlens.bench.baseline import run_baseline

    from streamlens.track import kernels

    kernels.warm_up()  # numba's first compile (cached after) stays out of the timings
    out = {"every_frame": pipeline_fps(clip, pt, device, {"interval": 1}, "none", "bulk")}
    print("  every frame", out["every_frame"], flush=True)
    out["keyframes_mv"] = pipeline_fps(clip, pt, device, {"interval": 5}, {"motion": "mv"}, "realtime")
    print("  keyframes + mv", out["keyframes_mv"], flush=True)
    out["ultralytics_track"] = run_baseline(str(pt), str(clip), IMGSZ, baseline_frames, 30.0)
    print("  ultralytics track", out["ultralytics_track"], flush=True)
    return out


LIVE_YAML = """\
sources:
  - {{name: hw, uri: {clip}, live: true}}
detector:
  backend: ultralytics
  model: {pt}
  imgsz: {imgsz}
  device: {device}
  half: {half}
  conf: {conf}
  max_det: {max_det}
  max_batch: 8
keyframes: {{interval: 5}}
tracker: {{motion: mv}}
sinks:
  - {{type: zmq, endpoint: "tcp://127.0.0.1:5555"}}
"""


def part_live(clip: Path, pt: Path, device: str, streams: str, out_json: Path, deadline: Deadline) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="gpu_live_"))
    yaml_file = folder / "gpu_live.yaml"
    yaml_file.write_text(LIVE_YAML.format(clip=clip, pt=pt, imgsz=IMGSZ, device=device,
                                             half=str(device.startswith("cuda")).lower(), **JUNK))
    command = [sys.executable, "-m", "streamlens", "bench", str(yaml_file), "--streams", streams,
               "--seconds", "8", "--warmup", "2", "--min-kept", "0.97", "--no-baseline", "--decode-seconds", "5",
               "--out", str(out_json)]
    log = out_json.with_suffix(".log")
    with open(log, "w") as sink:
        done = subprocess.run(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, text=True,
                              timeout=max(30, deadline.left() - 10))
    result = json.loads(out_json.read_text()) if out_json.exists() else {}
    return {"command": shlex.join(["streamlens", *command[3:]]), "returncode": done.returncode,
            "result": result, "log_tail": log.read_text().splitlines()[-25:]}


# -- report ---------------------------------------------------------------------------------------

def report(results: dict, argv: list[str]) -> str:
    m = results.get("machine", {})
    # the CPU in harness's words; an older JSON has its cores and model name only
    cpu = machine_line(m) if "cores" in m else f"{m.get('cpu_cores')} CPU cores ({m.get('cpu', '?')})"
    lines = [f"# GPU check and benchmark ({m.get('date', '?')})", "",
             f"Command: `{command_line([sys.argv[0], *argv])}`  ",
             f"Machine: {m.get('gpu', 'no GPU')} ({m.get('gpu_memory_gib', '?')} GiB, driver {m.get('driver', '?')}), "
             f"{cpu}; Python {m.get('python')}, torch {m.get('torch')} "
             f"(CUDA {m.get('cuda')}, cuDNN {m.get('cudnn')}), ultralytics {m.get('ultralytics')}, PyAV {m.get('av')}.  ",
             "Model: YOLOv8n built from yolov8n.yaml (random weights), 640x640; frames from highway_720p30.mp4.", ""]
    tests = results.get("tests")
    if tests:
        lines += ["## CUDA tests", "", f"`python -m {tests['command']}`: exit {tests['returncode']}", "", "```",
                  *tests["tail"], "```", ""]
    t = results.get("transfer")
    if t:
        lines += ["## Host to device, one batch of 8 letterboxed frames", "",
                  "| memory | ms | GB/s |", "|---|---|---|",
                  f"| pageable (`tensor.to('cuda')`) | {t['pageable_ms']} | {t['pageable_gb_s']} |",
                  f"| pinned, non-blocking (streamlens) | {t['pinned_ms']} | {t['pinned_gb_s']} |",
                  f"| pinned / pageable | {t['pageable_ms'] / t['pinned_ms']:.2f}x faster | |", ""]
    d = results.get("detector")
    if d and d.get("rows"):
        lines += ["## Detector: ms per batch and frames per second", "",
                  f"Letterboxing one 1280x720 frame on the CPU (done on the decode threads): "
                  f"{d.get('letterbox_ms_per_frame')} ms.", "",
                  "| precision | batch | model alone: ms (frames/s) | detect(), pinned inputs: ms (frames/s) "
                  "| detect(), numpy inputs staged: ms (frames/s) |", "|---|---|---|---|---|"]
        lines += [f"| {r['precision']} | {r['batch']} | {r['model_ms']} ({r['model_fps']}) | "
                  f"{r['detect_ms']} ({r['detect_fps']}) | {r.get('staged_ms')} ({r.get('staged_fps')}) |"
                  for r in d["rows"]]
        lines += [""]
    p = results.get("pipelines")
    if p:
        lines += ["## Whole clip as fast as it goes (897 frames, FP16)", "", "| what | frames/s | keyframes |",
                  "|---|---|---|"]
        for key, name in (("every_frame", "streamlens, detect every frame (batched)"),
                          ("keyframes_mv", "streamlens, keyframes every 5th frame + mv tracker"),
                          ("ultralytics_track", "Ultralytics `model.track(stream=True)`, every frame")):
            if key in p:
                lines.append(f"| {name} | {p[key]['fps']} | {p[key].get('keyframes', 'every frame')} |")
        lines += [""]
    live = results.get("live")
    if live:
        r = live.get("result", {})
        lines += ["## Live streams (`streamlens bench`)", "", f"`{live['command']}`: exit {live['returncode']}", ""]
        if r:
            answers, decode = r.get("answers", {}), r.get("decode_limit", {})
            lines += [f"Largest K within the target (p95 <= {r.get('budget_ms')} ms, every stream keeping "
                      f"{r.get('min_kept')}): **{answers.get('max_streams')}**; "
                      f"decode-only limit {decode.get('streams')} streams ({decode.get('workers')} processes).", ""]
        lines += ["```", *live["log_tail"], "```", ""]
    for key, error in results.get("errors", {}).items():
        lines += [f"Part `{key}` failed: {error}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clip", type=Path, default=CLIP)
    parser.add_argument("--out", type=Path, default=RESULTS / "gpu.md")
    parser.add_argument("--json", type=Path, default=None, help="all figures as JSON (default: --out as .json)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--deadline-s", type=float, default=420.0)
    parser.add_argument("--live-streams", default="8-64", help="streamlens bench --streams ('' skips it)")
    parser.add_argument("--parts", default="tests,transfer,detector,pipelines,live")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--baseline-frames", type=int, default=300)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script itself, on any machine")
    args = parser.parse_args(argv)
    deadline = Deadline(args.deadline_s)
    args.clip = args.clip.resolve()
    json_file = args.json or args.out.with_suffix(".json")
    parts = args.parts.split(",")

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: tools/bench_gpu.py needs an NVIDIA GPU", file=sys.stderr)
        return 2
    results: dict = {"machine": machine(), "errors": {}}
    print(results["machine"], flush=True)
    folder = Path(tempfile.mkdtemp(prefix="bench_gpu_"))
    pt = build_yolov8n(folder)
    images = clip_frames(args.clip, 64)

    def save():
        json_file.write_text(json.dumps(results, indent=1))
        args.out.write_text(report(results, sys.argv[1:] if argv is None else argv))

    batches = [int(b) for b in args.batches.split(",")]
    steps = {"tests": lambda: part_tests(deadline), "transfer": lambda: part_transfer(args.device, args.reps),
             "detector": lambda: part_detector(pt, images, args.device, batches, args.reps, deadline),
             "pipelines": lambda: part_pipelines(args.clip, pt, args.device, args.baseline_frames),
             "live": lambda: part_live(args.clip, pt, args.device, args.live_streams,
                                       json_file.with_name("gpu_live.json"), deadline)}
    for name in parts:
        if name == "live" and not args.live_streams:
            continue
        if deadline.left() < 45:
            results["errors"][name] = "not run: the deadline was near"
            continue
        print(f"== {name} ({deadline.left():.0f} s left)", flush=True)
        try:
            results[name] = steps[name]()
        except Exception as e:  # noqa: BLE001 - a failing part is reported; the others still run
            results["errors"][name] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        save()
    print(report(results, sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
