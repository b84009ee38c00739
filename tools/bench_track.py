"""Benchmark the tracker: MOTChallenge scores, agreement with detecting every frame, and cost.

Three parts, each printed as Markdown (the figures kept in tools/results/track.md come from here):

- `mot`: the four MOT17 training sequences of ../shared/data/mot replayed with their public
  detections (as `streamlens eval mot` does), detections given every N-th frame, Kalman in between:
  HOTA, MOTA, IDF1 combined, for N = 1, 2, 3, 5, 10.
- `video`: YOLOX-Nano on ../shared/data/video/highway_720p30.mp4. The reference is the
  detect-every-frame run (the same tracker with a keyframe on every frame); each other run detects
  every N-th frame only and carries objects between by `hold` (the last keyframe's boxes, the
  baseline), `kalman`, `flow` or `mv`. On the frames that are not keyframes, boxes are matched to the
  reference's per frame (Hungarian, IoU >= 0.5): precision, recall and F1 over all those frames.
  F1 against the raw detections of every frame is given too. As in a pipeline with a tracker, the
  detector reports boxes down to the tracker's `low_score` (0.1) for its second stage; those under
  the detector's conf are never shown, and the reference and the raw detections are the boxes at conf.
- `ids`: the same clip and detections, with its pixels: identities of `mv` at each interval, with
  and without `tracker.appearance` (re-association by look, streamlens/track/reassoc.py), scored
  against the detect-every-frame run's identities taken as ground truth (HOTA, IDF1, id switches),
  and the distinct ids each run shows.
- `cost`: milliseconds the tracker takes per frame (update on keyframes, propagate between, with the
  motion model's own work on the image: grey conversion for flow) with 20 objects on the real
  720p frames, keyframes every 5th frame; median and 95th percentile, per motion model.

Detections of the clip are computed once (about 30 ms a frame on 2 cores) and cached in
`--cache` (default: the system's temp folder), keyed by the model file and the clip.

    python tools/bench_track.py                   # all three parts
    python tools/bench_track.py --part video --intervals 5
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path

import numpy as np
import supervision as sv

from streamlens.bench.harness import DATA, MODELS, VIDEOS, command_line, machine_line, need
from streamlens.eval.metrics import combine, read_mot_file, score_sequence
from streamlens.eval.mot import load_sequence, replay, write_results
from streamlens.frame import WEAK, Frame
from streamlens.graph.schedule.keyframes import KeyframeScheduler
from streamlens.sources.file import FileSource
from streamlens.track.matching import box_iou, match_by_iou
from streamlens.track.motion import MotionVectors, SparseFlow
from streamlens.track.base import confident
from streamlens.track.tracker import LOW_SCORE, TENTATIVE_MATCH_IOU, KeyframeTracker

MOT_SEQUENCES = ("MOT17-02", "MOT17-04", "MOT17-05", "MOT17-09")
CLIP = VIDEOS / "highway_720p30.mp4"
MODEL = MODELS / "yolox_nano" / "yolox_nano.onnx"
VEHICLES = ["car", "truck", "bus", "motorcycle"]
#: the detector's confidence threshold for the video part (the pipeline file's default)
DETECTOR_CONF = 0.25
MATCH_IOU = 0.5


# -- part 1: MOTChallenge ----------------------------------------------------------------------------

def mot_part(intervals: list[int], out: Path, **options) -> list[str]:
    sequences = [load_sequence(DATA / "mot" / name) for name in MOT_SEQUENCES]
    lines = ["| interval | HOTA | MOTA | IDF1 | " + " | ".join(f"HOTA {s.name[-2:]}" for s in sequences) + " |",
             "|---|---|---|---|" + "---|" * len(sequences)]
    print("\n".join(lines), flush=True)
    for interval in intervals:
        scores = []
        for seq in sequences:
            path = write_results(replay(seq, KeyframeTracker("kalman", seq.fps, **options), interval),
                                 out / f"interval{interval}" / f"{seq.name}.txt")
            scores.append(score_sequence(seq.name, read_mot_file(seq.gt_path), read_mot_file(path), seq.length))
        total = combine(scores)
        lines.append(f"| {interval} | {total.hota:.1f} | {total.mota:.1f} | {total.idf1:.1f} | "
                     + " | ".join(f"{s.hota:.1f}" for s in scores) + " |")
        print(lines[-1], flush=True)
    return lines


# -- the clip, decoded once ---------------------------------------------------------------------------

class ClipFrames:
    """What the video part needs of every frame of the clip, decoded once: the detections, the flow
    model's grey image and the decoder's motion vectors."""

    def __init__(self, detections: list[sv.Detections], greys: list, vectors: list, size: tuple[int, int],
                 fps: float):
        self.detections, self.greys, self.vectors, self.size, self.fps = detections, greys, vectors, size, fps

    def __len__(self) -> int:
        return len(self.detections)

    def frame(self, index: int) -> Frame:
        """A frame without pixels (the motion records are cached) but with the clip's size."""
        width, height = self.size
        blank = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (height, width, 3))
        return Frame("highway", index, index / self.fps, 0.0, blank, motion_vectors=self.vectors[index])


