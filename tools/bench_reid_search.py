"""Search by example across two cameras made from one clip (issue 50, point 4): tools/results/reid_search.md.

The cameras: the top and bottom halves (1280x360 each) of the shared highway clip, written once as
H.264 files; two sources of one pipeline with `reid: {across: [top, bottom], clock: media}` (the
weight-free descriptor), YOLOX-Nano on every 5th keyframe (adaptive, at most 15), the `mv` tracker,
and `runtime.history`, which keeps each track's `reid` vector. Identities: the whole frame tracked
with the same detector on every frame; a half's track is the whole-frame track its boxes (moved
into the whole frame) overlap most, at a mean IoU of at least `MIN_MEAN_IOU`.

For every half track with a vector kept whose identity the other camera also has a track of (with a
vector), `search.by_track` (what `/api/search` and `streamlens search` answer) is asked for the top 3:
the share whose top 3 hold one of the other camera's tracks of that identity, the same for the top 1,
and for the top 3 of the other camera's tracks alone (the query's own camera's left out of the
ranking). Also the time one search of the top 3 takes (the median over the queries).

Run (from the repository's root):
    nice -n 10 python tools/bench_reid_search.py
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from streamlens.bench import harness
from streamlens.bench.harness import RESULTS, VIDEOS, YOLOX_NANO, need
from streamlens.history import search

PAGE = RESULTS / "reid_search.md"
HALF = 360
MIN_MEAN_IOU = 0.3
DETECTOR = {"backend": "onnx", "model": None, "conf": 0.3, "resize": "bucket", "threads": 1,
            "classes": ["car", "truck", "bus", "motorcycle"]}


def halves(clip: Path, folder: Path) -> tuple[Path, Path]:
    """The top and bottom halves of `clip` as H.264 files in `folder` (made once, kept)."""
    import av

    paths = folder / "top.mp4", folder / "bottom.mp4"
    if all(p.exists() for p in paths):
        return paths
    with av.open(str(clip)) as source:
        rate = source.streams.video[0].average_rate
        outputs = [av.open(str(p), "w") for p in paths]
        encoders = []
        for out in outputs:
            stream = out.add_stream("libx264", rate=rate)
            stream.width, stream.height, stream.pix_fmt = 1280, HALF, "yuv420p"
            stream.options = {"crf": "18", "preset": "veryfast", "g": "30"}
            encoders.append(stream)
        for frame in source.decode(video=0):
            image = frame.to_ndarray(format="bgr24")
            for out, stream, part in zip(outputs, encoders, (image[:HALF], image[HALF:2 * HALF])):
                for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(part), format="bgr24")):
                    out.mux(packet)
        for out, stream in zip(outputs, encoders):
            for packet in stream.encode():
                out.mux(packet)
            out.close()
    return paths


def run(tree: dict, folder: Path, name: str, reuse: bool) -> list[dict]:
    """`streamlens run` on `tree` with a JSONL sink in `folder`; its messages (`reuse`: an earlier
    run's, when its file is there)."""
    import yaml

    out = folder / f"{name}.jsonl"
    if not (reuse and out.exists()):
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**tree, "sinks": [{"type": "jsonl", "path": str(out)}]}))
        subprocess.run([sys.executable, "-m", "streamlens", "run", "-q", str(path)], check=True,
                       stdout=subprocess.DEVNULL)
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def boxes_of(messages: list[dict], dy: float = 0.0) -> dict:
    """{(stream, id): {frame: box moved down by dy}}."""
    found = defaultdict(dict)
    for m in messages:
        if m.get("type") == "frame":
            for obj in m["objects"]:
                if obj["id"] >= 0:
                    x1, y1, x2, y2 = obj["box"]
                    found[(m["stream"], obj["id"])][m["frame"]] = (x1, y1 + dy, x2, y2 + dy)
    return found


def _iou(a, b) -> float:
    w, h = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    return w * h / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h)


def identities(half: dict, whole: dict) -> dict:
    """Each half track -> the whole-frame track it overlaps most (absent below `MIN_MEAN_IOU`)."""
    by_frame = defaultdict(list)
    for key, frames in whole.items():
        for f, box in frames.items():
            by_frame[f].append((key, box))
    out = {}
    for key, frames in half.items():
        total = defaultdict(float)
        for f, box in frames.items():
            for other, wbox in by_frame.get(f, ()):
                total[other] += _iou(box, wbox)
        if total:
            best = max(total, key=total.get)
            if total[best] / len(frames) >= MIN_MEAN_IOU:
                out[key] = best
    return out


