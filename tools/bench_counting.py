"""Counting cars across a line on real video: streamlens against a detect-every-frame ByteTrack run.

    python tools/bench_counting.py                       # everything, about 3.5 minutes on 2 cores
    python tools/bench_counting.py --no-live --trackers mv --intervals 5
    python tools/bench_counting.py --page-only           # the page again from counting.json

The clip is ../shared/data/video/highway_720p30.mp4 (a real highway camera, both carriageways); the
line is `LINE`, chosen once by looking at frames 150, 450 and 700 of the clip (never by its counts):
it runs from the top edge of the frame, over the grass verge above the far carriageway, across both
of its lanes, the median, the near carriageway's two lanes and its shoulder, to the bottom right
corner. Cars cross it where they are 90-170 px wide, well away from the horizon. It was first drawn
from (300, 60) to (1250, 700); its ends were then moved out along the same line to the frame's
border, because supervision's `LineZone` counts a box only while all its corners lie in the strip
between the perpendiculars at the line's ends, and vans in the far lane left that strip at (300, 60)
before their whole box had crossed: where the line crosses each lane did not change. Seen from its
first point towards its second, cars going away from the camera (the near carriageway) cross it
from right to left, `in`; cars coming towards it (the far one) cross it `out`: supervision's
`LineZone` names the directions so, and since issue 26 streamlens does too (before, the other way
round).

- Reference: YOLOX-Nano with the detector section of pipelines/highway_yolox.yaml (conf, classes,
  resize, threads: the model run by streamlens' own `build_detector`, so the preprocessing is the
  pipeline's) on every frame, tracked by the `trackers` package's `ByteTrackTracker` with its
  defaults, counted by supervision's `sv.LineZone` with its defaults (the four box corners,
  `minimum_crossing_threshold=1`) on the same line: the target's yardstick. Two variants beside
  it: the same tracks counted with `triggering_anchors=[BOTTOM_CENTER]`, the point streamlens
  watches; and ByteTrack with its thresholds at the detector's `conf`, as streamlens' tracker has
  them (`track_activation_threshold` and `high_conf_det_threshold`; ByteTrack's defaults, 0.7 and
  0.6, start no track for a car the detector never scores that high). supervision's `in` ends on
  the side where its cross product is negative, streamlens' left, where streamlens' `in` ends too.
  The tool checks that on every reference crossing (the track's box centre on the side the
  mapping says, before and after) and says so on the page.
- streamlens: the pipeline (file mode, nothing dropped, the same every run) with that line in
  `analytics.lines`, at fixed keyframe intervals 1, 3, 5 and 10 (`adaptive: false`) for each motion
  model, plus the shipped pipeline's own keyframes (interval 5, adaptive up to 15) with `mv`; the
  final per-class `counts` of the last frame message, and the `line_cross` events.
- Live: `--live-streams` (6) copies of the clip paced as cameras (`live: true`, one pass each) in
  one pipeline with the shipped pipeline's keyframes and `mv`; each stream's final counts, with
  what it lost. The page records the machine's load average: on a shared machine the streams lose
  frames and the counts with them.
- The check by eye, in `--sheets` (default out/counting/, not kept in git): a contact sheet of
  every `line_cross` event of the interval-5 `mv` run, one of every reference crossing, and one of
  every vehicle any run at a fixed interval counted: each tile cut from the frame of the crossing
  (the line red, the box green, the track's anchor over the 30 frames before yellow and the 15
  after cyan); and `slit.png`, the pixels under the line on every frame stacked in time, where
  each vehicle that crosses leaves a streak whether or not a detector saw it, with both runs'
  crossings marked. Crossings of two runs are one vehicle when they go the same way within
  `MATCH_S` and their tracks' boxes overlap (`same_vehicle`); a tile whose crossing has no partner
  gets a red frame, and the page says why it has none. `BY_EYE` holds the counts of vehicles seen
  to cross on those sheets; the tables compare every run with it too.

Counts per direction are given for cars (class car) and for every vehicle class the pipeline keeps
(car, truck, bus, motorbike). Both trackers are class-agnostic, and both runs take the detector as
the pipeline builds it: `agnostic_nms: auto`, one box where the model boxes one vehicle as car and
as truck (a streamlens track's label is then its detections' vote). Where a vehicle still is two
tracks, it counts twice in the all-vehicles column (the page lists those pairs).

The whole run takes about 3.5 minutes on 2 cores (each live run 35-40 s of it; the detector on every
frame takes 20 s more the first time, its detections are cached in `--cache`). Writes
tools/results/counting.md and counting.json; a `## Eye check` section already in the page (what was
seen on the sheets, written by hand) and all after it are kept.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import av
import numpy as np

from streamlens.bench.harness import (DATA, PIPELINES, REPO, RESULTS, command_line, machine, machine_line, need, now,
                                      shipped)
from streamlens.detect.names import COCO_NAMES

PIPELINE = PIPELINES / "highway_yolox.yaml"
CLIP = "video/highway_720p30.mp4"
MODEL = "models/yolox_nano/yolox_nano.onnx"
#: the counting line, 1280x720 source pixels: from the top edge above the far carriageway to the
#: bottom right corner, past the near carriageway's shoulder; see the module docs
LINE = ((211.0, 0.0), (1280.0, 720.0))
LINE_NAME = "road"
#: two crossings of the same direction within this many seconds whose tracks' boxes overlap by
#: `MATCH_IOU` on average between them are the same vehicle
MATCH_S = 1.0
MATCH_IOU = 0.5
#: the target: each direction's count within this many cars of the reference's
TOLERANCE = 1
#: the vehicles that really crossed `LINE` on the clip, counted by eye over the whole clip from the
#: pixels under the line on every frame, each crossing checked on frame crops (the ledger, one row per
#: vehicle: tools/results/counting_ledger.md): `cars` every car and van, `vehicles` those, the lorry
#: going away (about frame 565) and the dropside light truck coming towards the camera (about 411)
BY_EYE = {"cars": {"in": 21, "out": 20}, "vehicles": {"in": 22, "out": 21}}
DIRECTIONS = ("in", "out")
#: supervision's in/out in streamlens' words (the same since issue 26; checked on every crossing)
SV_TO_STREAMLENS = {"in": "in", "out": "out"}
TILE = (240, 180)
SHEET_COLUMNS = 8


# -- the set-up --------------------------------------------------------------------------------

def detector_section(data: Path) -> dict:
    """The `detector` section of pipelines/highway_yolox.yaml, its model the shared one in `data`
    (`harness.shipped`; COCO's names, as the model has no names of its own)."""
    return dict(shipped(PIPELINE.name, data)["detector"])


def shipped_keyframes() -> dict:
    import yaml

    return dict(yaml.safe_load(PIPELINE.read_text())["keyframes"])


def pipeline_file(folder: Path, name: str, sources: list[dict], detector: dict, keyframes: dict, motion: str) -> Path:
    """A pipeline file with the counting line and one jsonl sink (`<name>.jsonl` beside it)."""
    import yaml

    tree = {"sources": sources, "detector": detector, "keyframes": keyframes, "tracker": {"motion": motion},
            "analytics": {"lines": [{"name": LINE_NAME, "points": [list(p) for p in LINE]}]},
            "sinks": [{"type": "jsonl", "path": str(folder / f"{name}.jsonl")}]}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def side(point) -> float:
    """streamlens' signed distance of a point from the line: > 0 on its right (where `out` ends)."""
    from streamlens.analytics.rules import LineRule

    return float(LineRule(LINE_NAME, LINE).distances(np.asarray([point], np.float64))[0])


# -- the reference -------------------------------------------------------------------------------

def detections_every_frame(detector_cfg, video: str, cache: Path) -> list:
    """The pipeline's detector on every frame of `video`: per frame (xyxy, confidence, class_id),
    cached in `cache` under a key of everything that changes boxes (streamlens.bench.reference's)."""
    from streamlens.bench.reference import cache_key
    from streamlens.detect import build_detector
    from streamlens.sources.file import FileSource

    text = json.dumps({**cache_key(detector_cfg, video), "with": "confidence"}, sort_keys=True)
    path = cache / f"counting-detections-{hashlib.sha1(text.encode()).hexdigest()[:16]}.npz"
    if path.is_file():
        with np.load(path, allow_pickle=False) as d:
            if str(d["key"]) == text:
                off = d["offsets"]
                return [(d["xyxy"][a:b], d["conf"][a:b], d["cls"][a:b]) for a, b in zip(off[:-1], off[1:])]
    detector = build_detector(detector_cfg)
    frames: list = []
    batch: list = []

    def flush() -> None:
        for det in detector.detect(batch):
            frames.append((np.asarray(det.xyxy, np.float32).reshape(-1, 4), np.asarray(det.confidence, np.float32),
                           np.asarray(det.class_id, np.int64)))
        batch.clear()

    try:
        with FileSource("reference", video) as source:
            for frame in source.frames(threading.Event()):
                batch.append(frame)
                if len(batch) >= max(1, detector_cfg.max_batch):
                    flush()
            if batch:
                flush()
    finally:
        detector.close()
    cache.mkdir(parents=True, exist_ok=True)
    offsets = np.concatenate([[0], np.cumsum([len(f[0]) for f in frames])]).astype(np.int64)
    np.savez_compressed(path, key=np.array(text), offsets=offsets, xyxy=np.concatenate([f[0] for f in frames]),
                        conf=np.concatenate([f[1] for f in frames]), cls=np.concatenate([f[2] for f in frames]))
    return frames


def reference_counts(frames: list, names: dict, fps: float, conf: float) -> dict:
    """ByteTrack on every frame's detections, counted by `sv.LineZone`. Variants: `corners`
    (ByteTrack and LineZone with their defaults), `bottom_center` (the same tracks, LineZone
    watching the bottom centre only) and `thresholds` (ByteTrack's activation and high-score
    thresholds at the detector's `conf`, LineZone defaults). Returns per variant the events
    (streamlens' direction words), and per tracker every track's boxes by frame."""
    import supervision as sv
    from trackers import ByteTrackTracker

    start, end = sv.Point(*LINE[0]), sv.Point(*LINE[1])
    setups = {"corners": ("defaults", sv.LineZone(start=start, end=end)),
              "bottom_center": ("defaults", sv.LineZone(start=start, end=end,
                                                        triggering_anchors=[sv.Position.BOTTOM_CENTER])),
              "thresholds": ("thresholds", sv.LineZone(start=start, end=end))}
    trackers = {"defaults": ByteTrackTracker(),
                "thresholds": ByteTrackTracker(track_activation_threshold=conf, high_conf_det_threshold=conf)}
    events: dict = {k: [] for k in setups}
    tracks: dict = {k: {} for k in trackers}  # tracker -> tracker id -> {frame: box}
    for index, (xyxy, confidence, cls) in enumerate(frames):
        det = sv.Detections(xyxy=xyxy.astype(np.float64), confidence=confidence, class_id=cls)
        tracked = {name: t.update(det) for name, t in trackers.items()}
        for name, out in tracked.items():
            for i, tid in enumerate(out.tracker_id.tolist()):
                if tid >= 0:
                    tracks[name].setdefault(tid, {})[index] = out.xyxy[i].tolist()
        for variant, (name, zone) in setups.items():
            out = tracked[name]
            crossed_in, crossed_out = zone.trigger(out)
            for i in np.flatnonzero(crossed_in | crossed_out):
                sv_direction = "in" if crossed_in[i] else "out"
                events[variant].append({"frame": index, "t": round(index / fps, 3),
                                        "direction": SV_TO_STREAMLENS[sv_direction], "sv_direction": sv_direction,
                                        "id": int(out.tracker_id[i]), "label": names[int(out.class_id[i])],
                                        "box": [round(v, 2) for v in out.xyxy[i].tolist()]})
    return {"events": events, "tracks": tracks}


def check_mapping(events: list, tracks: dict) -> dict:
    """Whether each reference crossing's track went the way the in/out mapping says: its box centre
    on its first frame and on the crossing frame, on streamlens' left and right of the line."""
    agree, total = 0, 0
    for e in events:
        boxes = tracks.get(e["id"], {})
        if not boxes:
            continue
        first = boxes[min(boxes)]
        before = side(((first[0] + first[2]) / 2, (first[1] + first[3]) / 2))
        after = side(((e["box"][0] + e["box"][2]) / 2, (e["box"][1] + e["box"][3]) / 2))
        went = "in" if after < 0 < before else "out" if before < 0 < after else None
        total += 1
        agree += went == e["direction"]
    return {"agree": agree, "of": total}


def tally(events: list, classes: set | None) -> dict:
    return {d: sum(1 for e in events if e["direction"] == d and (classes is None or e["label"] in classes))
            for d in DIRECTIONS}


# -- streamlens ----------------------------------------------------------------------------------

def run_pipeline(path: Path, timeout_s: float = 900) -> float:
    """`streamlens run -q PATH` in a process of its own; its wall time in seconds."""
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "streamlens", "run", "-q", str(path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"streamlens run {path.name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return round(time.monotonic() - started, 1)


def read_run(jsonl: Path, fps: float, keep_tracks: bool = False) -> dict:
    """Per stream of a jsonl sink's file: the last frame's counts, the `line_cross` events, the
    `eos` (frames, lost), `keyframes` (how many keyframes' detections were applied: the distinct
    `detected_frame`s; a live keyframe whose detections came late is published as `keyframe:
    false` and applied after), and with `keep_tracks` every track's boxes by frame. An event's `t`
    is its frame index over `fps`, the reference's time base (the clip's `pts` start at 0.133 s)."""
    streams: dict = {}
    for line in jsonl.open():
        m = json.loads(line)
        s = streams.setdefault(m["stream"], {"counts": None, "events": [], "eos": None, "tracks": {},
                                             "detected": set()})
        if m["type"] == "frame":
            s["detected"].add(m.get("detected_frame"))
            s["counts"] = (m.get("counts") or {}).get(LINE_NAME, s["counts"])
            if keep_tracks:
                for o in m["objects"]:
                    if o["id"] >= 0:
                        s["tracks"].setdefault(o["id"], {})[m["frame"]] = o["box"]
        elif m["type"] == "event" and m["event"] == "line_cross":
            o = m["object"]
            s["events"].append({"frame": m["frame"], "t": round(m["frame"] / fps, 3), "direction": m["direction"],
                                "id": o["id"], "label": o["label"], "box": o["box"]})
        elif m["type"] == "eos":
            s["eos"] = {"frames": m["frames"], "reason": m["reason"], "lost": m["lost"]}
    for s in streams.values():
        s["keyframes"] = len(s.pop("detected") - {None})
    return streams


def counts_of(counts: dict | None, classes: set | None) -> dict:
    """`in`/`out` of a line's counts (`classes`: the labels to add up; None: all)."""
    counts = counts or {"in": 0, "out": 0, "classes": {}}
    if classes is None:
        return {d: counts[d] for d in DIRECTIONS}
    return {d: sum(v[d] for k, v in counts.get("classes", {}).items() if k in classes) for d in DIRECTIONS}


# -- matching and pairs --------------------------------------------------------------------------

def same_vehicle(x: dict, y: dict, tracks_x: dict, tracks_y: dict) -> float:
    """How surely crossings `x` and `y` are one vehicle: 0 unless they go the same way within
    MATCH_S; else the mean IoU of their two tracks' boxes over the frames between the two crossings
    (both ends included) where both tracks have one."""
    if x["direction"] != y["direction"] or abs(x["t"] - y["t"]) > MATCH_S:
        return 0.0
    a, b = tracks_x.get(x["id"], {}), tracks_y.get(y["id"], {})
    frames = [f for f in range(min(x["frame"], y["frame"]), max(x["frame"], y["frame"]) + 1) if f in a and f in b]
    return float(np.mean([iou(a[f], b[f]) for f in frames])) if frames else 0.0


def match(a: list, b: list, tracks_a: dict, tracks_b: dict) -> tuple[list, list, list]:
    """Crossings of `a` and `b` paired when they are one vehicle (`same_vehicle` at least
    MATCH_IOU), each at most once, the surest first (Hungarian); returns the pairs (i, j) and the
    indexes left in each."""
    from scipy.optimize import linear_sum_assignment

    score = np.array([[same_vehicle(x, y, tracks_a, tracks_b) for y in b] for x in a]).reshape(len(a), len(b))
    pairs = []
    if len(a) and len(b):
        rows, cols = linear_sum_assignment(-score)
        pairs = [(int(i), int(j)) for i, j in zip(rows, cols) if score[i, j] >= MATCH_IOU]
    left_a = [i for i in range(len(a)) if i not in {p[0] for p in pairs}]
    left_b = [j for j in range(len(b)) if j not in {p[1] for p in pairs}]
    return pairs, left_a, left_b


def why_alone(event: dict, tracks_self: dict, tracks_other: dict, others: list, twins: dict) -> str:
    """Why a crossing has no partner in the other run: the same vehicle crossed in another class
    that has one (`twins`: id of the crossing -> that crossing); the other run's track on the
    vehicle crossed elsewhen or never; or the other run has no track on it at that frame."""
    if id(event) in twins:
        return f"the same vehicle as #{twins[id(event)]['id']} {twins[id(event)]['label']} (a second class)"
    box = tracks_self.get(event["id"], {}).get(event["frame"], event["box"])
    near = [tid for tid, boxes in tracks_other.items() if event["frame"] in boxes
            and iou(box, boxes[event["frame"]]) >= MATCH_IOU]
    if not near:
        return "the other run has no track on it at that frame"
    counted = [o for o in others if o["id"] in near]
    if counted:
        return "the other run's track " + ", ".join(f"#{o['id']} crossed at frame {o['frame']}" for o in counted)
    return "the other run's track " + ", ".join(f"#{t}" for t in near) + " never counted"


def compare(run: dict, tracks: dict, ref_events: list, ref_tracks: dict) -> dict:
    """A streamlens run's crossings against the reference's: the pairs (`match`), each one left
    alone with why (`why_alone`), and the same-vehicle pairs of each (`twin_crossings`)."""
    sl_events = run["events"]
    pairs, sl_only, ref_only = match(sl_events, ref_events, tracks, ref_tracks)
    sl_twins, ref_twins = twin_crossings(sl_events), twin_crossings(ref_events)
    alone = {id(sl_events[i]) for i in sl_only} | {id(ref_events[j]) for j in ref_only}
    second = {}  # a crossing left alone -> the same vehicle's crossing, in another class, that has a partner
    for events, twins in ((sl_events, sl_twins), (ref_events, ref_twins)):
        for i, j in twins:
            for x, y in ((events[i], events[j]), (events[j], events[i])):
                if id(y) not in alone:
                    second[id(x)] = y
    return {"events": sl_events, "streamlens_only_index": sl_only, "reference_only_index": ref_only,
            "pairs": [(sl_events[i]["frame"], ref_events[j]["frame"], sl_events[i]["direction"]) for i, j in pairs],
            "streamlens_only": [{**sl_events[i], "why": why_alone(sl_events[i], tracks, ref_tracks, ref_events, second)}
                                for i in sl_only],
            "reference_only": [{**ref_events[j], "why": why_alone(ref_events[j], ref_tracks, tracks, sl_events,
                                                                  second)} for j in ref_only],
            "twins_streamlens": [(sl_events[i], sl_events[j]) for i, j in sl_twins],
            "twins_reference": [(ref_events[i], ref_events[j]) for i, j in ref_twins]}


def vehicles_of(runs: list[tuple[str, list, dict]]) -> list[dict]:
    """Every crossing of every run (`(name, events, tracks)`, in order) grouped into vehicles: a
    crossing joins the vehicle it is surest to be (`same_vehicle` with one of its crossings, at
    least MATCH_IOU), else starts one. Per vehicle, in the order of their first crossing's frame:
    `direction`, `frame`, `labels`, `counted` (run name -> how many times it counted it: 2 is a
    double count) and `members` (run name, event, tracks)."""
    found: list[dict] = []
    for name, events, tracks in runs:
        for e in events:
            best, surest = None, MATCH_IOU
            for v in found:
                score = max(same_vehicle(e, m, tracks, mt) for _, m, mt in v["members"])
                if score >= surest:
                    best, surest = v, score
            if best is None:
                best = {"members": []}
                found.append(best)
            best["members"].append((name, e, tracks))
    for v in found:
        first = min((m for _, m, _ in v["members"]), key=lambda e: e["frame"])
        v["direction"], v["frame"] = first["direction"], first["frame"]
        v["labels"] = sorted({m["label"] for _, m, _ in v["members"]})
        v["counted"] = {}
        for name, _, _ in v["members"]:
            v["counted"][name] = v["counted"].get(name, 0) + 1
    return sorted(found, key=lambda v: v["frame"])


def per_run_vehicles(found: list[dict], names: list[str]) -> dict:
    """Per run, against the vehicles taken as real (those the reference or streamlens `mv` at
    interval 5 counted: each of them was seen to cross on the contact sheets): the ones it `missed`,
    the ones it counted `twice` (or more), and the `others` it counted (crossings of no real
    vehicle: a vehicle counted again, late, with a box too far off to match, or a phantom)."""
    real = [v for v in found if v["counted"].get("reference") or v["counted"].get("mv-i5")]
    others = [v for v in found if v not in real]

    def tag(v):
        return f"V{v['vehicle']} {v['direction']}"

    return {name: {"missed": [tag(v) for v in real if not v["counted"].get(name)],
                   "twice": [tag(v) for v in real if v["counted"].get(name, 0) > 1],
                   "others": [tag(v) for v in others if v["counted"].get(name)]} for name in names}


def iou(p, q) -> float:
    w = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
    h = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
    inter = w * h
    union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter
    return inter / union if union > 0 else 0.0


def twin_crossings(events: list, frames: int = 5, min_iou: float = 0.5) -> list:
    """Pairs of crossings of one direction by two tracks within `frames` frames whose boxes overlap
    by `min_iou`: one vehicle seen as two classes at once (car and truck), counted twice."""
    twins = []
    for i, x in enumerate(events):
        for j in range(i + 1, len(events)):
            y = events[j]
            if (x["direction"] == y["direction"] and abs(x["frame"] - y["frame"]) <= frames and x["id"] != y["id"]
                    and iou(x["box"], y["box"]) >= min_iou):
                twins.append((i, j))
    return twins


# -- contact sheets ------------------------------------------------------------------------------

def tile(image: np.ndarray, event: dict, track: dict, caption: str, alone: bool) -> np.ndarray:
    """One crossing: the frame around its box, with the line, the box and the anchor's path drawn."""
    import cv2

    x1, y1, x2, y2 = event["box"]
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    half_w = max(130.0, 1.1 * max(x2 - x1, (y2 - y1) * TILE[0] / TILE[1]))
    half_h = half_w * TILE[1] / TILE[0]
    canvas = image.copy()
    cv2.line(canvas, tuple(int(v) for v in LINE[0]), tuple(int(v) for v in LINE[1]), (0, 0, 255), 2)
    f = event["frame"]
    for k in range(f - 30, f + 16):
        box = track.get(k)
        if box is not None:
            colour = (0, 255, 255) if k <= f else (255, 255, 0)
            cv2.circle(canvas, (int((box[0] + box[2]) / 2), int(box[3])), 2, colour, -1)
    cv2.rectangle(canvas, (int(x1), int(y1)), (int(x2), int(y2)), (0, 255, 0), 2)
    h, w = canvas.shape[:2]
    left, top = int(max(0, min(w - 2 * half_w, cx - half_w))), int(max(0, min(h - 2 * half_h, cy - half_h)))
    crop = canvas[top:top + int(2 * half_h), left:left + int(2 * half_w)]
    crop = cv2.resize(crop, TILE, interpolation=cv2.INTER_AREA)
    cv2.rectangle(crop, (0, 0), (TILE[0], 18), (0, 0, 0), -1)
    cv2.putText(crop, caption, (3, 13), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (255, 255, 255), 1, cv2.LINE_AA)
    if alone:
        cv2.rectangle(crop, (0, 0), (TILE[0] - 1, TILE[1] - 1), (0, 0, 255), 4)
    return crop


def contact_sheets(video: str, sheets: dict, folder: Path) -> dict:
    """`sheets`: name -> list of (event, track, caption, alone). Decodes the clip once, writes
    `<folder>/<name>.png` (SHEET_COLUMNS tiles a row, in event order); returns name -> path."""
    import cv2

    from streamlens.sources.file import FileSource

    wanted: dict = {}
    for name, items in sheets.items():
        for k, item in enumerate(items):
            wanted.setdefault(item[0]["frame"], []).append((name, k))
    tiles = {name: [None] * len(items) for name, items in sheets.items()}
    with FileSource("sheet", video) as source:
        for frame in source.frames(threading.Event()):
            for name, k in wanted.get(frame.index, ()):
                tiles[name][k] = tile(frame.image, *sheets[name][k])
            if frame.index >= max(wanted, default=-1):
                break
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, row in tiles.items():
        blank = np.zeros((TILE[1], TILE[0], 3), np.uint8)
        row = [t if t is not None else blank for t in row] or [blank]
        row += [blank] * (-len(row) % SHEET_COLUMNS)
        grid = np.vstack([np.hstack(row[r:r + SHEET_COLUMNS]) for r in range(0, len(row), SHEET_COLUMNS)])
        paths[name] = folder / f"{name}.png"
        cv2.imwrite(str(paths[name]), grid)
    return {k: str(v) for k, v in paths.items()}


def slit_scan(video: str, marks: dict, path: Path) -> str:
    """The pixels under the line on every frame, one row per frame (time runs down, the line's first
    point on the left): each vehicle that crosses leaves one streak, whatever any detector saw. On
    it, each run's crossings in `marks` (name -> (events, BGR colour, marker)) where its box's
    bottom centre meets the line. Written to `path`; returns its path."""
    import cv2

    from streamlens.sources.file import FileSource

    (ax, ay), (bx, by) = LINE
    length = int(np.hypot(bx - ax, by - ay))
    t = np.linspace(0.0, 1.0, length)
    rows = []
    with FileSource("slit", video) as source:
        for frame in source.frames(threading.Event()):
            h, w = frame.height, frame.width
            xs = np.clip(ax + t * (bx - ax), 0, w - 1).astype(int)
            ys = np.clip(ay + t * (by - ay), 0, h - 1).astype(int)
            rows.append(frame.image[ys, xs])
    image = np.ascontiguousarray(np.stack(rows))
    for events, colour, marker in marks.values():
        for e in events:
            x1, _, x2, y2 = e["box"]
            along = ((x1 + x2) / 2 - ax) * (bx - ax) + (y2 - ay) * (by - ay)
            cv2.drawMarker(image, (int(along / length), e["frame"]), colour, marker, 12, 2)
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), image)
    return str(path)


