#!/usr/bin/env python3
"""Masks for tracked objects (`segment:`): what SAM's two halves cost on this machine, and whether the
embedding cache spares the encoder on a looping clip's second lap. Writes tools/results/segment.md.

    PYTHONPATH=. python tools/bench_segment.py [--rounds 7] [--out tools/results/segment.md]

- Encoder and decoder: Ultralytics' MobileSAM, built here with random weights (the architecture and
  so the arithmetic of the real checkpoint; no download), on a 1280x720 frame of the shared highway
  clip (the shipped sample where the shared data is absent): the encoder's ms per frame and the
  decoder's ms per object for one call of 1, 4 and 16 boxes (one decoder batch per keyframe), each the
  median of `--rounds` rounds, rounds alternating so that the machine's load falls on all alike.
- Cache: a pipeline looping a clip for two laps (`loop: true`), as a file (as fast as it decodes,
  keyframes every 3rd frame exactly) and, for YOLOX-Nano, also paced at its frame rate as a camera
  would be (`live: true`: keyframes chosen by the live schedule), with the tiny SAM-format ONNX pair of the
  tests (streamlens/testing/sam_models.py: the cache does not depend on the model): per lap, the keyframes
  segmented and the encoder's runs (on the second lap, which should be none), jobs dropped, the share
  of tracked objects published with a mask, and the F1 of the boxes published against the same
  detector run on every frame of the clip (IoU 0.5, streamlens/bench/accuracy.py). Three detectors:
  the tests' cell detector (streamlens/testing/cell_detector.py: boxes a function of the pixels alone) on the
  shipped sample; YOLOX-Nano on the shared highway clip (skipped where the shared data is absent);
  the motion detector on the sample (its background model learns through the first lap).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from streamlens.bench.harness import REPO, RESULTS, VIDEOS, YOLOX_NANO, command_line, header, write_page

HIGHWAY = VIDEOS / "highway_720p30.mp4"
YOLOX = YOLOX_NANO / "yolox_nano.onnx"
SAMPLE = REPO / "samples" / "traffic.mp4"


def a_frame() -> tuple[np.ndarray, str]:
    import av

    path = HIGHWAY if HIGHWAY.is_file() else SAMPLE
    with av.open(str(path)) as container:
        for k, frame in enumerate(container.decode(video=0)):
            if k == 60:
                return frame.to_ndarray(format="bgr24"), path.name
    raise SystemExit(f"{path}: fewer than 61 frames")


def boxes_for(n: int, width: int, height: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    x = rng.uniform(0, width - 160, n)
    y = rng.uniform(0, height - 120, n)
    return np.stack([x, y, x + rng.uniform(40, 160, n), y + rng.uniform(30, 120, n)], 1)


def compute(rounds: int, folder: Path) -> dict:
    from streamlens.segment.model import load_sam
    from streamlens.testing.sam_models import build_random_mobile_sam

    sam = load_sam(build_random_mobile_sam(folder), device="cpu")
    image, clip = a_frame()
    height, width = image.shape[:2]
    arrays = sam.encode(image)  # warm-up
    counts = (1, 4, 16)
    for n in counts:
        sam.decode(arrays, boxes_for(n, width, height), width, height)
    encode_ms, decode_ms = [], {n: [] for n in counts}
    for _ in range(rounds):
        started = time.perf_counter()
        arrays = sam.encode(image)
        encode_ms.append((time.perf_counter() - started) * 1000)
        for n in counts:
            started = time.perf_counter()
            sam.decode(arrays, boxes_for(n, width, height), width, height)
            decode_ms[n].append((time.perf_counter() - started) * 1000 / n)
    return {"clip": clip, "size": f"{width}x{height}", "encode_ms": encode_ms, "decode_ms": decode_ms}


def cache_runs(folder: Path) -> list[tuple[str, Path, str, float, bool]]:
    """(name, clip, detector section, segment.every_s, live) of each cache run; YOLOX-Nano's only
    where the shared data is."""
    from streamlens.testing.cell_detector import build_cell_detector

    cells = build_cell_detector(folder)
    runs = [("cell detector (tests), sample", SAMPLE, f"{{backend: onnx, model: {cells}, resize: resize, conf: 0.4}}",
             1.0, False)]
    if YOLOX.is_file() and HIGHWAY.is_file():
        yolox = f"{{backend: onnx, model: {YOLOX}, imgsz: 416}}"
        runs += [("YOLOX-Nano 416, highway 720p", HIGHWAY, yolox, 2.0, False),
                 ("YOLOX-Nano 416, highway 720p", HIGHWAY, yolox, 2.0, True)]
    runs.append(("motion detector, sample", SAMPLE, "{backend: motion}", 1.0, False))
    return runs


def clip_frames(clip: Path):
    import av

    from streamlens.frame import Frame

    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        for k, frame in enumerate(container.decode(stream)):
            yield Frame("ref", k, float(frame.pts * stream.time_base), 0.0, frame.to_ndarray(format="bgr24"))


def cache_laps(folder: Path, clip: Path, detector: str, every_s: float, sam: tuple[Path, Path],
               live: bool = False) -> dict:
    """Two laps of `clip` (see the module's docstring); the figures of each."""
    import streamlens
    from streamlens.bench.accuracy import detections_f1
    from streamlens.config import load_pipeline
    from streamlens.detect import build_detector
    from streamlens.frame import FrameResult

    encoder, decoder = sam
    path = folder / "laps.yaml"
    path.write_text(f"""
sources: [{{uri: {clip}, loop: true, live: {str(live).lower()}}}]
detector: {detector}
keyframes: {{interval: 3}}
segment: {{model: {encoder}, decoder: {decoder}, every_s: {every_s}, cache_items: 1000}}
sinks: []
""")
    det = build_detector(load_pipeline(path).detector)
    reference = [det.detect([frame])[0] for frame in clip_frames(clip)]  # the detector on every frame
    det.close()
    n = len(reference)
    shown: dict[int, object] = {}
    with streamlens.Pipeline.from_yaml(path) as pipe:
        for item in pipe.results():  # until the worker (in order) answered a job of the third lap
            if isinstance(item, FrameResult) and item.frame.index < 2 * n:
                shown[item.frame.index] = item.detections
            answered = pipe._stages.segment.segmented_frames
            if (answered and answered[-1][1] >= 2 * n) or (isinstance(item, FrameResult) and item.frame.index >= 3 * n):
                break  # every job of two laps answered (or a third lap gave none to tell)
        jobs = list(pipe._stages.segment.segmented_frames)
        stats = pipe.segment_stats()
    first = {f for _, f, _ in jobs if f < n}
    laps = []
    for lap in (0, 1):
        mine = [(f - lap * n, e) for _, f, e in jobs if lap * n <= f < (lap + 1) * n]
        frames = [f for f in shown if lap * n <= f < (lap + 1) * n]
        tracked = sum(int((shown[f].tracker_id >= 0).sum()) for f in frames if shown[f].tracker_id is not None)
        masked = sum(sum(m is not None for m in shown[f].data.get("masks", [])) for f in frames)
        laps.append({"segmented": len(mine), "encoded": sum(e for _, e in mine),
                     "encoded_new": sum(e for f, e in mine if f not in first),
                     "masked": round(masked / tracked, 3) if tracked else None,
                     "frames": len(frames),
                     "f1": detections_f1([shown[f] for f in frames], [reference[f - lap * n] for f in frames])})
    return {"frames": n, "laps": laps, "dropped": stats["dropped"], "late": stats["late"]}


def gpu() -> str:
    """The GPU torch sees, or `no GPU`."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"


def median(values) -> float:
    return statistics.median(values)


def write(out: Path, rounds: int, made: dict, laps: list, command: str) -> None:
    enc = median(made["encode_ms"])
    lines = [
        header("Masks for tracked objects: SAM's encoder and decoder, and the embedding cache", command=command,
               more=[f"GPU: {gpu()}; load average (1 min) {os.getloadavg()[0]:.2f} at the end. Every figure is a "
                     f"median of {rounds} alternating rounds; the spread between min and max is the machine's load."]),
        "## Encoder and decoder (Ultralytics MobileSAM, random weights, CPU, torch's default threads)",
        "",
        f"One {made['size']} frame of `{made['clip']}`.",
        "",
        "| what | median | min | max |",
        "|---|---|---|---|",
        f"| encoder, ms per frame | {enc:.0f} | {min(made['encode_ms']):.0f} | {max(made['encode_ms']):.0f} |",
        f"| encoder calls per second (1000 / median) | {1000 / enc:.2f} | | |",
    ]
    for n, values in made["decode_ms"].items():
        lines.append(f"| decoder, ms per object, {n} box{'es' if n > 1 else ''} in one call | {median(values):.1f} | "
                     f"{min(values):.1f} | {max(values):.1f} |")
    per_object = median(made["decode_ms"][16])
    lines += [
        "",
        f"Per object in a call of 16 boxes the decoder cost {per_object / enc * 100:.1f}% of an encoder run "
        f"(about {enc / per_object:.0f}x cheaper); the spread between min and max is the machine's load. With "
        "`every_s: 2`, a stream whose tracks are all due on one keyframe costs one encoder run per 2 s plus the "
        f"decoder per object: at these medians the encoder alone keeps up with one such keyframe every "
        f"{enc / 1000:.1f} s on this machine, before any decoding or detection.",
        "",
        "## Cache: a looping clip's second lap",
        "",
        "Each clip looped twice (`loop: true`), keyframes every 3rd frame, the tests' tiny SAM-format ONNX pair (the "
        "cache keys the frame's pixels, whatever the model). *file*: as fast as it decodes, every 3rd frame a "
        "keyframe; *paced*: `live: true`, at its frame rate as a camera would be, keyframes chosen by the live "
        "schedule (by the detector's load, not by the file). Which keyframes the encoder runs on follows the clip's own time: the first keyframe of each "
        "`every_s` step of `pts`, and a new track's first keyframe (docs/masks.md). *Masked*: the share of the "
        "tracked objects published that carry a mask. F1: the boxes published against the same detector on "
        "every frame of the clip (IoU 0.5).",
        "",
        "| detector, clip | mode | every_s | lap | keyframes segmented | encoder runs | of them on keyframes lap 1 "
        "did not segment | masked | F1 of boxes | jobs dropped (the run) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, every_s, live, found in laps:
        for k, lap in enumerate(found["laps"]):
            runs = f"**{lap['encoded']}**" if k else str(lap["encoded"])
            lines.append(f"| {name} ({found['frames']} frames) | {'paced' if live else 'file'} | {every_s:g} | {k + 1} | "
                         f"{lap['segmented']} | {runs} | "
                         f"{lap['encoded_new'] if k else ''} | {lap['masked']} | {lap['f1']} | "
                         f"{found['dropped'] if k else ''} |")
    lines += [
        "",
        "In file mode, a detector whose boxes depend on the frame alone (any model) asks for the same frames on "
        "every lap, and the second lap encodes nothing. The motion detector has a memory of its own: its background "
        "model learns through the first lap (which starts with nothing learnt: no boxes on its first keyframes), so "
        "the second lap starts with objects the first did not yet show, and their first keyframes are new to the "
        "cache. Paced as a camera, the keyframes themselves are the live schedule's choice, which the detector's "
        "load moves from lap to lap, so new tracks are born on other keyframes and those are encoded; the "
        "keyframes of each `every_s` step that are the same frame on both laps are not.",
        "",
        "## Elsewhere, and not here",
        "",
        "- How many tracked objects one engine keeps masked at `every_s: 2` while 4 live 720p streams keep every "
        "frame with p95 <= 33 ms, with the boxes' F1 beside it: [segment_live.md](segment_live.md) "
        "(`python tools/experiments/bench_segment_live.py`).",
        "- Real MobileSAM weights (no download here): the times are the architecture's, the masks of random "
        "weights mean nothing.",
        "",
    ]
    write_page(out, "\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS / "segment.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        from streamlens.testing.sam_models import build_tiny_sam

        made = compute(args.rounds, Path(tmp))
        sam = build_tiny_sam(Path(tmp))
        laps = [(name, every_s, live, cache_laps(Path(tmp), clip, detector, every_s, sam, live))
                for name, clip, detector, every_s, live in cache_runs(Path(tmp))]
    write(args.out, args.rounds, made, laps, command_line())
    print(args.out.read_text())


if __name__ == "__main__":
    main()
