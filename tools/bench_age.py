"""How the boxes between keyframes age, and how much of what they lose a tracker could win back.

For each shipped YOLOX pipeline (`pipelines/highway_yolox.yaml` on the shared 720p highway clip,
`pipelines/indoor_yolox.yaml` on the shared 10 fps indoor clip), the clip is played once as a file
with its detector on every N-th frame and the frames between carried, and every frame is scored as
`streamlens bench` scores a subscriber's: against the same detector on every frame (the bench's
`Reference`, its cache shared), F1 of boxes at IoU >= 0.5, class-aware (`bench.accuracy.match_frame`).
The arms, on the same keyframes:

- `held`: each keyframe's boxes shown unchanged until the next keyframe (the plain baseline's way);
- `tracker`: the pipeline's own tracker (`build_tracker` on its `tracker` section, `mv` for both),
  given the detector's boxes down to the tracker's `low_score` on keyframes, as a pipeline runs it;
- `perfect motion`: each keyframe's objects moved exactly where the detector finds them on later
  frames (the reference's boxes linked frame to frame, Hungarian at IoU >= 0.3), and shown for as
  long as the detector goes on finding them, with the class the keyframe gave them. No live tracker
  can do that (it knows every later frame); it is what motion between keyframes could give at most.

Each arm is also scored class-agnostic (a car matched by a truck counts): the difference is what
the detector's own changes of class on one object cost, which no motion can win back.

`--delays` adds the tracker with its keyframes' detections applied D frames after their frame (a
late result, re-anchored on the keyframe and caught up by the frames' kept motion, as the engine
does when the detector's answer comes back after later frames went out by motion): what the
detector's delay costs at a given share of frames detected.

`--clips all` plays the other shared clips with motion vectors too (1080p and 320x240 highway, the
top-down road: with the highway pipeline), and `--loko module.NAME=v1,v2,...` scores the tracker instead
with a constant of `streamlens.track` at each value and chooses it by leaving one clip out (how
`motion.vectors.MIN_COVERAGE` was chosen).

Nothing is timed: the figures do not depend on the machine's speed or load.

    python tools/bench_age.py                                    # prints the tables
    python tools/bench_age.py --intervals 3,5,8,10,15 --out tools/results/age.md   # its results page
    python tools/bench_age.py --clips all --loko motion.vectors.MIN_COVERAGE=0,0.1,0.2,0.3,0.4,0.5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

from bench_track import ClipFrames, load_detections, save_detections  # a tool beside this one

from streamlens.bench.accuracy import match_frame
from streamlens.bench.harness import PIPELINES, VIDEOS, header, need, shipped_file, write_page
from streamlens.bench.reference import cache_key, default_cache_dir, reference_for
from streamlens.config import load_pipeline
from streamlens.detect import build_detector
from streamlens.sources.file import FileSource
from streamlens.track import build_tracker, weak_floor
from streamlens.track.base import confident
from streamlens.track.matching import box_iou

#: the overlap at which the reference's boxes of two consecutive frames are one object (`perfect motion`)
LINK_IOU = 0.3
#: each shared clip with motion vectors, and the shipped pipeline whose detector and tracker it runs with
CLIPS = {"highway_720p30.mp4": "highway_yolox.yaml", "person_indoor_768x432.mp4": "indoor_yolox.yaml",
         "highway_1080p30.mp4": "highway_yolox.yaml", "highway_320x240.avi": "highway_yolox.yaml",
         "road_topdown_640x360.avi": "highway_yolox.yaml"}
#: the clips of the shipped pipelines themselves (the default)
SHIPPED = ("highway_720p30.mp4", "person_indoor_768x432.mp4")
ARMS = ("held", "tracker", "perfect motion")


class Clip(ClipFrames):
    """One pass of a pipeline's clip: per frame, the detector's boxes down to the tracker's floor
    (`detections`, the tracker's input), the decoder's motion vectors, and the reference (the boxes at
    `conf`); `frame(i)` as bench_track's clips give it."""

    def __init__(self, pipeline: Path, cache: Path, video: Path | None = None):
        self.cfg = load_pipeline(shipped_file(pipeline))
        self.video = need(video or self.cfg.sources[0].uri)
        self.reference = reference_for(self.cfg.detector, str(self.video), cache)
        floor = weak_floor(self.cfg.tracker)
        key = json.dumps({"reference": cache_key(self.cfg.detector, str(self.video)), "floor": floor}, sort_keys=True)
        cached = cache / f"age-{hashlib.sha1(key.encode()).hexdigest()[:16]}.npz"
        detector = None if cached.is_file() else build_detector(self.cfg.detector, weak_floor=floor)
        found, vectors = [], []
        with FileSource("age", self.video, export_mvs=True) as source:
            for frame in source.frames(threading.Event()):
                size = (frame.width, frame.height)
                vectors.append(frame.motion_vectors)
                if detector is not None:
                    frame.image  # noqa: B018 - the whole picture converted first, as the reference's
                    found.append(detector.detect([frame])[0])
            fps = source.fps or 30.0
        if detector is None:
            found = load_detections(cached, self.cfg.detector.conf)
        else:
            detector.close()
            save_detections(cached, found)
        super().__init__(found, [], vectors, size, fps)
        if len(self) != len(self.reference):
            raise SystemExit(f"bench_age: {self.video}: {len(self)} frames decoded, the reference has "
                             f"{len(self.reference)} (a stale cache in {cache}?)")
        self.links = link_objects([self.reference.boxes(i) for i in range(len(self.reference))])


def link_objects(boxes: list[np.ndarray]) -> list[np.ndarray]:
    """An object id per box of every frame: a box continues the object of the previous frame's box
    it overlaps most (Hungarian, IoU >= `LINK_IOU`), else starts one.

    Example:
        >>> [ids.tolist() for ids in link_objects([np.array([[0, 0, 10, 10]]), np.array([[1, 0, 11, 10]]),
        ...                                         np.array([[50, 50, 60, 60]])])]
        [[0], [0], [1]]
    """
    ids, following = [], 0
    for i, now in enumerate(boxes):
        mine = np.full(len(now), -1)
        if i and len(now) and len(boxes[i - 1]):
            overlap = box_iou(boxes[i - 1], now)
            rows, cols = linear_sum_assignment(-overlap)
            for r, c in zip(rows, cols):
                if overlap[r, c] >= LINK_IOU:
                    mine[c] = ids[i - 1][r]
        for c in np.flatnonzero(mine < 0):
            mine[c], following = following, following + 1
        ids.append(mine)
    return ids


class Score:
    """Matched, shown and wanted boxes over frames, class-aware and class-agnostic; and class-aware by
    the frame's distance from the keyframe its boxes carry."""

    def __init__(self) -> None:
        self.aware = np.zeros(3, np.int64)
        self.agnostic = np.zeros(3, np.int64)
        self.by_age: dict[int, np.ndarray] = {}

    def add(self, age: int, boxes: np.ndarray, cls: np.ndarray, ref: np.ndarray, ref_cls: np.ndarray) -> None:
        counts = np.array([len(match_frame(boxes, cls, ref, ref_cls)), len(boxes), len(ref)])
        self.aware += counts
        self.agnostic += [len(match_frame(boxes, np.zeros(len(boxes)), ref, np.zeros(len(ref)))), len(boxes), len(ref)]
        self.by_age.setdefault(age, np.zeros(3, np.int64))
        self.by_age[age] += counts

    @staticmethod
    def f1(counts: np.ndarray) -> float:
        return 2 * counts[0] / max(counts[1] + counts[2], 1)


def boxes_of(detections) -> tuple[np.ndarray, np.ndarray]:
    xyxy = np.asarray(detections.xyxy, np.float64).reshape(-1, 4)
    cls = detections.class_id if detections.class_id is not None else np.full(len(xyxy), -1)
    return xyxy, np.asarray(cls)


def run_arm(clip: Clip, arm: str, interval: int, delay: int = 0) -> Score:
    """Score one arm over the clip with a keyframe every `interval` frames, its detections applied
    `delay` frames later (the tracker only)."""
    ref, score = clip.reference, Score()
    tracker = None if arm != "tracker" else build_tracker(clip.cfg.tracker, clip.fps,
                                                          detector_conf=clip.cfg.detector.conf)
    applied = None  # the keyframe whose detections the shown boxes carry
    for i in range(len(clip)):
        due = i - delay if (i - delay) >= 0 and (i - delay) % interval == 0 else None
        if tracker is not None:
            frame = clip.frame(i)
            if due == i:
                shown = boxes_of(tracker.update(frame, clip.detections[i]))
            else:
                tracker.propagate(frame)
                if due is not None:
                    tracker.update(clip.frame(due), clip.detections[due])
                shown = boxes_of(tracker.objects())
            applied = due if due is not None else applied
        else:
            applied = i if i % interval == 0 else applied
            if arm == "held":
                shown = boxes_of(confident(clip.detections[applied]))
            else:
                shown = perfect_motion(clip, applied, i)
        if applied is None:
            score.add(-1, np.empty((0, 4)), np.empty(0), ref.boxes(i), ref.classes(i))
            continue
        score.add(i - applied, *shown, ref.boxes(i), ref.classes(i))
    return score


def perfect_motion(clip: Clip, keyframe: int, now: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference's boxes of `keyframe`, each where the detector finds its object on frame `now`
    (dropped where it finds it no more), with the keyframe's class."""
    ref, links = clip.reference, clip.links
    where = {int(o): row for row, o in enumerate(links[now])}
    pairs = [(where[int(o)], row) for row, o in enumerate(links[keyframe]) if int(o) in where]
    if not pairs:
        return np.empty((0, 4)), np.empty(0, np.int64)
    later, first = np.array(pairs).T
    return ref.boxes(now)[later], ref.classes(keyframe)[first]


def tables(clip: Clip, name: str, intervals: list[int], delays: list[int]) -> list[str]:
    frames, boxes = len(clip), int(sum(len(clip.reference.boxes(i)) for i in range(len(clip.reference))))
    lines = [f"## {name} on `{Path(clip.video).name}` ({frames} frames, {clip.fps:g} fps, {boxes} reference boxes)", "",
             "| keyframe every | " + " | ".join(f"{a}: F1 (class-agnostic)" for a in ARMS) + " |",
             "|---|" + "---|" * len(ARMS)]
    ages = {}
    for interval in intervals:
        cells = []
        for arm in ARMS:
            s = run_arm(clip, arm, interval)
            cells.append(f"{s.f1(s.aware):.3f} ({s.f1(s.agnostic):.3f})")
            if interval == max(intervals) and arm != "held":
                ages[arm] = s.by_age
        lines.append(f"| {interval} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    top = max(intervals)
    lines += ["", f"Class-aware F1 by the frame's distance from its keyframe, a keyframe every {top}:", "",
              "| arm | " + " | ".join(str(d) for d in range(top)) + " |", "|---|" + "---|" * top]
    for arm, by_age in ages.items():
        lines.append(f"| {arm} | " + " | ".join(f"{Score.f1(by_age[d]):.2f}" if d in by_age else "-"
                                               for d in range(top)) + " |")
    if delays:
        lines += ["", "The tracker with each keyframe's detections applied D frames after its frame "
                  "(class-aware F1):", "",
                  "| keyframe every | " + " | ".join(f"D={d}" for d in delays) + " |", "|---|" + "---|" * len(delays)]
        for interval in intervals:
            row = [f"{Score.f1(run_arm(clip, 'tracker', interval, d).aware):.3f}" for d in delays]
            lines.append(f"| {interval} | " + " | ".join(row) + " |")
            print(lines[-1], flush=True)
    return lines + [""]


def leave_one_out(clips: dict[str, Clip], intervals: dict[str, list[int]], knob: str) -> list[str]:
    """`knob` (`module.NAME=v1,v2,...`, a constant of a module of `streamlens.track`) chosen by leaving one
    clip out: the tracker's class-aware F1 (the mean over the clip's intervals) for every value on every
    clip, and for each clip the value the other clips choose (the best mean over them) with its F1 there."""
    import importlib

    target, _, values = knob.partition("=")
    where, _, name = target.rpartition(".")
    module = importlib.import_module(f"streamlens.track.{where}")
    kept, choices = getattr(module, name), [float(v) for v in values.split(",")]
    table: dict[str, dict[float, float]] = {}
    try:
        for value in choices:
            setattr(module, name, value)
            for clip_name, clip in clips.items():
                f1s = [Score.f1(run_arm(clip, "tracker", n).aware) for n in intervals[clip_name]]
                table.setdefault(clip_name, {})[value] = float(np.mean(f1s))
            print(f"{name}={value:g}: " + ", ".join(f"{c} {table[c][value]:.3f}" for c in clips), flush=True)
    finally:
        setattr(module, name, kept)
    lines = [f"## `{name}` ({where}.py) chosen by leaving one clip out", "",
             "The tracker's class-aware F1, the mean over each clip's intervals; `chosen without it`: the value "
             f"whose mean over the other clips is best (shipped: {kept:g}).", "",
             "| clip | " + " | ".join(f"{v:g}" for v in choices) + " | chosen without it | its F1 there |",
             "|---|" + "---|" * (len(choices) + 2)]
    for held in clips:
        others = [c for c in clips if c != held]
        best = max(choices, key=lambda v: np.mean([table[c][v] for c in others])) if others else kept
        lines.append(f"| {held} | " + " | ".join(f"{table[held][v]:.3f}" for v in choices) +
                     f" | {best:g} | {table[held][best]:.3f} |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", default=",".join(SHIPPED),
                        help=f"clips of the shared data, comma-separated, or all ({', '.join(CLIPS)})")
    parser.add_argument("--intervals", default="5,10,15", help="keyframe intervals (frames) of the 25-30 fps clips")
    parser.add_argument("--slow-intervals", default="3,6,9", help="keyframe intervals of clips under 20 fps")
    parser.add_argument("--delays", default="0,1,2,3",
                        help="frames between a keyframe and its detections ('' for none)")
    parser.add_argument("--loko", default=None, metavar="MODULE.NAME=V1,V2",
                        help="instead of the tables: a tracker constant chosen by leaving one clip out, e.g. "
                             "motion.vectors.MIN_COVERAGE=0,0.2,0.4")
    parser.add_argument("--cache", type=Path, default=default_cache_dir())
    parser.add_argument("--out", type=Path, default=None, help="write the tables to this page as well")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    delays = [int(d) for d in args.delays.split(",") if d.strip()]
    names = list(CLIPS) if args.clips == "all" else args.clips.split(",")
    unknown = [n for n in names if n not in CLIPS]
    if unknown:
        raise SystemExit(f"bench_age: --clips: {', '.join(unknown)}: expected some of {', '.join(CLIPS)}, or all")
    text = [header("How boxes age between keyframes, and what motion could win back")]
    clips, intervals = {}, {}
    for name in names:
        clips[name] = Clip(PIPELINES / CLIPS[name], args.cache, VIDEOS / name)
        chosen = args.slow_intervals if clips[name].fps < 20 else args.intervals
        intervals[name] = [int(x) for x in chosen.split(",")]
    if args.loko:
        text += leave_one_out(clips, intervals, args.loko)
    else:
        for name, clip in clips.items():
            print(f"{name}:", flush=True)
            text += tables(clip, CLIPS[name], intervals[name], delays)
    if args.out:
        write_page(args.out, "\n".join(text), keep="## Notes")
    else:
        print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
