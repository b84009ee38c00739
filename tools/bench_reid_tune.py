"""Choose the reid constants by leave-one-scene-out over the two-camera cases of tools/bench_reid.py
(the section `Leave-one-scene-out` of tools/results/reid.md).

The cases' runs (tools/bench_reid.py, kept in its folder) are replayed without the pipeline: each
`reid` look the run took (its embedding messages say which track, on which frame) is described
again at that track's box on that frame, by each descriptor variant; a track's appearance is the
mean of its looks' unit vectors, as the secondary stage makes it; the frames' boxes and these
appearances go through a `Linker` (streamlens/reid/links.py) with each setting, in the run's
order; and the global_ids are scored as tools/bench_reid.py scores them. The search is replayed on
the same appearances (each track with a look; the query's own left out) as
streamlens/history/search.py ranks them.

For each scene held out, the setting with the best score on the other scenes (the mean over their
cases of min(precision, recall) over every track, and the share of searches with the other camera's
track in the top 3) is the one reported on the held-out scene.

`--lag` chooses only `PLACE_LAG_S` (streamlens/reid/links.py), by leave-one-case-out: the runs
replayed with the appearances they recorded, the frames of the two cameras in the order of media
time with the second camera from a second behind to three ahead of the first (read as files, the
streams reach the reid stage out of step, and by how much changes from run to run), each value
scored by the mean over those skews of min(precision, recall).

Run (after tools/bench_reid.py has made the runs):
    nice -n 10 python tools/bench_reid_tune.py
    nice -n 10 python tools/bench_reid_tune.py --lag --cases highway highway_small indoor
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import cv2
import numpy as np

import bench_reid as bench

from streamlens.bench import harness
from streamlens.reid import appearance
from streamlens.reid import links
from streamlens.reid.links import Linker


def looks_of(case: bench.Case, folder: Path, cams: list[dict], variants: dict) -> dict:
    """{variant: {(stream, track): [unit rows of its looks, in order]}} for the looks the run took."""
    import av

    boxes = defaultdict(dict)  # (stream, frame) -> {track: box}
    for m in cams:
        if m.get("type") == "frame":
            boxes[(m["stream"], m["frame"])] = {o["id"]: o["box"] for o in m["objects"] if o["id"] >= 0}
    wanted = defaultdict(list)  # (stream, frame) -> [(track, box)]
    order = []
    for m in cams:
        if m.get("type") == "embedding" and m.get("name") == "reid":
            stream, track, frame = m["stream"], m["object"]["id"], m["frame"]
            for f in range(frame, max(frame - 20, -1), -1):  # the box it was looked at by
                box = boxes.get((stream, f), {}).get(track)
                if box is not None:
                    wanted[(stream, frame)].append((track, box))
                    order.append((stream, track, frame))
                    break
    rows = {name: {} for name in variants}
    for stream in case.views:
        frames = {f for s, f in wanted if s == stream}
        with av.open(str(folder / f"{stream}.mp4")) as src:
            for i, frame in enumerate(src.decode(video=0)):
                if i in frames:
                    image = frame.to_ndarray(format="bgr24")
                    items = wanted[(stream, i)]
                    for name, describe in variants.items():
                        out = describe(image, np.array([b for _, b in items]))
                        for (track, _), row in zip(items, out):
                            rows[name][(stream, track, i)] = row
    found = {name: defaultdict(list) for name in variants}
    for stream, track, frame in order:
        for name in variants:
            found[name][(stream, track)].append(rows[name][(stream, track, frame)])
    return found


def replay(case: bench.Case, cams: list[dict], looks: dict, settings: dict) -> tuple[dict, dict]:
    """The global_id each track last had, and each track's appearance, replaying the run's frames
    and looks through a Linker with `settings`."""
    linker = Linker(list(case.views), window_s=60.0, threshold=settings["threshold"],
                    margin=settings["margin"], by_place=settings["by_place"], continuing=settings["continuing"],
                    place_lag_s=settings.get("lag", links.PLACE_LAG_S))
    sizes = {name: (w, h) for name, (_, _, w, h) in case.views.items()}
    taken = defaultdict(int)
    vectors = {}
    gids = {}
    for m in cams:
        kind = m.get("type")
        if kind == "frame":
            feed(linker, m, sizes, [], gids)
        elif kind == "embedding" and m.get("name") == "reid":
            key = (m["stream"], m["object"]["id"])
            rows = looks.get(key, [])
            if taken[key] >= len(rows):
                continue
            taken[key] += 1
            mean = np.mean(rows[:taken[key]], 0)
            vectors[key] = mean / np.linalg.norm(mean)
            linker.embedded(key[0], key[1], vectors[key], taken[key], float(m["pts"]))
    return gids, vectors


def search_share(case: bench.Case, mapping: dict, gids: dict, vectors: dict, first_linked: bool) -> dict:
    """The share of tracks seen by both cameras (with appearances) whose other camera's track is in
    the top 3 of the ranking (the linked ones first when `first_linked`)."""
    keys = list(vectors)
    matrix = np.array([vectors[k] for k in keys])
    by_identity = defaultdict(set)
    for k in keys:
        if mapping.get(k) is not None:
            by_identity[mapping[k]].add(k)
    queries = [k for k in keys if mapping.get(k) is not None and any(o[0] != k[0] for o in by_identity[mapping[k]])]
    hits = 0
    for q in queries:
        i = keys.index(q)
        scores = matrix @ matrix[i]
        scores[i] = -np.inf
        if first_linked:
            scores = scores + np.array([10.0 if gids.get(k) == gids.get(q) and k[0] != q[0] else 0.0 for k in keys])
        top = [keys[j] for j in np.argsort(-scores)[:3]]
        hits += any(t in by_identity[mapping[q]] and t[0] != q[0] for t in top)
    return {"queries": len(queries), "top3": hits, "share_top3": round(hits / len(queries), 3) if queries else None}


def _variant(window: str = "tent", shrink: float = 0.0, space: str = "hsv", hue_bins: int = 8,
             value_bins: int = 4, orient_bins: int = 8, stripes: int = 3):
    """A describe(image, boxes) like streamlens.reid.appearance's, with other choices: `window`
    (tent: the crop's width only, 1 to 0.5; gauss: a 2-D Gaussian window over the box, sigma a
    third of each side), `shrink` (each side moved in by that share of the box), `space` (hsv;
    lab: chroma a*, b* as hue and its length as saturation, L* as brightness), the bins."""
    cw, ch = appearance.CROP_W, appearance.CROP_H
    xs, ys = np.linspace(-1.0, 1.0, cw), np.linspace(-1.0, 1.0, ch)
    if window == "tent":
        weight = np.tile(1.0 - 0.5 * np.abs(xs), (ch, 1))
    else:
        sigma = float(window.split(":")[1]) if ":" in window else 0.6
        weight = np.exp(-0.5 * (xs[None, :] ** 2 + ys[:, None] ** 2) / sigma ** 2)
    weight = weight.astype(np.float32)
    rows_per = ch // stripes
    stripe_of = (np.arange(ch) // rows_per).clip(max=stripes - 1).reshape(ch, 1)
    colour_bins = hue_bins + value_bins
    dim_s = colour_bins + orient_bins

    def histograms(crops):
        n = len(crops)
        flat = crops.reshape(n * ch, cw, 3)
        if space == "hsv":
            hsv = cv2.cvtColor(flat, cv2.COLOR_BGR2HSV_FULL).reshape(crops.shape)
            hue = hsv[..., 0].astype(np.float32) * (hue_bins / 256.0)
            sat = hsv[..., 1].astype(np.float32) / 255.0
            val = hsv[..., 2].astype(np.float32) * (value_bins / 256.0)
        else:
            lab = cv2.cvtColor(flat, cv2.COLOR_BGR2LAB).reshape(crops.shape).astype(np.float32)
            a, b = lab[..., 1] - 128.0, lab[..., 2] - 128.0
            hue = ((np.arctan2(b, a) % (2 * np.pi)) / (2 * np.pi)) * hue_bins
            sat = np.clip(np.sqrt(a * a + b * b) / 40.0, 0.0, 1.0)
            val = lab[..., 0] * (value_bins / 256.0)
        gray = cv2.cvtColor(flat, cv2.COLOR_BGR2GRAY).reshape(n, ch, cw).astype(np.float32)
        gx = np.zeros_like(gray)
        gy = np.zeros_like(gray)
        gx[:, :, 1:-1] = gray[:, :, 2:] - gray[:, :, :-2]
        gy[:, 1:-1, :] = gray[:, 2:, :] - gray[:, :-2, :]
        mag = np.sqrt(gx * gx + gy * gy)
        orient = (np.arctan2(gy, gx) % np.pi) * (orient_bins / np.pi)
        block = (np.arange(n).reshape(n, 1, 1) * stripes + stripe_of) * dim_s
        block = np.broadcast_to(block, (n, ch, cw))
        w = weight[None]
        parts = [(hue, hue_bins, True, 0, sat * w), (val, value_bins, False, hue_bins, (1.0 - sat) * w),
                 (orient, orient_bins, True, colour_bins, mag * w)]
        size = n * stripes * dim_s
        counts = np.zeros(size, np.float64)
        for position, bins, circular, offset, wt in parts:
            low, high, share = appearance.soft_bins(position, bins, circular)
            where = block + offset
            counts += np.bincount((where + low).ravel(), (wt * (1.0 - share)).ravel(), size)
            counts += np.bincount((where + high).ravel(), (wt * share).ravel(), size)
        counts = counts.reshape(n, stripes, dim_s)
        colour = counts[:, :, :colour_bins]
        texture = counts[:, :, colour_bins:] + appearance.GRADIENT_FLOOR * weight.sum() / stripes / orient_bins
        colour = colour / np.maximum(colour.sum(2, keepdims=True), 1e-12)
        texture = texture / texture.sum(2, keepdims=True)
        rows = np.sqrt(np.concatenate([colour, texture], 2)).reshape(n, -1)
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)

    def describe(image, boxes):
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4).copy()
        if shrink:
            dw, dh = (boxes[:, 2] - boxes[:, 0]) * shrink, (boxes[:, 3] - boxes[:, 1]) * shrink
            boxes += np.stack([dw, dh, -dw, -dh], 1)
        rects, good = appearance.clip_boxes(boxes, image.shape[1], image.shape[0])
        crops = np.empty((len(boxes), ch, cw, 3), np.uint8)
        for k, ((x1, y1, x2, y2), ok) in enumerate(zip(rects.tolist(), good.tolist())):
            crops[k] = cv2.resize(image[y1:y2, x1:x2], (cw, ch), interpolation=cv2.INTER_AREA) if ok else 0
        return histograms(crops)

    return describe


def variants() -> dict:
    """The descriptor variants compared: name -> describe(image, boxes)."""
    return {"current": appearance.describe,
            "gauss": _variant(window="gauss:0.6"),
            "gauss_lab": _variant(window="gauss:0.6", space="lab"),
            "shrink": _variant(shrink=0.1),
            "fine": _variant(hue_bins=16, value_bins=8),
            "gauss_fine": _variant(window="gauss:0.6", hue_bins=16, value_bins=8),
            "gauss_lab_fine": _variant(window="gauss:0.6", space="lab", hue_bins=16, value_bins=8)}


def feed(linker: Linker, frame: dict, sizes: dict, embeddings: list[dict], gids: dict) -> None:
    """One camera frame through `linker` as the reid stage takes it (its clock, its sightings, the
    appearances recorded with it, the sweep), then each object's global_id into `gids`."""
    t, stream = float(frame["pts"]), frame["stream"]
    linker.tick(stream, t)
    ids = [o for o in frame["objects"] if o["id"] >= 0]
    for o in ids:
        linker.seen(stream, o["id"], t, o["box"], sizes[stream])
    for e in embeddings:
        linker.embedded(stream, e["object"]["id"], np.asarray(e["vector"], np.float32), e["attempts"], t)
    linker.sweep(t)
    for o in ids:
        gids[(stream, o["id"])] = linker.global_id(stream, o["id"])