def load_clip(cache: Path) -> ClipFrames:
    key = f"{MODEL.stat().st_size}:{CLIP.stat().st_size}:{DETECTOR_CONF}:{LOW_SCORE}"
    key = hashlib.sha1(key.encode()).hexdigest()[:10]
    cached = cache / f"streamlens_bench_highway_{key}.npz"
    detections = load_detections(cached) if cached.is_file() else None
    detector = None if detections is not None else _detector()
    flow = SparseFlow()
    source = FileSource("highway", CLIP, export_mvs=True)
    found, greys, vectors = [], [], []
    with source:
        for frame in source.frames(threading.Event()):
            if detector is not None:
                found.append(detector([frame]))
            greys.append(flow.observe(frame))
            vectors.append(frame.motion_vectors)
            size = (frame.width, frame.height)
    if detections is None:
        save_detections(cached, found)
        detections = found
    return ClipFrames(detections, greys, vectors, size, source.fps or 30.0)


def _detector():
    """YOLOX-Nano through streamlens' ONNX backend."""
    from streamlens.detect.onnx import OnnxDetector

    detector = OnnxDetector(MODEL, conf=DETECTOR_CONF, classes=VEHICLES)
    detector.floor = LOW_SCORE  # as a pipeline with a tracker runs it: weak boxes for the second stage
    return lambda frames: detector.detect(frames)[0]


def save_detections(path: Path, detections: list[sv.Detections]) -> None:
    rows = [np.column_stack([np.full(len(d), i), d.xyxy, d.confidence, d.class_id]) for i, d in enumerate(detections)]
    names = [n for d in detections for n in d.data["class_name"]]
    np.savez(path, rows=np.concatenate(rows), names=np.array(names, dtype=str), frames=len(detections))


def load_detections(path: Path, conf: float = DETECTOR_CONF) -> list[sv.Detections]:
    """Detections `save_detections` wrote, those under `conf` flagged weak (`frame.WEAK`)."""
    data = np.load(path)
    rows, names = data["rows"], data["names"].astype(object)
    out = []
    for i in range(int(data["frames"])):
        chosen = rows[:, 0] == i
        d = sv.Detections(xyxy=rows[chosen, 1:5].astype(np.float32), confidence=rows[chosen, 5].astype(np.float32),
                          class_id=rows[chosen, 6].astype(np.int64))
        d.data["class_name"] = names[chosen]
        d.data[WEAK] = d.confidence < conf
        out.append(d)
    return out


class _CachedFlow(SparseFlow):
    """The flow model, reading the grey images decoded once instead of converting frames again."""

    def __init__(self, greys: list):
        super().__init__()
        self._greys = greys

    def observe(self, frame: Frame):
        return self._greys[frame.index]


# -- part 2: agreement with detecting every frame --------------------------------------------------

def run_clip(clip: ClipFrames, interval: int, motion: str, **options) -> tuple[list[np.ndarray], list[bool]]:
    """Boxes per frame and which frames were keyframes, for one motion model (`hold`: the last
    keyframe's boxes, tracked with kalman on keyframes). The tracker is set up as a pipeline sets it
    up (`build_tracker` with the detector's conf), and given the detector's weak boxes too."""
    model = {"flow": lambda: _CachedFlow(clip.greys), "mv": MotionVectors}.get(motion, lambda: "kalman")()
    tracker = KeyframeTracker(model, clip.fps, high_score=DETECTOR_CONF, new_track_score=DETECTOR_CONF, **options)
    scheduler = KeyframeScheduler(interval)
    boxes, keys, held = [], [], np.empty((0, 4))
    for index in range(len(clip)):
        frame = clip.frame(index)
        is_key = scheduler.is_keyframe()
        out = tracker.update(frame, clip.detections[index]) if is_key else tracker.propagate(frame)
        if is_key:
            held = out.xyxy
        boxes.append(held if motion == "hold" else out.xyxy)
        keys.append(is_key)
    return boxes, keys