def measure(db: sqlite3.Connection, ident: dict) -> dict:
    kept = {(s, t) for s, t in db.execute("SELECT DISTINCT t.stream, t.track FROM tracks t JOIN vectors v "
                                          "ON v.track = t.id WHERE v.name = 'reid'")}
    by_identity = defaultdict(set)
    for key in kept:
        if key in ident:
            by_identity[ident[key]].add(key)
    queries = [k for k in kept if k in ident and any(o[0] != k[0] for o in by_identity[ident[k]])]
    top1 = top3 = other3 = 0
    seconds = []
    for stream, track in sorted(queries):
        started = time.perf_counter()
        search.by_track(db, stream, track, 3, name="reid")
        seconds.append(time.perf_counter() - started)
        found = search.by_track(db, stream, track, search.MAX_LIMIT, name="reid")
        twins = {o for o in by_identity[ident[(stream, track)]] if o[0] != stream}
        ranked = [(r["stream"], r["id"]) for r in found[1]]
        top1 += bool(ranked) and ranked[0] in twins
        top3 += any(r in twins for r in ranked[:3])
        other3 += any(r in twins for r in [r for r in ranked if r[0] != stream][:3])
    share = (lambda n: round(n / len(queries), 3) if queries else None)
    return {"kept": len(kept), "queries": len(queries), "top1": top1, "top3": top3, "other_top3": other3,
            "share_top1": share(top1), "share_top3": share(top3), "share_other_top3": share(other3),
            "ms_per_search": round(1000 * statistics.median(seconds), 2) if seconds else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "streamlens_bench_reid_search")
    parser.add_argument("--reuse", action="store_true", help="the runs' JSONL and history of an earlier call")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    clip, model = need(VIDEOS / "highway_720p30.mp4", YOLOX_NANO / "yolox_nano.onnx")
    args.folder.mkdir(parents=True, exist_ok=True)
    top, bottom = halves(clip, args.folder)
    base = {"detector": {**DETECTOR, "model": str(model)}, "tracker": {"motion": "mv"}}
    whole = boxes_of(run({**base, "sources": [{"name": "whole", "uri": str(clip), "live": False}],
                          "keyframes": {"interval": 1}}, args.folder, "reference", args.reuse))
    history = args.folder / "history.db"
    if not args.reuse:
        history.unlink(missing_ok=True)
    cams = run({**base, "sources": [{"name": "top", "uri": str(top), "live": False},
                                    {"name": "bottom", "uri": str(bottom), "live": False}],
                "keyframes": {"interval": 5, "adaptive": True, "max_interval": 15},
                "reid": {"across": ["top", "bottom"], "clock": "media"},
                "runtime": {"history": {"path": str(history)}}}, args.folder, "cameras", args.reuse)
    half = {**boxes_of([m for m in cams if m.get("stream") == "top"]),
            **boxes_of([m for m in cams if m.get("stream") == "bottom"], dy=HALF)}
    with sqlite3.connect(history) as db:
        found = measure(db, identities(half, whole))
    found["tracks"] = len(half)
    found["load_average"] = harness.load_average()
    print(json.dumps(found, indent=1))
    if not args.no_write:
        write(found)
    return 0


def write(found: dict) -> None:
    text = harness.header("Search by example across two cameras") + f"""
Load average {found['load_average']:.2f} when it ended (a shared machine): the milliseconds are upper
bounds; the ranks do not depend on speed.

The top and bottom halves of highway_720p30.mp4 (1280x360 each), two sources of one pipeline with
`reid: {{across: [top, bottom], clock: media}}` (the weight-free descriptor) and `runtime.history`;
YOLOX-Nano at conf 0.3 on keyframes every 5th frame (adaptive, at most 15), `mv` tracker.
Identities: the whole frame tracked with the same detector on every frame; a half's track is the
whole-frame track it overlaps most (mean IoU at least {MIN_MEAN_IOU}). A query is a half's track
with a `reid` vector kept whose identity has a track with a vector on the other camera; it is asked
`search.by_track` (what `/api/search` and `streamlens search` answer: every kept track of both
cameras, the query left out).

| | value |
|---|---|
| half tracks (both cameras) | {found['tracks']} |
| tracks with a reid vector kept | {found['kept']} |
| queries (seen by both cameras) | {found['queries']} |
| other camera's track first | {found['top1']} ({found['share_top1']}) |
| **other camera's track in the top 3** | **{found['top3']} ({found['share_top3']})** |
| in the top 3 of the other camera's tracks alone | {found['other_top3']} ({found['share_other_top3']}) |
| ms per search (median, {found['kept']} vectors) | {found['ms_per_search']} |

Target (issue 50): at least 0.8 in the top 3. Where it is missed, the tracks ranked above the other
camera's are mostly other vehicles on the query's own camera: the descriptor's cosines are close
together (0.95 to 0.99 for most pairs of vehicles), and a vehicle seen far off in the top half and
near in the bottom half looks less alike to it than two vehicles seen at the same distance do.
Centring the vectors on their mean before the cosine, tried by hand on the same history (not by
this tool), moved the top-3 share from 0.5 to 0.55 (standardising each component: 0.6); neither is
in the search.
"""
    harness.write_page(PAGE, text)
    print(f"wrote {PAGE}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
