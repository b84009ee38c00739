"""Masks on live streams (issue 29's target): with `segment:` (MobileSAM, `every_s: 2`) beside K live
720p streams, do the streams still keep every frame within p95 <= 33 ms, and how many objects a
second get a fresh mask?

Two pipelines, `pipelines/highway_yolox.yaml`'s settings on the shared 720p clip, one without and one
with `segment: {model: mobile_sam.pt, every_s: 2, classes: [car, truck, bus, motorbike]}` (MobileSAM
built here with random weights: the real checkpoint's arithmetic, no download), run by
`streamlens bench --streams K` in turns, the order reversed each round (`streamlens.bench.harness`'s
`bench_trial` and `in_turns`). Masks a second: the masks SAM's decoder made and the encoder's runs,
from the mask stage's figures in the last `stats` message, over the trial's whole run (warm-up
included). A one-off experiment: it made tools/results/segment_live.md.

    python tools/experiments/bench_segment_live.py [--streams 4] [--rounds 2]   # writes tools/results/segment_live.md
"""

from __future__ import annotations

import argparse
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
{segment}
sinks: [{{type: zmq, endpoint: "tcp://127.0.0.1:5555"}}]
"""


def row(r: int, name: str, load: float, found: dict) -> str:
    """A trial's row, with the masks a second from the mask stage's figures in its last `stats` message."""
    bench = found["bench"]
    made = next((s["stats"].get("segment") for s in bench["trials"][0]["streams"].values()
                 if s.get("stats", {}).get("segment")), None)
    whole_s = bench["warmup_s"] + bench["seconds"]
    masks = f"{made['decoded'] / whole_s:.2f} / {made['encoded'] / whole_s:.2f}" if made else "-"
    return f"| {r} | {name} | {load:.2f} | {bench_cells(found)} | {masks} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS / "segment_live.md")
    args = parser.parse_args()
    need(VIDEO, MODEL)
    import torch

    from streamlens.testing.sam_models import build_random_mobile_sam

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        model = build_random_mobile_sam(folder)
        segment = f"segment: {{model: {model}, every_s: 2, classes: [car, truck, bus, motorbike]}}"
        for name, text in (("without", ""), ("with", segment)):
            (folder / f"{name}.yaml").write_text(PIPELINE.format(video=VIDEO, model=MODEL, segment=text))

        def trial(name: str, r: int) -> dict:
            load = load_average()
            found = bench_trial(folder / f"{name}.yaml", args.streams, args.seconds, folder / f"{name}-{r}.json")
            rows.append(row(r + 1, name, load, found))
            print(rows[-1], flush=True)
            return found

        results = in_turns(["without", "with"], args.rounds, trial)
    gpu = "torch sees a CUDA GPU" if torch.cuda.is_available() else "no GPU"
    text = header(f"Masks on live streams: MobileSAM beside {args.streams} live 720p streams", more=[f"GPU: {gpu}"])
    text += f"""
Each trial: `streamlens bench PIPELINE --streams {args.streams} --seconds {args.seconds} --no-baseline --no-hold
--decode-seconds 0`; the load average (1 min) before each trial is in the table.

`pipelines/highway_yolox.yaml`'s settings on `{VIDEO.name}` (720p30, live, looping); `with` adds
`segment: {{model: mobile_sam.pt, every_s: 2, classes: [car, truck, bus, motorbike]}}` (MobileSAM with
random weights: the real model's cost). The two run in turns, the order reversed each round.
F1: the boxes delivered against
detecting every frame (IoU 0.5), median over the streams (worst in brackets): masks never move boxes.
Masks a second: masks SAM's decoder made / encoder runs, a second, over the whole trial.

| round | masks | load | kept (worst) | p95 ms | F1 (worst) | masks / encoder runs a second |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Medians, {bench_medians(results)}
"""
    write_page(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