def replay_skewed(case: bench.Case, cams: list[dict], skew: float, lag: float = links.PLACE_LAG_S) -> dict:
    """The global_id each track last had, replaying the run's frames through a Linker with its
    defaults, each camera's frame with the embeddings recorded after it (as the stage takes them), in
    the order of media time with the second camera `skew` seconds ahead of the first (files decode
    at their own pace: the stage sees one camera ahead of the other, by a second or more)."""
    linker = Linker(list(case.views), window_s=60.0, threshold=0.5, margin=0.1, place_lag_s=lag)
    sizes = {name: (w, h) for name, (_, _, w, h) in case.views.items()}
    second = list(case.views)[1]
    items, latest = [], {}
    for m in cams:
        if m.get("type") == "frame":
            items.append((m, []))
            latest[m["stream"]] = items[-1][1]
        elif m.get("type") == "embedding" and m.get("name") == "reid" and m["stream"] in latest:
            latest[m["stream"]].append(m)
    items.sort(key=lambda item: item[0]["pts"] - (skew if item[0]["stream"] == second else 0.0))
    gids = {}
    for frame, embeddings in items:
        feed(linker, frame, sizes, embeddings, gids)
    return gids


#: PLACE_LAG_S values and skews (seconds the second camera is ahead) of `--lag`
LAGS, SKEWS = (0.0, 0.1, 0.25, 0.5, 1.0), (-1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0)


