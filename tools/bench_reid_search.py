"""Search by example across two cameras cut from one clip (issue 50, point 4): tools/results/reid_search.md.

The cases and their runs are tools/bench_reid.py's (kept in its folder: `--reuse` takes them): two
views of one clip as two sources of one pipeline with `reid: {across: [...], clock: media}` (the
weight-free descriptor) and `runtime.history`, which keeps each track's `reid` vector and
`global_id`. Identities: the whole clip tracked with the same detector on every frame; a camera's
track is the whole-frame track its boxes (cut to its view) overlap most, at a mean IoU of at least
`MIN_MEAN_IOU`.

For every camera track with a vector kept whose identity the other camera also has a track of (with
a vector), the top 3 is asked three ways: `search.by_track` (what `/api/search` and `streamlens
search` answer: the tracks `reid.across` joined to it first, then the rest by similarity), the same
with `others=True` (`/api/search?...&others=1`: the other cameras only), and `search.similar` alone
(similarity only: what the search answered before the joined tracks came first). The share whose top
3 holds one of the other camera's tracks of that identity, the same for the top 1, and the time one
search of the top 3 takes (the median over the queries).

Run (from the repository's root, after or instead of tools/bench_reid.py):
    nice -n 10 python tools/bench_reid_search.py --reuse
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import bench_reid as bench

from streamlens.bench import harness
from streamlens.bench.harness import RESULTS
from streamlens.history import search

PAGE = RESULTS / "reid_search.md"
MIN_MEAN_IOU = bench.MIN_MEAN_IOU


def measure(db: sqlite3.Connection, ident: dict) -> dict:
    kept = {(s, t) for s, t in db.execute("SELECT DISTINCT t.stream, t.track FROM tracks t JOIN vectors v "
                                          "ON v.track = t.id WHERE v.name = 'reid'")}
    by_identity = defaultdict(set)
    for key in kept:
        if ident.get(key) is not None:
            by_identity[ident[key]].add(key)
    queries = [k for k in kept if ident.get(k) is not None and any(o[0] != k[0] for o in by_identity[ident[k]])]
    hits = defaultdict(int)
    seconds = []
    for stream, track in sorted(queries):
        twins = {o for o in by_identity[ident[(stream, track)]] if o[0] != stream}
        started = time.perf_counter()
        row, ranked = search.by_track(db, stream, track, 3, name="reid")
        seconds.append(time.perf_counter() - started)
        _, others = search.by_track(db, stream, track, 3, name="reid", others=True)
        alone = search.similar(db, search.tracks.find(db, stream, track, "reid", None)[1], "reid", 3, exclude=row["key"])
        for way, found in (("by_track", ranked), ("others", others), ("similarity", alone)):
            keys = [(r["stream"], r["id"]) for r in found]
            hits[f"{way}_top1"] += bool(keys) and keys[0] in twins
            hits[f"{way}_top3"] += any(k in twins for k in keys[:3])
    share = {k: round(v / len(queries), 3) if queries else None for k, v in hits.items()}
    return {"kept": len(kept), "queries": len(queries), "hits": dict(hits), "share": share,
            "ms_per_search": round(1000 * statistics.median(seconds), 2) if seconds else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "streamlens_bench_reid")
    parser.add_argument("--cases", nargs="*", default=bench.ONE_PASS, choices=list(bench.CASES),
                        help="default: every case but the looped (bench_reid.ONE_PASS)")
    parser.add_argument("--reuse", action="store_true", help="tools/bench_reid.py's runs, where their files are")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    found = {}
    for name in args.cases:
        case = bench.CASES[name]
        reference, cams = bench.run_case(case, args.folder, args.reuse)
        whole, _ = bench.tracks_of(reference)
        half, _ = bench.camera_tracks(case, cams)
        with sqlite3.connect(args.folder / name / "history.db") as db:
            found[name] = measure(db, bench.map_tracks(half, whole, case.views))
        found[name]["tracks"] = len(half)
        print(name, json.dumps(found[name]), file=sys.stderr)
    found["load_average"] = harness.load_average()
    print(json.dumps(found, indent=1))
    if not args.no_write:
        write(found)
    return 0


def write(found: dict) -> None:
    rows = []
    for name, f in found.items():
        if name == "load_average":
            continue
        s, h = f["share"], f["hits"]
        cell = (lambda way, k: f"{h.get(f'{way}_{k}', 0)} ({s.get(f'{way}_{k}')})")  # noqa: E731
        rows.append(f"| {name} | {f['tracks']} | {f['kept']} | {f['queries']} | **{cell('by_track', 'top3')}** | "
                    f"{cell('by_track', 'top1')} | {cell('others', 'top3')} | {cell('similarity', 'top3')} | "
                    f"{f['ms_per_search']} |")
    text = harness.header("Search by example across two cameras") + f"""
Load average {found['load_average']:.2f} when it ended (a loaded machine gives higher milliseconds); the
ranks do not depend on speed, nor do the file-mode runs' tracks and links ([reid.md](reid.md)).

The cases are tools/bench_reid.py's ([reid.md](reid.md)): two views of one clip, two sources of one
pipeline with `reid: {{across: [...], clock: media}}` (the weight-free descriptor) and
`runtime.history`. A query is a camera's track with a `reid` vector kept whose identity (the
whole-frame track it overlaps most, its boxes cut to its view, mean IoU at least {MIN_MEAN_IOU}) has a
track with a vector on the other camera. Each is asked for its top 3:

- `by_track`: what `/api/search?stream=S&id=N` and `streamlens search` answer: the tracks that
  `reid.across` joined to it (the same `global_id` in its run) first, then the rest by similarity;
- `others`: the same with `&others=1`, the other cameras only;
- `similarity`: `search.similar` alone, every kept track ranked by cosine (what the search answered
  before the joined tracks came first).

| case | camera tracks | with a reid vector | queries | **other camera's track in the top 3** (by_track) | first (by_track) | top 3, others=1 | top 3, similarity alone | ms per search |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Target (issue 50): at least 0.8 in the top 3, over all results (the query's own camera included:
`by_track`). The similarity alone stays near one half: the descriptor's cosines between different
vehicles crowd at 0.95-0.99 (the road around each box is most of its crop), and a vehicle seen far off
in one view and near in the other looks less like itself than two vehicles at the same distance look
like each other. What lifts it is the linker's decision, which also weighed time and place
([reid.md](reid.md)): where it joined the query to the other camera's track, that track is first.
Where the linker made no link or a wrong one, the answer is the similarity's.
"""
    harness.write_page(PAGE, text, keep="## Before")
    print(f"wrote {PAGE}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
