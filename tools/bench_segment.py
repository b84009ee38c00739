#!/usr/bin/env python3
"""Masks for tracked objects (`segment:`): what a user gets, and what it costs. Writes
tools/results/segment.md (the encoder side by side, a file read as a file, the cache) and
tools/results/segment_live.md (masks on live cameras).

    nice -n 15 python tools/bench_segment.py [--rounds 5] [--seconds 30] [--only encoders,file,live,laps]

- Encoders: Ultralytics' MobileSAM, built here with random weights (the real checkpoint's arithmetic;
  no download), its image encoder run by torch (today's path), and exported to ONNX and run by
  onnxruntime (fp32) and OpenVINO (fp32, bf16 where the CPU has it), each on 2 threads (and
  OpenVINO bf16 on 1, as with two engines on 2 cores): ms per 1024-pixel encode of a 1280x720 frame
  of the shared highway clip (median of `--rounds` rounds, the arms alternating), and the masks'
  agreement with torch's fp32 ones (mask IoU, each box YOLOX-Nano found on 4 frames of the clip).
- File: the highway clip read as a file (`max_fps: 10`, YOLOX-Nano 416 every 5th frame, the `mv`
  tracker, `segment: {every_s: 2}`, the encoder's default runtime): the share of the objects of
  tracks older than `every_s` that carry a mask, the masks' figures and the wall time, beside the
  same run without `segment:`.
- Live: 1, 2 and 4 cameras of the highway clip (720p30) and 2 of the indoor clip (10 fps), paced and
  looping (`live: true, loop: true`), YOLOX-Nano as `pipelines/highway_yolox.yaml` runs it,
  `segment: {every_s: 2}`: per stream, over `--seconds` after 8 s of warm-up, the share of tracked
  object-frames carrying a mask no older than `every_s` + 1 s (from the frame it was made on), the
  boxes' F1 against the same detector on every frame (IoU 0.5), p95 latency and frames kept.
- Laps (the cache): a looping clip's second lap, with the tests' tiny SAM-format ONNX pair
  (streamlens/testing/sam_models.py: the cache does not depend on the model).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from streamlens.bench.harness import REPO, RESULTS, VIDEOS, YOLOX_NANO, command_line, header, need, write_page

HIGHWAY = VIDEOS / "highway_720p30.mp4"
INDOOR = VIDEOS / "person_indoor_768x432.mp4"
YOLOX = YOLOX_NANO / "yolox_nano.onnx"
SAMPLE = REPO / "samples" / "traffic.mp4"
EVERY_S = 2.0
WARMUP_S = 8.0
VEHICLES = "[car, truck, bus, motorbike]"
#: (label, runtime, bf16, threads) of the encoders compared; the first is the reference
ENCODERS = [("torch fp32", "torch", False, 2), ("onnxruntime fp32", "onnx", False, 2),
            ("OpenVINO fp32", "openvino", False, 2), ("OpenVINO bf16", "openvino", True, 2),
            ("OpenVINO bf16, 1 thread", "openvino", True, 1)]


def detector_yaml(classes: str) -> str:
    return (f"{{backend: onnx, model: {YOLOX}, names: {YOLOX_NANO / 'coco_classes.txt'}, conf: 0.3, "
            f"resize: bucket, threads: 1, classes: {classes}}}")


def some_frames(clip: Path, indices: list[int]) -> list[np.ndarray]:
    import av

    out = []
    with av.open(str(clip)) as container:
        for k, frame in enumerate(container.decode(video=0)):
            if k in indices:
                out.append(frame.to_ndarray(format="bgr24"))
            if len(out) == len(indices):
                return out
    raise SystemExit(f"{clip}: fewer than {max(indices) + 1} frames")


def build_detector_of(folder: Path, detector: str):
    from streamlens.config import load_pipeline
    from streamlens.detect import build_detector

    path = folder / "detector.yaml"
    path.write_text(f"sources: [{{uri: {HIGHWAY}}}]\ndetector: {detector}\nsinks: []\n")
    return build_detector(load_pipeline(path).detector)


# -- the encoder, side by side --------------------------------------------------------------------

def encoders(rounds: int, folder: Path, checkpoint: Path) -> dict:
    """ms per encode and mask IoU against torch fp32, per arm of `ENCODERS`."""
    import torch

    from streamlens.frame import Frame
    from streamlens.segment.masks import rle_decode
    from streamlens.segment.model import load_sam

    torch.set_num_threads(2)
    frames = some_frames(HIGHWAY, [60, 240, 480, 720])
    det = build_detector_of(folder, detector_yaml(VEHICLES))
    boxes = [det.detect([Frame("ref", k, None, 0.0, f)])[0].xyxy.astype(np.float64) for k, f in enumerate(frames)]
    det.close()
    sams = {label: load_sam(checkpoint, device="cpu", runtime=rt, bf16=bf, threads=th)
            for label, rt, bf, th in ENCODERS}
    height, width = frames[0].shape[:2]
    masks, decode_ms = {}, {}
    for label, sam in sams.items():
        masks[label], decode_ms[label] = [], []
        for image, found in zip(frames, boxes):
            arrays = sam.encode(image)
            started = time.perf_counter()
            made = sam.decode(arrays, found, width, height)
            decode_ms[label].append((time.perf_counter() - started) * 1000 / max(1, len(found)))
            masks[label] += [rle_decode(m.rle(height, width)) for m in made]
    encode_ms: dict[str, list[float]] = {label: [] for label in sams}
    for r in range(rounds):
        for label in (list(sams) if r % 2 == 0 else list(reversed(sams))):
            started = time.perf_counter()
            sams[label].encode(frames[0])
            encode_ms[label].append((time.perf_counter() - started) * 1000)
    reference = masks[ENCODERS[0][0]]
    out = {}
    for label, sam in sams.items():
        ious = [float((a & b).sum() / (a | b).sum()) if (a | b).any() else 1.0 for a, b in zip(masks[label], reference)]
        out[label] = {"runtime": sam.runtime, "encode_ms": encode_ms[label], "iou_median": statistics.median(ious),
                      "iou_min": min(ious), "masks": len(ious), "decode_ms": statistics.median(decode_ms[label])}
    return out


# -- a file read as a file ------------------------------------------------------------------------

def file_run(folder: Path, checkpoint: Path | None) -> dict:
    """The highway clip as a file (see the module's docstring); `checkpoint` None: without masks."""
    import streamlens
    from streamlens.frame import FrameResult

    segment = f"segment: {{model: {checkpoint}, every_s: {EVERY_S}, output: none}}" if checkpoint else ""
    path = folder / ("file_masks.yaml" if checkpoint else "file_plain.yaml")
    path.write_text(f"""
sources: [{{uri: {HIGHWAY}, max_fps: 10}}]
detector: {{backend: onnx, model: {YOLOX}, imgsz: 416}}
keyframes: {{interval: 5}}
tracker: {{motion: mv}}
{segment}
sinks: []
""")
    born: dict[int, float] = {}
    due = masked = objects = shown_all = 0
    started = time.perf_counter()
    with streamlens.Pipeline.from_yaml(path) as pipe:
        for item in pipe.results():
            if not isinstance(item, FrameResult) or item.detections.tracker_id is None:
                continue
            shown = item.detections.data.get("masks")
            for i, track in enumerate(item.detections.tracker_id.tolist()):
                has = shown is not None and shown[i] is not None
                objects, shown_all = objects + (track >= 0), shown_all + (track >= 0 and has)
                if track >= 0 and item.media_s - born.setdefault(track, item.media_s) > EVERY_S:
                    due += 1
                    masked += has
        stats = pipe.segment_stats()
    return {"wall_s": time.perf_counter() - started, "due": due, "masked": masked, "objects": objects,
            "shown_all": shown_all, "stats": stats}


# -- live cameras ---------------------------------------------------------------------------------

def reference(folder: Path, clip: Path, detector: str) -> list:
    """The detector on every frame of `clip`."""
    from streamlens.frame import Frame

    det = build_detector_of(folder, detector)
    import av

    out = []
    with av.open(str(clip)) as container:
        for k, frame in enumerate(container.decode(video=0)):
            out.append(det.detect([Frame("ref", k, None, 0.0, frame.to_ndarray(format="bgr24"))])[0])
    det.close()
    return out


def live_trial(folder: Path, checkpoint: Path, clip: Path, cameras: int, classes: str, seconds: float,
               ref: list) -> dict:
    """`cameras` paced, looping copies of `clip` with masks (see the module's docstring): per stream."""
    import streamlens
    from streamlens.bench.accuracy import detections_f1
    from streamlens.frame import FrameResult

    names = [f"cam{k + 1}" for k in range(cameras)]
    sources = ", ".join(f"{{name: {n}, uri: {clip}, live: true, loop: true}}" for n in names)
    path = folder / f"live_{clip.stem}_{cameras}.yaml"
    path.write_text(f"""
sources: [{sources}]
detector: {detector_yaml(classes)}
keyframes: {{interval: 5, adaptive: true, max_interval: 15}}
tracker: {{motion: mv}}
segment: {{model: {checkpoint}, every_s: {EVERY_S}, classes: {classes}, output: none}}
sinks: []
""")
    per = {n: {"objects": 0, "fresh": 0, "ours": [], "theirs": [], "total_ms": []} for n in names}
    with streamlens.Pipeline.from_yaml(path) as pipe:
        started = None
        for item in pipe.results():
            if not isinstance(item, FrameResult):
                continue
            now = time.monotonic()
            started = started or now
            if now - started < WARMUP_S:
                continue
            if now - started > WARMUP_S + seconds:
                break
            fig, det = per[item.frame.stream], item.detections
            fig["ours"].append(det)
            fig["theirs"].append(ref[item.frame.index % len(ref)])
            fig["total_ms"].append(item.frame.timings.get("total", 0.0))
            shown = det.data.get("masks")
            for i, track in enumerate(det.tracker_id.tolist() if det.tracker_id is not None else []):
                if track < 0:
                    continue
                fig["objects"] += 1
                mask = shown[i] if shown is not None else None
                fig["fresh"] += bool(mask is not None and mask.at is not None
                                     and item.frame.clock - mask.at <= EVERY_S + 1.0)
        stats = pipe.segment_stats()
        kept = {n: (st.frames, st.dropped) for n, st in pipe.stats.items()}
    out = {}
    for n, fig in per.items():
        frames, dropped = kept.get(n, (0, 0))
        out[n] = {"share": fig["fresh"] / fig["objects"] if fig["objects"] else None, "objects": fig["objects"],
                  "f1": detections_f1(fig["ours"], fig["theirs"]) if fig["ours"] else None,
                  "p95_ms": float(np.percentile(fig["total_ms"], 95)) if fig["total_ms"] else None,
                  "kept": frames / (frames + dropped) if frames + dropped else None}
    return {"streams": out, "stats": stats}


# -- the cache: a looping clip's second lap --------------------------------------------------------

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




def laps_lines(laps: list) -> list[str]:
    lines = [
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
    ]
    return lines


def median(values) -> float:
    return statistics.median(values)


def encoder_lines(found: dict, rounds: int) -> list[str]:
    base = median(found[ENCODERS[0][0]]["encode_ms"])
    lines = [
        "## The image encoder, side by side (MobileSAM, random weights, CPU)",
        "",
        f"One 1024-pixel encode of a 1280x720 frame of `{HIGHWAY.name}`: median (min-max) of {rounds} rounds, "
        "the arms in turns. Mask IoU: each box YOLOX-Nano found on 4 frames of the clip, decoded (torch's prompt "
        "decoder) from each arm's embedding, against torch fp32's masks: median and worst. Decoder: ms an object.",
        "",
        "| encoder | runs as | threads | ms per encode | vs torch | mask IoU median (worst) of masks | decoder ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, _, _, threads in ENCODERS:
        f = found[label]
        ms = f["encode_ms"]
        lines.append(f"| {label} | {f['runtime']} | {threads} | **{median(ms):.0f}** ({min(ms):.0f}-{max(ms):.0f}) | "
                     f"{base / median(ms):.2f}x | {f['iou_median']:.4f} ({f['iou_min']:.4f}) of {f['masks']} | "
                     f"{f['decode_ms']:.1f} |")
    return lines + [""]


def file_lines(plain: dict, masked: dict) -> list[str]:
    s = masked["stats"]
    share = masked["masked"] / masked["due"] if masked["due"] else float("nan")
    return [
        "## A file read as a file",
        "",
        f"`{HIGHWAY.name}` (897 frames, `max_fps: 10`), YOLOX-Nano 416 every 5th frame, `mv` tracker; with "
        f"`segment: {{model: mobile_sam.pt, every_s: {EVERY_S:g}}}` (encoder: {s.get('runtime')}). Masked: the "
        f"objects of tracks older than `every_s` that carry a mask; all: every tracked object.",
        "",
        "| run | wall s | objects of tracks older than every_s | masked | all objects | masked | keyframes segmented | "
        "encoded | jobs dropped | late | encoder ms | files waited s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| without masks | {plain['wall_s']:.1f} | | | {plain['objects']} | | | | | | | |",
        f"| with masks | {masked['wall_s']:.1f} | {masked['due']} | **{share:.1%}** | {masked['objects']} | "
        f"{masked['shown_all'] / max(1, masked['objects']):.1%} | {s['segmented']} | "
        f"{s['encoded']} | {s['dropped']} | {s['late']} | {s['encode_ms']:.0f} | {s['waited_s']:.1f} |",
        "",
    ]


def live_lines(trials: list) -> list[str]:
    lines = [
        f"Paced, looping cameras (`live: true, loop: true`), YOLOX-Nano as `pipelines/highway_yolox.yaml` runs it "
        f"(conf 0.3, 1 thread, every 5th frame, adaptive to 15), `mv` tracker, `segment: {{model: mobile_sam.pt, "
        f"every_s: {EVERY_S:g}}}` (MobileSAM, random weights: the real model's cost), the encoder's default runtime. "
        f"Per stream, after {WARMUP_S:g} s of warm-up: *fresh*: the share of tracked object-frames carrying a "
        f"mask no older than every_s + 1 s ({EVERY_S + 1:g} s from the frame it was made on); F1: the boxes "
        "against the detector on every frame (IoU 0.5); p95: from a frame coming to its result published; "
        "kept: frames published of those decoded.",
        "",
        "| clip | cameras | stream | object-frames | fresh | F1 | p95 ms | kept | encoded, dropped, gone (run) | "
        "lag s p50 / p95 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for clip, cameras, found in trials:
        s = found["stats"]
        lag = s.get("lag_s") or {"p50": float("nan"), "p95": float("nan")}
        for k, (name, f) in enumerate(found["streams"].items()):
            run = f"{s['encoded']}, {s['dropped']}, {s['gone']}" if k == 0 else ""
            lags = f"{lag['p50']:.2f} / {lag['p95']:.2f}" if k == 0 else ""
            lines.append(f"| {clip} | {cameras} | {name} | {f['objects']} | **{_pct(f['share'])}** | {f['f1']} | "
                         f"{_num(f['p95_ms'])} | {_pct(f['kept'])} | {run} | {lags} |")
    return lines + [""]


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--only", default="encoders,file,live,laps")
    parser.add_argument("--out", type=Path, default=RESULTS / "segment.md")
    parser.add_argument("--live-out", type=Path, default=RESULTS / "segment_live.md")
    args = parser.parse_args()
    need(HIGHWAY, INDOOR, YOLOX)
    parts = set(args.only.split(","))
    command = command_line()
    more = [f"Load average (1 min) {os.getloadavg()[0]:.2f} at the start."]
    with tempfile.TemporaryDirectory() as tmp:
        from streamlens.testing.sam_models import build_random_mobile_sam, build_tiny_sam

        folder = Path(tmp)
        checkpoint = build_random_mobile_sam(folder)
        page: list[str] = []
        if "encoders" in parts:
            page += encoder_lines(encoders(args.rounds, folder, checkpoint), args.rounds)
        if "file" in parts:
            page += file_lines(file_run(folder, None), file_run(folder, checkpoint))
        if "laps" in parts:
            sam = build_tiny_sam(folder)
            laps = [(name, every_s, live, cache_laps(folder, clip, detector, every_s, sam, live))
                    for name, clip, detector, every_s, live in cache_runs(folder)]
            page += laps_lines(laps)
        if page:
            write_page(args.out, "\n".join([header("Masks for tracked objects: the encoder, a file, the cache",
                                                   command=command, more=more), *page]), keep="## Reading")
            print(args.out.read_text())
        if "live" in parts:
            trials = []
            for clip, cameras, classes in ((HIGHWAY, 1, VEHICLES), (HIGHWAY, 2, VEHICLES), (HIGHWAY, 4, VEHICLES),
                                           (INDOOR, 2, "[person]")):
                ref = reference(folder, clip, detector_yaml(classes))
                trials.append((clip.name, cameras, live_trial(folder, checkpoint, clip, cameras, classes,
                                                              args.seconds, ref)))
                print(trials[-1], flush=True)
            write_page(args.live_out, "\n".join([header("Masks on live cameras: fresh masks, F1 and p95",
                                                        command=command, more=more), *live_lines(trials)]),
                       keep="## Reading")
            print(args.live_out.read_text())


if __name__ == "__main__":
    main()
