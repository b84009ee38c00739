"""What recording clips around events costs the engine (issue 28's target: nothing measurable at
K=6, side by side, with F1 beside it).

Two pipelines, `pipelines/highway_yolox.yaml`'s settings with a counting line across the road
(tools/bench_counting.py's), one without and one with `analytics.clips` for every crossing
(`pre_s: 5, post_s: 5`), run by `streamlens bench --streams K` in turns (without, with, without,
...), so both see the same machine; each trial's kept share, p95 and F1 from the bench's JSON, the
clips written counted. Medians and the paired ratio are reported; the machine's load average is
read before each trial.

    python tools/bench_clips.py                    # K=6, 3 rounds: writes tools/results/clips.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
VIDEO = DATA / "video" / "highway_720p30.mp4"
MODEL = DATA / "models" / "yolox_nano"

PIPELINE = """sources: [{{name: highway, uri: {video}, live: true}}]
detector: {{backend: onnx, model: {model}/yolox_nano.onnx, names: {model}/coco_classes.txt, conf: 0.3,
           resize: bucket, threads: 1, classes: [car, truck, bus, motorbike]}}
keyframes: {{interval: 5, adaptive: true, max_interval: 15}}
tracker: {{motion: mv}}
analytics:
  lines: [{{name: across, points: [[211, 0], [1280, 720]]}}]
{clips}
sinks: [{{type: zmq, endpoint: "tcp://127.0.0.1:5555"}}]
"""


def trial(pipeline: Path, k: int, seconds: int, out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "streamlens", "bench", str(pipeline), "--streams", str(k), "--seconds",
                    str(seconds), "--no-baseline", "--no-hold", "--decode-seconds", "0", "--out", str(out)],
                   check=True, capture_output=True, text=True)
    found = json.loads(out.read_text())["trials"][0]
    f1 = [s["accuracy"]["f1"] for s in found["streams"].values() if s.get("accuracy")]
    return {"kept": found["kept"], "kept_min": found["kept_min"], "p95": found["latency_ms"]["p95"],
            "f1": statistics.median(f1) if f1 else None, "f1_min": min(f1) if f1 else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "tools" / "results" / "clips.md")
    args = parser.parse_args()
    if not VIDEO.is_file():
        print(f"{VIDEO} not found: the shared clips live in ../shared/data", file=sys.stderr)
        return 2
    rows, results = [], {"without": [], "with": []}
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        clips = folder / "clips"
        files = {"without": "", "with": f"  clips: {{events: [line_cross], pre_s: 5, post_s: 5, path: {clips}}}"}
        for name, text in files.items():
            (folder / f"{name}.yaml").write_text(PIPELINE.format(video=VIDEO, model=MODEL, clips=text))
        for r in range(args.rounds):
            for name in ("without", "with"):
                load = os.getloadavg()[0]
                before = len(list(clips.rglob("*.mp4"))) if clips.exists() else 0
                found = trial(folder / f"{name}.yaml", args.streams, args.seconds, folder / f"{name}-{r}.json")
                written = (len(list(clips.rglob("*.mp4"))) if clips.exists() else 0) - before
                results[name].append(found)
                rows.append(f"| {r + 1} | {name} | {load:.2f} | {found['kept']:.1%} ({found['kept_min']:.1%}) | "
                            f"{found['p95']:.1f} | {found['f1']:.3f} ({found['f1_min']:.3f}) | "
                            f"{written if name == 'with' else '-'} |")
                print(rows[-1], flush=True)
    med = {name: {key: statistics.median(t[key] for t in trials) for key in ("kept", "kept_min", "p95", "f1")}
           for name, trials in results.items()}
    p95_ratio = statistics.median(w["p95"] / o["p95"] for o, w in zip(results["without"], results["with"]))
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = f"""# Clips around events: what recording costs the engine

Command: `python tools/bench_clips.py --streams {args.streams} --rounds {args.rounds} --seconds {args.seconds}`
(each trial: `streamlens bench PIPELINE --streams {args.streams} --seconds {args.seconds} --no-baseline --no-hold
--decode-seconds 0`). Date: {now}. Machine: {platform.machine()}, {os.cpu_count()} cores, Python
{platform.python_version()}; the load average (1 min) before each trial is in the table.

`pipelines/highway_yolox.yaml`'s settings on `{VIDEO.name}` (720p30, live, looping) with a counting
line across the road; `with` adds `analytics.clips: {{events: [line_cross], pre_s: 5, post_s: 5}}`.
The two run in turns. F1: the boxes delivered against detecting every frame (IoU 0.5), median over
the streams (worst in brackets); kept: frames delivered of those the streams had (worst stream).

| round | clips | load | kept (worst) | p95 ms | F1 (worst) | clips written |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Medians: without {med['without']['kept']:.1%} kept (worst {med['without']['kept_min']:.1%}), p95
{med['without']['p95']:.1f} ms, F1 {med['without']['f1']:.3f}; with {med['with']['kept']:.1%} (worst
{med['with']['kept_min']:.1%}), p95 {med['with']['p95']:.1f} ms, F1 {med['with']['f1']:.3f}. p95 with
clips over without, paired by round, median: x{p95_ratio:.2f}.
"""
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