def agreement(found: list[np.ndarray], reference: list[np.ndarray], frames: list[int]) -> tuple[float, float, float]:
    """Precision, recall and F1 of `found` against `reference` over `frames` (Hungarian, IoU >= 0.5)."""
    hits = shown = wanted = 0
    for i in frames:
        matches, _, _ = match_by_iou(box_iou(found[i], reference[i]), MATCH_IOU)
        hits += len(matches)
        shown += len(found[i])
        wanted += len(reference[i])
    precision, recall = hits / max(shown, 1), hits / max(wanted, 1)
    return precision, recall, 2 * hits / max(shown + wanted, 1)


def video_part(clip: ClipFrames, intervals: list[int], **options) -> list[str]:
    # the reference: detecting every frame, tracked as before there were two tentative overlaps (a
    # new track's second keyframe is the next frame: ByteTrack's 0.3), so figures compare over time
    every_frame, _ = run_clip(clip, 1, "kalman", tentative_match_iou=TENTATIVE_MATCH_IOU, **options)
    raw = [confident(d).xyxy for d in clip.detections]  # what the detector calls an object
    lines = ["| interval | motion | F1 | precision | recall | F1 vs raw detections | precision | recall |",
             "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for interval in intervals:
        for motion in ("hold", "kalman", "flow", "mv"):
            boxes, keys = run_clip(clip, interval, motion, **options)
            between = [i for i, k in enumerate(keys) if not k]
            precision, recall, f1 = agreement(boxes, every_frame, between)
            raw_precision, raw_recall, raw_f1 = agreement(boxes, raw, between)
            lines.append(f"| {interval} | {motion} | {f1:.3f} | {precision:.3f} | {recall:.3f} | "
                         f"{raw_f1:.3f} | {raw_precision:.3f} | {raw_recall:.3f} |")
            print(lines[-1], flush=True)
    return lines


def ids_part(clip: ClipFrames, intervals: list[int], out: Path, **options) -> list[str]:
    """The `ids` part (see the module's docs): one decode of the clip, every tracker fed each frame."""
    runs = {("reference", 1, False): KeyframeTracker("kalman", clip.fps, high_score=DETECTOR_CONF,
                                                     new_track_score=DETECTOR_CONF,
                                                     tentative_match_iou=TENTATIVE_MATCH_IOU, **options)}
    for interval in intervals:
        for looks in (False, True):
            runs[("mv", interval, looks)] = KeyframeTracker(MotionVectors(), clip.fps, high_score=DETECTOR_CONF,
                                                            new_track_score=DETECTOR_CONF, appearance=looks, **options)
    results: dict[tuple, dict[int, sv.Detections]] = {key: {} for key in runs}
    with FileSource("highway", CLIP, export_mvs=True) as source:
        for frame in source.frames(threading.Event()):
            for (kind, interval, looks), tracker in runs.items():
                update = frame.index % interval == 0
                out_ = tracker.update(frame, clip.detections[frame.index]) if update else tracker.propagate(frame)
                results[(kind, interval, looks)][frame.index + 1] = out_
    reference = write_results(results[("reference", 1, False)], out / "ids" / "reference.txt")
    gt = read_mot_file(reference)
    gt[:, 6:9] = 1  # consider, class 1 (scored), visible
    lines = ["| interval | appearance | HOTA | AssA | IDF1 | id switches | distinct ids (reference: "
             f"{len(np.unique(gt[:, 1]))}) | boxes described | keyframes described | found again |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for (kind, interval, looks), found in results.items():
        if kind == "reference":
            continue
        path = write_results(found, out / "ids" / f"mv_i{interval}_{looks}.txt")
        scores = score_sequence("highway", gt, read_mot_file(path), len(clip)).summary()
        distinct = len({int(i) for d in found.values() for i in d.tracker_id if i >= 0})
        again = runs[(kind, interval, looks)].reassoc
        lines.append(f"| {interval} | {'on' if looks else 'off'} | {scores['HOTA']:.1f} | {scores['AssA']:.1f} | "
                     f"{scores['IDF1']:.1f} | {scores['IDs']} | {distinct} | {again.described} | {again.pictures} | {again.found} |")
        print(lines[-1], flush=True)
    return lines


# -- part 3: cost ----------------------------------------------------------------------------------

def cost_part(frames: int, objects: int = 20, interval: int = 5) -> list[str]:
    """Per-frame tracking cost with `objects` boxes swaying over the clip's real frames; the clip's
    decode time per frame (in the same run) as the yardstick."""
    images, decode_ms = _decode(frames)
    height, width = images[0][0].shape[:2]
    lines = [f"decode (PyAV, 1280x720 H.264, motion vectors exported): median {np.median(decode_ms):.2f} ms/frame", "",
             "| motion | median ms/frame | p95 ms/frame | keyframes: median | between: median | objects shown |",
             "|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for motion in ("kalman", "flow", "mv"):
        tracker = KeyframeTracker(motion, 30.0)
        scheduler = KeyframeScheduler(interval)
        spent, keyed, shown = [], [], []
        for index, (image, vectors) in enumerate(images):
            frame = Frame("bench", index, index / 30.0, 0.0, image, motion_vectors=vectors)
            detections = _grid_objects(objects, index, width, height)
            is_key = scheduler.is_keyframe()
            started = time.perf_counter()
            out = tracker.update(frame, detections) if is_key else tracker.propagate(frame)
            spent.append((time.perf_counter() - started) * 1000)
            keyed.append(is_key)
            shown.append(len(out))
        spent, keyed = np.array(spent[interval:]), np.array(keyed[interval:])
        lines.append(f"| {motion} | {np.median(spent):.2f} | {np.percentile(spent, 95):.2f} | "
                     f"{np.median(spent[keyed]):.2f} | {np.median(spent[~keyed]):.2f} | {np.mean(shown):.1f} |")
        print(lines[-1], flush=True)
    return lines


def _decode(frames: int) -> tuple[list[tuple[np.ndarray, np.ndarray | None]], list[float]]:
    out, decode_ms = [], []
    with FileSource("bench", CLIP, export_mvs=True) as source:
        for frame in source.frames(threading.Event()):
            out.append((frame.image, frame.motion_vectors))
            decode_ms.append(frame.timings["decode"])
            if len(out) >= frames:
                break
    return out, decode_ms


def _grid_objects(count: int, index: int, width: int, height: int) -> sv.Detections:
    """`count` 64x48 boxes on a grid, swaying left and right (up to 1.3 px a frame)."""
    columns = int(np.ceil(np.sqrt(count * width / height)))
    cells = [(c, r) for r in range(int(np.ceil(count / columns))) for c in range(columns)][:count]
    step_x, step_y = width / columns, height / int(np.ceil(count / columns))
    sway = 20 * np.sin(index / 15)
    xy = np.array([((c + 0.25) * step_x + sway, (r + 0.25) * step_y) for c, r in cells])
    detections = sv.Detections(xyxy=np.hstack([xy, xy + [64, 48]]).astype(np.float32),
                               confidence=np.full(count, 0.9, np.float32), class_id=np.zeros(count, np.int64))
    detections.data["class_name"] = np.full(count, "car", dtype=object)
    return detections


# -- main ------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("all", "mot", "video", "ids", "cost"), default="all")
    parser.add_argument("--intervals", default="2,3,5,10", help="keyframe intervals for the video part")
    parser.add_argument("--mot-intervals", default="1,2,3,5,10")
    parser.add_argument("--cost-frames", type=int, default=300)
    parser.add_argument("--coast-s", type=float, default=None, help="the tracker's coast_s (default: its own)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "streamlens_bench_mot")
    args = parser.parse_args(argv)
    need(DATA)
    options = {} if args.coast_s is None else {"coast_s": args.coast_s}
    print(f"command: {command_line([sys.argv[0], *(argv or sys.argv[1:])])}")
    print(f"machine: {machine_line()}, Python {platform.python_version()}, numpy {np.__version__}; "
          f"date {date.today()}\n")
    if args.part in ("all", "mot"):
        print("MOTChallenge (MOT17-02/04/05/09 combined, public detections, kalman between keyframes)\n")
        mot_part([int(x) for x in args.mot_intervals.split(",")], args.out, **options)
        print()
    if args.part in ("all", "video"):
        print("highway_720p30.mp4, YOLOX-Nano: non-keyframes against the detect-every-frame run\n")
        clip = load_clip(args.cache)
        video_part(clip, [int(x) for x in args.intervals.split(",")], **options)
        print()
    if args.part in ("all", "ids"):
        print("highway_720p30.mp4, YOLOX-Nano: identities against the detect-every-frame run's, mv\n")
        ids_part(load_clip(args.cache), [int(x) for x in args.intervals.split(",")], args.out, **options)
        print()
    if args.part in ("all", "cost"):
        print(f"tracking cost, 20 objects, keyframes every 5th frame, first {args.cost_frames} frames\n")
        cost_part(args.cost_frames)
    return 0


if __name__ == "__main__":
    sys.exit(main())
