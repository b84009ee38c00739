"""Cheaper decoding (issue 27 point 2: decoding is half of a run's work at 8 live 720p streams,
tools/results/profile.md): what skipping the H.264/HEVC loop filter (FFmpeg's `skip_loop_filter`,
the deblocking pass) saves, and what it costs the detector.

For each shared clip: decoding with the loop filter and without it (PyAV, slice threads and the
motion vectors exported, as a run decodes), CPU ms per frame, passes alternating, median of
`--rounds`; then the pipeline's detector (`pipelines/highway_yolox.yaml`'s YOLOX-Nano section) on
every frame of both decodes, and the F1 of the boxes on the unfiltered pictures against those on
the filtered ones (IoU 0.5, class-aware, pooled over the frames): 1.0 is the same boxes.

Then, live: `pipelines/highway_yolox.yaml`'s settings at `--streams` live copies of the 720p clip,
without and with `sources[i].fast_decode`, in turns, the order reversed each round (`streamlens
bench`, `streamlens.bench.harness.bench_trial`), kept, p95 and F1 against detecting every frame of
the fully decoded clip. A one-off experiment (issue 27): it made tools/results/fast_decode.md.

    python tools/experiments/bench_fast_decode.py [--rounds 3] [--streams 8]   # writes tools/results/fast_decode.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import av

from streamlens.bench.accuracy import detections_f1
from streamlens.bench.harness import (RESULTS, VIDEOS, YOLOX_NANO, bench_cells, bench_medians, bench_trial, header,
                                      in_turns, load_average, need, shipped, write_page)
from streamlens.config import DetectorConfig
from streamlens.detect import build_detector
from streamlens.frame import Frame

VIDEO = VIDEOS / "highway_720p30.mp4"
MODEL = YOLOX_NANO
CLIPS = ["highway_320x240.avi", "highway_720p30.mp4", "highway_1080p30.mp4", "person_indoor_768x432.mp4",
         "road_topdown_640x360.avi", "street_night_1080p_8frames.mp4"]
MAX_FRAMES = 300


def decode(path: Path, skip: bool, keep: bool) -> tuple[float, list]:
    """CPU seconds a frame, and the frames as BGR (when `keep`)."""
    frames = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "SLICE"
        options = {"flags2": "+export_mvs"}
        if skip:
            options["skip_loop_filter"] = "all"
        stream.codec_context.options = options
        started, n = time.process_time(), 0
        for frame in container.decode(stream):
            n += 1
            if keep:
                frames.append(frame.to_ndarray(format="bgr24"))
            if n >= MAX_FRAMES:
                break
        return (time.process_time() - started) / max(n, 1), frames


def detector():
    """pipelines/highway_yolox.yaml's detector with the shared model (`harness.shipped`)."""
    return build_detector(DetectorConfig(**shipped("highway_yolox.yaml")["detector"]))


def boxes(model, images: list) -> list:
    out = []
    for i, image in enumerate(images):
        frame = Frame("s", i, i / 30, 0.0, image)
        out += model.detect([frame])
    return out


LIVE = """sources: [{{name: highway, uri: {video}, live: true{fast}}}]
detector: {{backend: onnx, model: {model}/yolox_nano.onnx, names: {model}/coco_classes.txt, conf: 0.3,
           resize: bucket, threads: 1, classes: [car, truck, bus, motorbike]}}
keyframes: {{interval: 5, adaptive: true, max_interval: 15}}
tracker: {{motion: mv}}
sinks: [{{type: zmq, endpoint: "tcp://127.0.0.1:5555"}}]
"""


def live_trials(args) -> str:
    """The live A/B: without and with `fast_decode`, in turns; the page's section."""
    import tempfile

    need(VIDEO)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        for name, fast in (("without", ""), ("with", ", fast_decode: true")):
            (folder / f"{name}.yaml").write_text(LIVE.format(video=VIDEO, model=MODEL, fast=fast))

        def trial(name: str, r: int) -> dict:
            load = load_average()
            found = bench_trial(folder / f"{name}.yaml", args.streams, args.seconds, folder / f"{name}-{r}.json")
            rows.append(f"| {r + 1} | {name} | {load:.2f} | {bench_cells(found)} |")
            print(rows[-1], flush=True)
            return found

        results = in_turns(["without", "with"], args.live_rounds, trial)
    return f"""
## Live: {args.streams} streams of `{VIDEO.name}`, without and with `fast_decode`

`streamlens bench PIPELINE --streams {args.streams} --seconds {args.seconds} --no-baseline --no-hold
--decode-seconds 0` on `pipelines/highway_yolox.yaml`'s settings, `with` adding `fast_decode: true`
to the source (every copy takes it), {args.live_rounds} rounds in turns (the order reversed each round).
F1 against YOLOX-Nano on every
frame of the fully decoded clip (median over the streams, worst in brackets).

| round | fast_decode | load | kept (worst) | p95 ms | F1 (worst) |
|---|---|---|---|---|---|
{chr(10).join(rows)}

Medians, {bench_medians(results)}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=8, help="live streams of the A/B trials (0: none)")
    parser.add_argument("--live-rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS / "fast_decode.md")
    args = parser.parse_args()
    model = detector()
    rows = []
    for name in CLIPS:
        path = VIDEOS / name
        if not path.is_file():
            print(f"{path} not found: skipped", file=sys.stderr)
            continue
        timed = in_turns([False, True], args.rounds, lambda skip, r: decode(path, skip, keep=False)[0])
        full, fast = (statistics.median(timed[s]) * 1000 for s in (False, True))
        f1 = detections_f1(boxes(model, decode(path, True, keep=True)[1]), boxes(model, decode(path, False, keep=True)[1]))
        rows.append(f"| {name} | {full:.2f} | {fast:.2f} | x{fast / full:.2f} | {f1:.3f} |")
        print(rows[-1], flush=True)
    model.close()
    live = live_trials(args) if args.streams else ""
    text = header("Decoding without the loop filter: what it saves, what it costs the detector",
                  more=[f"PyAV {av.__version__}; load average (1 min) {os.getloadavg()[0]:.2f} at the end"])
    text += f"""
Each clip's first {MAX_FRAMES} frames decoded as a run decodes them (slice threads, motion vectors
exported) with FFmpeg's loop filter and with `skip_loop_filter: all`: CPU ms a frame (process time,
median of {args.rounds} passes in turns, the order reversed each round); then YOLOX-Nano
(`pipelines/highway_yolox.yaml`'s detector) on every frame of both, and the F1 of the boxes on the
unfiltered pictures against those on the filtered ones (IoU 0.5, class-aware).

| clip | decode ms a frame | without the loop filter | ratio | F1 of the boxes against the filtered pictures' |
|---|---|---|---|---|
{chr(10).join(rows)}
{live}"""
    write_page(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
