"""The bench's baseline: the same video through Ultralytics' own tracking loop, in a process of its own.

`YOLO(model).track(source=video, stream=True, imgsz=..., verbose=False)` is what a user of
Ultralytics writes to track objects in a video: it decodes with OpenCV, runs the detector on every
frame and Ultralytics' default tracker (BoT-SORT). The baseline times `--frames` frames of it and
gives the frames per second after the first 10 (model loading, first-call costs), and with it the
number of real-time streams it could carry: fps / the video's frame rate. It runs on the device
Ultralytics picks by itself (a CUDA GPU if there is one, else the CPU).

Ultralytics is imported through `import_ultralytics_offline()`, so it never reaches for the
network, installs nothing, and downloads no weights or fonts.

Example:
    $ python -m streamlens.bench.baseline yolov8n.pt samples/traffic.mp4 --imgsz 416 --frames 300
    BENCH-BASELINE {"fps": 9.1, "frames": 290, ...}
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

MARKER = "BENCH-BASELINE "
#: frames not timed: the model's first calls
SKIP = 10


class BaselineFailed(Exception):
    """The baseline could not run (Ultralytics missing, the model unreadable); one line."""


def measure(model: str, video: str, imgsz: int, frames: int) -> dict:
    """Time `model.track(stream=True)` over `frames` frames of `video` (in this process)."""
    from ..detect.ultralytics_offline import import_ultralytics_offline

    import_ultralytics_offline()
    from ultralytics import YOLO

    loaded = time.perf_counter()
    yolo = YOLO(model)
    count, timed_from = 0, None
    for _ in yolo.track(source=video, stream=True, imgsz=imgsz, verbose=False):
        count += 1
        if count == SKIP:
            timed_from = time.perf_counter()
        if count >= frames:
            break
    ended = time.perf_counter()
    timed = count - SKIP
    if timed_from is None or timed <= 0:
        raise BaselineFailed(f"Ultralytics tracked only {count} frame(s) of {video}; at least {SKIP + 1} are needed")
    # the predictor's own device: Ultralytics runs a copy of `yolo.model`, which stays where it was loaded
    device = getattr(getattr(yolo, "predictor", None), "device", None)
    device = str(device) if device is not None else None
    return {"frames": timed, "seconds": round(ended - timed_from, 3), "fps": round(timed / (ended - timed_from), 2),
            "total_s": round(ended - loaded, 2), "imgsz": imgsz, "device": device, "tracker": "botsort.yaml",
            "call": "YOLO(model).track(source=video, stream=True, imgsz=imgsz, verbose=False)"}


def run_baseline(model: str, video: str, imgsz: int, frames: int, video_fps: float, debug: bool = False,
                 timeout_s: float = 900.0) -> dict:
    """Run `measure` in a fresh process (so its threads and memory do not touch the bench); adds
    `streams` (fps / video_fps). Raises `BaselineFailed` with the child's last error line."""
    command = [sys.executable, "-m", "streamlens.bench.baseline", str(model), str(video), "--imgsz", str(imgsz),
               "--frames", str(frames)] + (["--debug"] if debug else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise BaselineFailed(f"the Ultralytics baseline did not end within {timeout_s:.0f} s") from None
    result = None
    for line in done.stdout.splitlines():
        if line.startswith(MARKER):
            result = json.loads(line[len(MARKER):])
    if done.returncode != 0 or result is None:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise BaselineFailed(lines[-1].strip() if lines else f"the baseline exited with code {done.returncode}")
    result["model"] = str(model)
    result["streams"] = round(result["fps"] / video_fps, 2) if video_fps else None
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streamlens.bench.baseline",
                                description="Time Ultralytics' own model.track(stream=True) on a video.")
    p.add_argument("model", help="a model file Ultralytics loads (.pt or an export)")
    p.add_argument("video", help="the video file")
    p.add_argument("--imgsz", type=int, default=416, help="inference size (default 416)")
    p.add_argument("--frames", type=int, default=300, help="frames to track (default 300)")
    p.add_argument("--debug", action="store_true", help="tracebacks")
    args = p.parse_args(argv)
    try:
        result = measure(args.model, args.video, args.imgsz, args.frames)
    except ModuleNotFoundError as e:
        if args.debug:
            raise
        print(f"the Ultralytics baseline needs the {e.name} package (pip install 'streamlens[ultralytics]')",
              file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - one line unless --debug
        if args.debug:
            raise
        print(f"the Ultralytics baseline failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(MARKER + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
