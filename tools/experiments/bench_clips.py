"""What recording clips around events costs the engine (issue 28's target: nothing measurable at
K=6, side by side, with F1 beside it).

Two pipelines, `pipelines/highway_yolox.yaml`'s settings with a counting line across the road
(tools/bench_counting.py's), one without and one with `analytics.clips` for every crossing
(`pre_s: 5, post_s: 5`), run by `streamlens bench --streams K` in turns (the order reversed each round:
without, with; with, without; ...), so both see the same machine; each trial's kept share, p95 and
F1 from the bench's JSON, the clips written counted. Medians and the paired ratio are reported; the
machine's load average is read before each trial. A one-off experiment: it made
tools/results/clips.md.

    python tools/experiments/bench_clips.py        # K=6, 3 rounds: writes tools/results/clips.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from streamlens.bench.harness import (RESULTS, VIDEOS, YOLOX_NANO, bench_cells, bench_medians, bench_trial, header,
                                      in_turns, load_average, need, write_page)

VIDEO = VIDEOS / "highway_720p30.mp4"
MODEL = YOLOX_NANO

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS / "clips.md")
    args = parser.parse_args()
    need(VIDEO, MODEL)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        clips = folder / "clips"
        files = {"without": "", "with": f"  clips: {{events: [line_cross], pre_s: 5, post_s: 5, path: {clips}}}"}
        for name, text in files.items():
            (folder / f"{name}.yaml").write_text(PIPELINE.format(video=VIDEO, model=MODEL, clips=text))
        counted = [0]

        def trial(name: str, r: int) -> dict:
            load = load_average()
            found = bench_trial(folder / f"{name}.yaml", args.streams, args.seconds, folder / f"{name}-{r}.json")
            written = len(list(clips.rglob("*.mp4"))) if clips.exists() else 0
            new, counted[0] = written - counted[0], written
            rows.append(f"| {r + 1} | {name} | {load:.2f} | {bench_cells(found)} | {new if name == 'with' else '-'} |")
            print(rows[-1], flush=True)
            return found

        results = in_turns(["without", "with"], args.rounds, trial)
    p95_ratio = statistics.median(w["p95"] / o["p95"] for o, w in zip(results["without"], results["with"]))
    text = header("Clips around events: what recording costs the engine") + f"""
Each trial: `streamlens bench PIPELINE --streams {args.streams} --seconds {args.seconds} --no-baseline --no-hold
--decode-seconds 0`; the load average (1 min) before each trial is in the table.

`pipelines/highway_yolox.yaml`'s settings on `{VIDEO.name}` (720p30, live, looping) with a counting
line across the road; `with` adds `analytics.clips: {{events: [line_cross], pre_s: 5, post_s: 5}}`.
The two run in turns, the order reversed each round.
F1: the boxes delivered against detecting every frame (IoU 0.5), median over
the streams (worst in brackets); kept: frames delivered of those the streams had (worst stream).

| round | clips | load | kept (worst) | p95 ms | F1 (worst) | clips written |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Medians, {bench_medians(results)} p95 with clips over without, paired by round, median: x{p95_ratio:.2f}.
"""
    write_page(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