# -- the page ------------------------------------------------------------------------------------

def _versions() -> dict:
    out = {"python": platform.python_version()}
    for package in ("streamlens", "supervision", "trackers", "onnxruntime", "av", "numpy"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = "not installed"
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                       text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return out


def _row(label: str, interval: str, counts: dict, ref: dict, eye: dict) -> str:
    diffs = {d: abs(counts[d] - ref[d]) for d in DIRECTIONS}
    off = {d: abs(counts[d] - eye[d]) for d in DIRECTIONS}
    within = "yes" if max(diffs.values()) <= TOLERANCE else "no"
    near = "yes" if max(off.values()) <= TOLERANCE else "no"
    return (f"| {label} | {interval} | {counts['in']:g} | {counts['out']:g} | {diffs['in']:g} / {diffs['out']:g} | "
            f"{within} | {off['in']:g} / {off['out']:g} | {near} |")


def _table(data: dict, key: str) -> list[str]:
    """Cars (`key` = "cars") or all vehicles ("vehicles"): the count by eye, the reference rows, then
    each streamlens run, then the live streams, each against the reference (ByteTrack + LineZone
    defaults) and against the count by eye."""
    ref, eye = data["reference"]["corners"][key], BY_EYE[key]
    lines = ["| method | interval | in | out | \\|diff\\| in / out vs reference | within 1 car? | "
             "\\|diff\\| in / out vs by eye | within 1 car of by eye? |",
             "|---|---|---|---|---|---|---|---|",
             _row("by eye on the contact sheets (see Eye check)", "-", eye, ref, eye),
             _row("reference: YOLOX-Nano every frame, ByteTrack, sv.LineZone defaults (4 corners)", "1", ref, ref, eye),
             _row("ByteTrack defaults, sv.LineZone bottom centre anchor", "1", data["reference"]["bottom_center"][key],
                  ref, eye),
             _row(f"ByteTrack thresholds at the detector's conf ({data['conf']:g}), sv.LineZone defaults", "1",
                  data["reference"]["thresholds"][key], ref, eye)]
    for run in data["runs"]:
        lines.append(_row(f"streamlens `{run['motion']}`" + (" (shipped keyframes)" if run["adaptive"] else ""),
                          f"{run['interval_label']} ({run['keyframes']} keyframes)", run[key], ref, eye))
    for live in data.get("live", []):
        for name, s in live["streams"].items():
            lines.append(_row(f"streamlens live x{len(live['streams'])}, run {live['run']}, {name}",
                              f"{live['interval_label']} ({s['keyframes']} keyframes)", s[key], ref, eye))
        lines.append(_row(f"streamlens live x{len(live['streams'])}, run {live['run']}, median of streams",
                          live["interval_label"], live["median"][key], ref, eye))
    return lines


def _answer(data: dict) -> str:
    """The target in one paragraph: every streamlens file run at a fixed interval against the count by
    eye (issue 26: exactly, at intervals 1, 3, 5 and 10), and `mv` at interval 5 against the reference."""
    fixed = [r for r in data["runs"] if not r["adaptive"]]
    if not fixed:
        return "(no streamlens run at a fixed interval: the target's rows are missing)"
    exact = {key: [r["name"] for r in fixed if all(r[key][d] == BY_EYE[key][d] for d in DIRECTIONS)]
             for key in ("cars", "vehicles")}
    text = (f"**Target** (issue 26): the count by eye exactly ({BY_EYE['vehicles']['in']} in / "
            f"{BY_EYE['vehicles']['out']} out, all vehicle classes; {BY_EYE['cars']['in']} / {BY_EYE['cars']['out']} "
            f"cars and vans) at intervals 1, 3, 5 and 10. All vehicle classes exact in {len(exact['vehicles'])} of "
            f"{len(fixed)} fixed-interval runs ({', '.join(exact['vehicles']) or 'none'}); class car exact in "
            f"{len(exact['cars'])} ({', '.join(exact['cars']) or 'none'}).")
    run = next((r for r in fixed if r["name"] == "mv-i5"), None)
    if run is not None:
        sl, ref = run["cars"], data["reference"]["corners"]["cars"]
        text += (f" `mv` at interval 5 counts {sl['in']} cars in / {sl['out']} out, the reference (ByteTrack, "
                 f"LineZone) {ref['in']} / {ref['out']} (Eye check says why it is off).")
    return text


def _load(values) -> str:
    return "/".join(f"{v:g}" for v in values) if values else "not recorded"


def _short(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return path


def _vehicle_table(data: dict) -> list[str]:
    runs = [r["name"] for r in data["runs"] if not r["adaptive"]]
    head = ["reference", "mv-i5", *[r for r in runs if r != "mv-i5"], "reference-bottom_center",
            "reference-thresholds"]
    lines = ["| vehicle | direction | frame | labels | " + " | ".join(f"`{h}`" for h in head) + " |",
             "|---|---|---|---|" + "---|" * len(head)]
    for v in data["vehicles_found"]:
        lines.append(f"| V{v['vehicle']} | {v['direction']} | {v['frame']} | {', '.join(v['labels'])} | "
                     + " | ".join(str(v["counted"].get(h, "-")) for h in head) + " |")
    return lines


def _crossing(e: dict) -> str:
    return f"frame {e['frame']} ({e['t']:.2f} s) {e['direction']} #{e['id']} {e['label']}"


def write_page(data: dict, out: Path) -> None:
    """The results page; a `## Eye check` section already in `out` is kept."""
    old = out.read_text() if out.exists() else ""
    eye = old[old.index("\n## Eye check"):] if "\n## Eye check" in old else "\n## Eye check\n\n(not written yet)\n"
    m, v, cmp = data["machine"], data["versions"], data["comparison"]
    lines = [
        "# Counting across a line on real video",
        "",
        f"Command: `{data['command']}` ({data['seconds_total']:.0f} s in all)  ",
        f"Machine: {machine_line(m)}, {m['system']} (load average 1/5/15 min before {_load(m.get('load_before'))}, "
        f"after {_load(m.get('load_after'))})  ",
        f"Date: {data['date']}  ",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + "  ",
        f"Clip: {Path(data['video']).name} (1280x720 H.264, 30 fps, {data['frames']} frames); detector: the "
        f"`detector` section of pipelines/highway_yolox.yaml ({data['detector_summary']}).  ",
        f"Line `{LINE_NAME}`: {list(map(list, LINE))} (source pixels), from the frame's top edge above the far "
        "carriageway to its bottom right corner past the near one's shoulder, across all four lanes (chosen by "
        "looking, ends on the frame's border so that supervision's limits hold whole boxes: see the tool's "
        "docs); `in` = away from the camera (near carriageway), `out` = towards it (far carriageway), as "
        "supervision names them (streamlens named them the other way round before issue 26).",
        "",
        "Reference: YOLOX-Nano on every frame, the `trackers` package's `ByteTrackTracker()` (defaults), "
        "supervision's `sv.LineZone(start, end)` (defaults: the four box corners, "
        "`minimum_crossing_threshold=1`); beside it the same tracks counted at the bottom centre (streamlens' "
        "anchor), and ByteTrack with `track_activation_threshold` and `high_conf_det_threshold` at the "
        "detector's conf, as streamlens' tracker sets its own. supervision's `in` is streamlens' `in`: "
        f"checked on {data['reference']['mapping']['agree']} of {data['reference']['mapping']['of']} reference "
        "crossings (the track's box centre before and after), and by eye on the contact sheet. streamlens: "
        "file mode (`streamlens run` on a generated pipeline, nothing dropped), fixed keyframe intervals "
        "(`adaptive: false`) unless the row says the shipped keyframes (interval 5, adaptive up to 15); live: "
        f"{data['live_streams']} paced copies of the clip in one pipeline, the shipped keyframes, `mv`.",
        "",
        _answer(data),
        "",
        "## Cars (class car): the target",
        "",
        *_table(data, "cars"),
        "",
        "## All vehicle classes the pipeline keeps (car, truck, bus, motorbike)",
        "",
        *_table(data, "vehicles"),
        "",
        "A vehicle the detector still boxes as two classes at once (overlapping by less than `agnostic_nms: auto` "
        "merges) is two tracks in both trackers and counts twice here. Same-vehicle pairs among the crossings: "
        "reference "
        f"{len(cmp['twins_reference'])}, streamlens interval 5 `mv` {len(cmp['twins_streamlens'])}.",
    ]
    for live in data.get("live", []):
        lines += ["", f"Live run {live['run']}: {live['seconds']:.0f} s; per stream, frames published / lost "
                  "(every cause): " + ", ".join(f"{k} {st['frames']}/{st['lost']}" for k, st in live["streams"].items())
                  + "."]
    lines += [
        "",
        "Keyframes: how many keyframes' detections the run applied (distinct `detected_frame`s).",
        "",
        "## Crossings, streamlens interval 5 `mv` against the reference (all vehicle classes)",
        "",
        f"One vehicle when the direction is the same, the times within {MATCH_S:g} s and the two tracks' boxes "
        f"overlap by IoU {MATCH_IOU:g} on average between the two crossings: {len(cmp['pairs'])} pairs; "
        f"streamlens only: {len(cmp['streamlens_only'])}; reference only: {len(cmp['reference_only'])}.",
        "",
        "streamlens only:",
        "",
        *([f"- {_crossing(e)}: {e['why']}" for e in cmp["streamlens_only"]] or ["- none"]),
        "",
        "reference only:",
        "",
        *([f"- {_crossing(e)}: {e['why']}" for e in cmp["reference_only"]] or ["- none"]),
        "",
        "## Every vehicle any run counted",
        "",
        "The crossings of the reference variants and the streamlens file runs at fixed intervals grouped into "
        "vehicles the same way; a number is how many times that run counted the vehicle (2: twice), `-` not at "
        "all.",
        "",
        *_vehicle_table(data),
        "",
        "Per run, against the vehicles taken as real (every one the reference or streamlens `mv` at interval 5 "
        "counted: each was seen to cross on the contact sheets): the ones it missed, the ones it counted twice "
        "(two tracks of two classes, or one track crossing back and forth), and its other crossings (no vehicle "
        "taken as real; see Eye check for what each is).",
        "",
        "| run | missed | counted twice | other crossings |",
        "|---|---|---|---|",
        *[f"| `{name}` | {', '.join(r['missed']) or '-'} | {', '.join(r['twice']) or '-'} | "
          f"{', '.join(r['others']) or '-'} |" for name, r in data.get("per_run_vehicles", {}).items()],
        "",
        "Contact sheets (not kept in git): " + ", ".join(f"`{_short(p)}`" for p in data["sheets"].values()) + ". "
        "One tile per crossing (per vehicle in the last), in order: the line red, the box green, the track's "
        "anchor (bottom centre) over the 30 frames before the crossing yellow and the 15 after cyan. Captions: "
        "`k direction #id label f<frame>`, a red frame when the other run has no partner; on the vehicles' "
        "sheet `V<k> direction f<frame> ref± i5<times> sl<runs counting it>/<runs>`, a red frame when the "
        "reference did not count it. `slit.png`: the pixels under the line on every frame, a row per frame "
        "(time down, the line's top end left): every vehicle that crosses leaves a streak; streamlens `mv` "
        "interval 5's crossings are green diamonds, the reference's red crosses.",
    ]
    out.write_text("\n".join(lines) + "\n" + eye)


# -- main ----------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:3]))
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default: %(default)s)")
    parser.add_argument("--intervals", default="1,3,5,10", help="fixed keyframe intervals (default: %(default)s)")
    parser.add_argument("--trackers", default="mv,flow,kalman", help="motion models (default: %(default)s)")
    parser.add_argument("--live-streams", type=int, default=6, help="paced copies of the clip in the live run")
    parser.add_argument("--live-runs", type=int, default=1, help="how many live runs (default: %(default)s)")
    parser.add_argument("--no-live", action="store_true", help="skip the live run")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "streamlens_bench_counting",
                        help="the detect-every-frame cache (default: %(default)s)")
    parser.add_argument("--sheets", type=Path, default=REPO / "out" / "counting",
                        help="where the contact sheets go (default: %(default)s)")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the generated pipeline files and their jsonl output here (default: a temporary "
                             "folder, removed at the end)")
    parser.add_argument("--out", type=Path, default=RESULTS / "counting.md", help="the results page (and .json)")
    parser.add_argument("--page-only", action="store_true", help="rewrite the page from the json beside it")
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.page_only:
        write_page(json.loads(args.out.with_suffix(".json").read_text()), args.out)
        return 0
    if "mv" not in args.trackers.split(",") or "5" not in args.intervals.split(","):
        parser.error("--trackers must include mv and --intervals 5: the target's run, which the rest is compared with")
    video, _ = need(args.data / CLIP, args.data / MODEL)
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        work = args.work.resolve()
    else:
        work = Path(tempfile.mkdtemp(prefix="streamlens_counting_"))
    try:
        return _bench(args, work, video)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def _bench(args, work: Path, video: Path) -> int:
    """Everything `main` runs, its files in `work`."""
    from streamlens.config import load_pipeline

    started = time.monotonic()
    load_before = os.getloadavg()
    cars, vehicles = {"car"}, None
    detector = detector_section(args.data)
    source = [{"name": "highway", "uri": str(video)}]

    print("reference: detector on every frame, ByteTrack, sv.LineZone ...", flush=True)
    cfg = load_pipeline(pipeline_file(work, "reference", source, detector, {"interval": 1}, "mv"))
    frames = detections_every_frame(cfg.detector, str(video), args.cache)
    names = dict(enumerate(COCO_NAMES))
    with av.open(str(video)) as container:
        fps = float(container.streams.video[0].average_rate)
    ref = reference_counts(frames, names, fps, cfg.detector.conf)
    reference = {v: {"cars": tally(ev, cars), "vehicles": tally(ev, vehicles), "events": ev}
                 for v, ev in ref["events"].items()}
    reference["mapping"] = check_mapping(ref["events"]["corners"], ref["tracks"]["defaults"])
    print(f"  defaults {reference['corners']['cars']} cars, mapping {reference['mapping']}", flush=True)

    runs, tracks = [], {}
    plan = [(m, n, False) for m in args.trackers.split(",") for n in map(int, args.intervals.split(","))]
    plan.append(("mv", 5, True))
    for motion, interval, adaptive in plan:
        keyframes = shipped_keyframes() if adaptive else {"interval": interval, "adaptive": False}
        name = f"{motion}-i{interval}" + ("-shipped" if adaptive else "")
        seconds = run_pipeline(pipeline_file(work, name, source, detector, keyframes, motion))
        s = read_run(work / f"{name}.jsonl", fps, keep_tracks=True)["highway"]
        tracks[name] = s["tracks"]
        runs.append({"name": name, "motion": motion, "interval": interval, "adaptive": adaptive, "seconds": seconds,
                     "interval_label": f"{keyframes['interval']}" + (
                         f" adaptive to {keyframes.get('max_interval', 15)}" if adaptive else ""),
                     "cars": counts_of(s["counts"], cars), "vehicles": counts_of(s["counts"], vehicles),
                     "keyframes": s["keyframes"], "counts": s["counts"], "events": s["events"], "eos": s["eos"]})
        print(f"  {name}: {runs[-1]['cars']} cars, {runs[-1]['vehicles']} vehicles, {seconds} s", flush=True)

    live_runs = []
    if not args.no_live:
        sources = [{"name": f"s{i}", "uri": str(video), "live": True} for i in range(args.live_streams)]
        for r in range(1, args.live_runs + 1):
            name = f"live-{args.live_streams}-run{r}"
            seconds = run_pipeline(pipeline_file(work, name, sources, detector, shipped_keyframes(), "mv"))
            streams = read_run(work / f"{name}.jsonl", fps)
            per = {k: {"cars": counts_of(s["counts"], cars), "vehicles": counts_of(s["counts"], vehicles),
                       "keyframes": s["keyframes"], "frames": s["eos"]["frames"] if s["eos"] else None,
                       "lost": sum(s["eos"]["lost"].values()) if s["eos"] else None}
                   for k, s in sorted(streams.items())}
            median = {key: {d: statistics.median(p[key][d] for p in per.values()) for d in DIRECTIONS}
                      for key in ("cars", "vehicles")}
            live_runs.append({"run": r, "seconds": seconds, "streams": per, "median": median,
                              "interval_label": f"{shipped_keyframes()['interval']} adaptive to "
                                                f"{shipped_keyframes().get('max_interval', 15)}, live"})
            print(f"  {name}: median {median}, {seconds} s", flush=True)

    comparison = compare(next(r for r in runs if r["name"] == "mv-i5"), tracks["mv-i5"],
                         reference["corners"]["events"], ref["tracks"]["defaults"])
    members = [("reference", reference["corners"]["events"], ref["tracks"]["defaults"])]
    members += sorted(((r["name"], r["events"], tracks[r["name"]]) for r in runs if not r["adaptive"]),
                      key=lambda m: m[0] != "mv-i5")  # the adaptive run is not repeatable: left out
    members.append(("reference-bottom_center", reference["bottom_center"]["events"], ref["tracks"]["defaults"]))
    members.append(("reference-thresholds", reference["thresholds"]["events"], ref["tracks"]["thresholds"]))
    found = vehicles_of(members)

    def items(events, tracks, alone):
        return [(e, tracks.get(e["id"], {}), f"{k} {e['direction']} #{e['id']} {e['label']} f{e['frame']}",
                 k in alone) for k, e in enumerate(events)]

    def vehicle_tile(k, v):
        name, event, tracks_of = next((m for m in v["members"] if m[0] == "reference"),
                                      next((m for m in v["members"] if m[0] == "mv-i5"), v["members"][0]))
        fixed = [r for r in runs if not r["adaptive"]]
        by_sl = sum(1 for r in fixed if r["name"] in v["counted"])
        caption = (f"V{k} {v['direction']} f{v['frame']} ref{'+' if 'reference' in v['counted'] else '-'} "
                   f"i5{v['counted'].get('mv-i5', 0)} sl{by_sl}/{len(fixed)}")
        return event, tracks_of.get(event["id"], {}), caption, "reference" not in v["counted"]

    sl5 = comparison["events"]
    sheets = contact_sheets(str(video), {
        "streamlens_mv_i5": items(sl5, tracks["mv-i5"], set(comparison["streamlens_only_index"])),
        "reference_bytetrack": items(reference["corners"]["events"], ref["tracks"]["defaults"],
                                     set(comparison["reference_only_index"])),
        "vehicles": [vehicle_tile(k, v) for k, v in enumerate(found)]}, args.sheets)
    sheets["slit"] = slit_scan(str(video), {"mv-i5": (sl5, (0, 255, 0), 3), "reference": (
        reference["corners"]["events"], (0, 0, 255), 0)}, args.sheets / "slit.png")
    vehicles_found = [{"vehicle": k, "direction": v["direction"], "frame": v["frame"], "labels": v["labels"],
                       "counted": v["counted"]} for k, v in enumerate(found)]
    per_run = per_run_vehicles(vehicles_found, [m[0] for m in members])

    det = cfg.detector
    data = {"command": command_line([sys.argv[0], *args.argv]), "date": now(),
            "machine": {**machine(),
                        "load_before": [round(v, 2) for v in load_before],
                        "load_after": [round(v, 2) for v in os.getloadavg()]},
            "versions": _versions(), "video": str(video), "frames": len(frames), "line": LINE,
            "conf": det.conf, "detector_summary": f"onnx, conf {det.conf}, classes {detector['classes']}, "
                                                  f"resize {det.resize}, threads {det.threads}",
            "reference": reference, "runs": runs, "live": live_runs, "live_streams": args.live_streams,
            "comparison": {k: v for k, v in comparison.items() if k != "events"}, "vehicles_found": vehicles_found,
            "per_run_vehicles": per_run,
            "sheets": sheets, "seconds_total": round(time.monotonic() - started, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    write_page(data, args.out)
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}; contact sheets {', '.join(sheets.values())}; "
          f"{data['seconds_total']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
