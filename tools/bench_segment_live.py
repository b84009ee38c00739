"""Masks on live streams (issue 29's target): with `segment:` (MobileSAM, `every_s: 2`) beside K live
720p streams, do the streams still keep every frame within p95 <= 33 ms, and how many objects a
second get a fresh mask?

Two pipelines, `pipelines/highway_yolox.yaml`'s settings on the shared 720p clip, one without and one
with `segment: {model: mobile_sam.pt, every_s: 2, classes: [car, truck, bus, motorbike]}` (MobileSAM
built here with random weights: the real checkpoint's arithmetic, no download), run by
`streamlens bench --streams K` in turns (tools/bench_clips.py's `trial`). Masks a second: the masks
SAM's decoder made and the encoder's runs, from the mask stage's figures in the last `stats` message,
over the trial's whole run (warm-up included).

    python tools/bench_segment_live.py [--streams 4] [--rounds 2]    # writes tools/results/segment_live.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from bench_clips import MODEL, VIDEO, trial  # noqa: E402

PIPELINE = """sources: [{{name: highway, uri: {video}, live: true}}]
detector: {{backend: onnx, model: {model}/yolox_nano.onnx, names: {model}/coco_classes.txt, conf: 0.3,
           resize: bucket, threads: 1, classes: [car, truck, bus, motorbike]}}
keyframes: {{interval: 5, adaptive: true, max_interval: 15}}
tracker: {{motion: mv}}
{segment}
sinks: [{{type: zmq, endpoint: "tcp://127.0.0.1:5555"}}]
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "tools" / "results" / "segment_live.md")
    args = parser.parse_args()
    if not VIDEO.is_file():
        print(f"{VIDEO} not found: the shared clips live in ../shared/data", file=sys.stderr)
        return 2
    from tests.sam_models import build_random_mobile_sam

    rows, results = [], {"without": [], "with": []}
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        model = build_random_mobile_sam(folder)
        segment = f"segment: {{model: {model}, every_s: 2, classes: [car, truck, bus, motorbike]}}"
        for name, text in (("without", ""), ("with", segment)):
            (folder / f"{name}.yaml").write_text(PIPELINE.format(video=VIDEO, model=MODEL, segment=text))
        for r in range(args.rounds):
            for name in ("without", "with"):
                load = os.getloadavg()[0]
                out = folder / f"{name}-{r}.json"
                found = trial(folder / f"{name}.yaml", args.streams, args.seconds, out)
                bench = json.loads(out.read_text())
                figures = next((s["stats"].get("segment") for s in bench["trials"][0]["streams"].values()
                                if s.get("stats", {}).get("segment")), None)
                whole_s = bench["warmup_s"] + bench["seconds"]
                masks = f"{figures['decoded'] / whole_s:.2f} / {figures['encoded'] / whole_s:.2f}" if figures else "-"
                results[name].append(found)
                rows.append(f"| {r + 1} | {name} | {load:.2f} | {found['kept']:.1%} ({found['kept_min']:.1%}) | "
                            f"{found['p95']:.1f} | {found['f1']:.3f} ({found['f1_min']:.3f}) | {masks} |")
                print(rows[-1], flush=True)
    med = {name: {key: statistics.median(t[key] for t in trials) for key in ("kept", "kept_min", "p95", "f1")}
           for name, trials in results.items()}
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = f"""# Masks on live streams: MobileSAM beside {args.streams} live 720p streams

Command: `python tools/bench_segment_live.py --streams {args.streams} --rounds {args.rounds} --seconds {args.seconds}`
(each trial: `streamlens bench PIPELINE --streams {args.streams} --seconds {args.seconds} --no-baseline --no-hold
--decode-seconds 0`). Date: {now}. Machine: {platform.machine()}, {os.cpu_count()} cores, no GPU, Python
{platform.python_version()}; the load average (1 min) before each trial is in the table.

`pipelines/highway_yolox.yaml`'s settings on `{VIDEO.name}` (720p30, live, looping); `with` adds
`segment: {{model: mobile_sam.pt, every_s: 2, classes: [car, truck, bus, motorbike]}}` (MobileSAM with
random weights: the real model's cost). The two run in turns. F1: the boxes delivered against
detecting every frame (IoU 0.5), median over the streams (worst in brackets): masks never move boxes.
Masks a second: masks SAM's decoder made / encoder runs, a second, over the whole trial.

| round | masks | load | kept (worst) | p95 ms | F1 (worst) | masks / encoder runs a second |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Medians: without {med['without']['kept']:.1%} kept (worst {med['without']['kept_min']:.1%}), p95
{med['without']['p95']:.1f} ms, F1 {med['without']['f1']:.3f}; with {med['with']['kept']:.1%} (worst
{med['with']['kept_min']:.1%}), p95 {med['with']['p95']:.1f} ms, F1 {med['with']['f1']:.3f}.
"""
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