def choose_lag(folder: Path, cases: list[str]) -> None:
    """Leave-one-case-out over PLACE_LAG_S: each case's runs replayed with the recorded appearances
    at each skew; a value's merit on a case is the mean over the skews of min(precision, recall).
    Prints each value's figures and, per case held out, the value the other cases choose (the first
    of equals) and its figures there."""
    data = {}
    for name in cases:
        case = bench.CASES[name]
        reference, cams = bench.run_case(case, folder, reuse=True)
        data[name] = (case, reference, cams)
    table = {}
    for lag in LAGS:
        for name, (case, reference, cams) in data.items():
            found = [bench.score_case(case, reference, cams, gids=replay_skewed(case, cams, s, lag)) for s in SKEWS]
            p, r = [f["precision"] or 0.0 for f in found], [f["recall"] or 0.0 for f in found]
            table[(lag, name)] = (float(np.mean([min(a, b) for a, b in zip(p, r)])), float(np.mean(p)),
                                  float(np.mean(r)), " ".join(f"{a}/{b}" for a, b in zip(p, r)))
            print(f"| {lag} | {name} | {table[(lag, name)][0]:.3f} | {table[(lag, name)][1]:.3f} | "
                  f"{table[(lag, name)][2]:.3f} | {table[(lag, name)][3]} |")
    for held in cases + ["(none: every case)"]:
        train = [c for c in cases if c != held]
        best = max(LAGS, key=lambda lag: float(np.mean([table[(lag, c)][0] for c in train])))
        for c in [held] if held in cases else cases:
            print(f"| {held} | {best} | {c} | {table[(best, c)][0]:.3f} | {table[(best, c)][1]:.3f} | "
                  f"{table[(best, c)][2]:.3f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "streamlens_bench_reid")
    parser.add_argument("--cases", nargs="*", default=bench.ONE_PASS, choices=list(bench.CASES),
                        help="default: every case but the looped (bench_reid.ONE_PASS)")
    parser.add_argument("--lag", action="store_true", help="only choose PLACE_LAG_S by leave-one-case-out over "
                        "the runs replayed at several skews between the cameras (printed, not written)")
    args = parser.parse_args(argv)
    if args.lag:
        choose_lag(args.folder, args.cases)
        return 0
    grid = [dict(zip(("threshold", "margin", "by_place", "continuing", "lag"), v))
            for v in itertools.product((0.5, 0.6), (0.1, 0.15), (False, True), (False, True), (0.0, 1.0))]
    describe = variants()
    table = {}  # (case, variant, setting index) -> figures
    for name in args.cases:
        case = bench.CASES[name]
        reference, cams = bench.run_case(case, args.folder, reuse=True)
        whole, _ = bench.tracks_of(reference)
        half, _ = bench.camera_tracks(case, cams)
        mapping = bench.map_tracks(half, whole, case.views)
        looks = looks_of(case, args.folder / name, cams, describe)
        for variant in describe:
            for index, settings in enumerate(grid):
                gids, vectors = replay(case, cams, looks[variant], settings)
                found = bench.score_case(case, reference, cams, gids=gids)
                found["search"] = search_share(case, mapping, gids, vectors, True)
                found["search_raw"] = search_share(case, mapping, gids, vectors, False)
                table[(name, variant, index)] = found
                print(name, variant, settings, found["precision"], found["recall"], found["search"]["share_top3"],
                      found["search_raw"]["share_top3"], file=sys.stderr)
    report(table, grid, args.cases, list(describe))
    return 0


def merit(found: dict) -> float:
    """What a setting is chosen by: the mean of min(precision, recall) over every track and the
    search's top-3 share (0 where a case has no such figure)."""
    p, r = found["precision"] or 0.0, found["recall"] or 0.0
    s = found["search"]["share_top3"] or 0.0
    return (min(p, r) + s) / 2


def report(table: dict, grid: list, cases: list, names: list) -> None:
    """Print and write (a section of tools/results/reid.md) each held-out scene's choice and figures, and the
    choice over every case (what the defaults are)."""
    scenes = sorted({bench.CASES[c].scene for c in cases})
    arms = [(v, i) for v in names for i in range(len(grid))]
    mean = (lambda arm, over: float(np.mean([merit(table[(c, *arm)]) for c in over])) if over else 0.0)  # noqa: E731
    lines = []
    for scene in scenes + ["(none: every case)"]:
        train = [c for c in cases if bench.CASES[c].scene != scene]
        test = [c for c in cases if bench.CASES[c].scene == scene] or cases
        best = max(arms, key=lambda a: mean(a, train))  # the first of equals: grid order
        chosen = {"variant": best[0], **grid[best[1]]}
        print(json.dumps({"held_out": scene, "chosen": chosen,
                          "on": {c: {k: table[(c, *best)][k] for k in ("precision", "recall", "search")}
                                 for c in test}}))
        for c in test:
            f = table[(c, *best)]
            lines.append(f"| {scene} | {', '.join(f'{k} {v}' for k, v in chosen.items())} | {c} | "
                         f"{f['precision']} | {f['recall']} | {f['search']['share_top3']} |")
    every = [f"| {v} | {', '.join(f'{k} {x}' for k, x in grid[i].items())} | "
             + " | ".join(f"{table[(c, v, i)]['precision']} / {table[(c, v, i)]['recall']} / "
                          f"{table[(c, v, i)]['search']['share_top3']}" for c in cases) + " |"
             for v, i in sorted(arms, key=lambda a: -mean(a, cases))[:20]]
    text = f"""## Leave-one-scene-out

Command: `{harness.command_line()}`, {harness.now()}, on the machine above (the replays do not
depend on its speed).

The two-camera cases' runs of tools/bench_reid.py (above), replayed without the
pipeline (tools/bench_reid_tune.py says how): each descriptor variant described again at the looks
the run took, each linker setting fed the run's frames in their order. A setting's merit on a case is
the mean of min(precision, recall) over every track and the search's top-3 share (linked tracks first;
0 where a case has none: `indoor` has no track seen by both cameras with a look). For each scene held
out, the setting with the best mean merit over the other scenes' cases, and its figures on the
held-out cases (precision, recall, search top 3); the last rows choose over every case: the linker's
defaults are that choice; the descriptor is kept as it was, since only the highway scene tells its
variants apart (Constants, above). Ties go to the first in the grid's order
(descriptor `current` first).

| held out | chosen on the others | case | precision | recall | search top 3 |
|---|---|---|---|---|---|
{chr(10).join(lines)}

The 20 best settings over every case (precision / recall / search top 3 per case, {', '.join(cases)}):

| descriptor | linker | {' | '.join(cases)} |
|---|---|{'---|' * len(cases)}
{chr(10).join(every)}

Descriptor variants: `current` (streamlens.reid.appearance: HSV, 8 hue and 4 brightness bins, a tent
across the width); `gauss` (a 2-D Gaussian window over the box, sigma 0.6 of the half side);
`gauss_lab` (the same in Lab: a*b* angle as hue, chroma as saturation, L* as brightness); `shrink`
(the box moved in by a tenth on each side); `fine` (16 hue and 8 brightness bins); `gauss_fine`,
`gauss_lab_fine`. Linker: `threshold`, `margin` (reid keys); `by_place` (links by where the
cameras meet and lone hand-overs), `continuing` (a track broken in two within a camera),
`lag` (PLACE_LAG_S).
"""
    write_section(bench.PAGE, text)


def write_section(page: Path, text: str) -> None:
    """Put `text` (a `## Leave-one-scene-out` section) in `page` in place of the one there, else at
    its end; the sections after it are kept."""
    old = page.read_text() if page.exists() else ""
    head = "\n## Leave-one-scene-out\n"
    at = old.find(head)
    if at < 0:
        page.write_text(old.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n")
        return
    nxt = old.find("\n## ", at + len(head))
    rest = old[nxt:] if nxt >= 0 else "\n"
    page.write_text(old[:at].rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n" + rest)


if __name__ == "__main__":
    sys.exit(main())
