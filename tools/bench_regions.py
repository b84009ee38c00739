"""Detection where things move (`detector.regions: motion`): what it does to F1 and to detector time, per clip.

    python tools/bench_regions.py                         # every clip in ../shared/data/video: about 15 minutes
    python tools/bench_regions.py --clips person_indoor_768x432.mp4 --levels 12 --full 1 --margins 0.1

For each clip of ../shared/data/video, with the detector and keyframes of the pipeline it belongs to
(pipelines/highway_yolox.yaml for the traffic clips, pipelines/indoor_yolox.yaml for the people;
the shared YOLOX-Nano, `resize: bucket`, one onnxruntime thread) and the `mv` tracker:

1. the reference: the same detector on every whole frame (`streamlens.bench.reference`, cached);
2. one file-mode run (nothing dropped, the same on every run) with `regions: off`, and one with
   `regions: motion` per change level in `--levels` (`streamlens.graph.schedule.regions.CHANGE_LEVEL`), in
   this process through `streamlens.Pipeline`; every frame's boxes scored against the reference
   (F1 at IoU 0.5, class-aware, matched per frame: `streamlens.bench.accuracy`), on all frames and on
   keyframes alone;
3. the detector's time per keyframe, paired: for each keyframe of the `regions: motion` run, the
   detector call (preprocessing, inference, decoding, NMS) on the whole frame and on its region,
   one after the other in alternating order on the same decoded frame. A keyframe whose region is
   empty costs nothing (the detector is not run). `time ratio` = the run's detector time with
   regions over the same keyframes as whole frames.

The change level (`--levels`), `region_full_s` (`--full`) and the margin (`--margins`) are chosen by
leaving one clip out: for each clip, on the others only, the point with the least detector time among those that keep F1 (all
frames) within `--max-drop` of `off` on every one of them; that point's figures on the held-out clip
are the ones that count.

`--resize letterbox` runs the same with the model at its fixed 416x416 input (a region is then
letterboxed to fill the input: no smaller input, so no time saved).

Writes tools/results/regions.md and regions.json (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from streamlens.bench.harness import (DATA, REPO, RESULTS, command_line, machine, machine_line, need, now, shipped,
                                      write_page as write_text_page)

MODEL = "models/yolox_nano/yolox_nano.onnx"
#: each clip and the pipeline whose detector and keyframes it runs with
CLIPS = {"highway_320x240.avi": "highway_yolox.yaml", "highway_720p30.mp4": "highway_yolox.yaml",
         "highway_1080p30.mp4": "highway_yolox.yaml", "road_topdown_640x360.avi": "highway_yolox.yaml",
         "person_indoor_768x432.mp4": "indoor_yolox.yaml", "street_night_1080p_8frames.mp4": "indoor_yolox.yaml"}


def sections(pipeline: str, data: Path, resize: str) -> tuple[dict, dict]:
    """The shipped pipeline's `detector` (the shared model in `data`, COCO's names) and `keyframes`."""
    tree = shipped(pipeline, data)  # the shared model in `data`, COCO's names
    detector = dict(tree["detector"], resize=resize)
    return detector, dict(tree["keyframes"])


def run(video: str, detector: dict, keyframes: dict, level: float | None, work: Path, full_s: float = 1.0,
        margin: float | None = None) -> dict:
    """One file-mode run (`level` None: `regions: off`; `full_s`: `region_full_s`; `margin`: the
    planner's `MARGIN`): per frame its index, pts, boxes and region."""
    import yaml

    import streamlens
    from streamlens.frame import FrameResult
    from streamlens.graph.schedule import regions

    if level is not None:
        regions.CHANGE_LEVEL = level
    if margin is not None:
        regions.MARGIN = margin
    tree = {"sources": [{"name": "clip", "uri": video}],
            "detector": dict(detector, regions="off" if level is None else "motion", region_full_s=full_s),
            "keyframes": keyframes, "tracker": {"motion": "mv"}, "sinks": []}
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    out = {"index": [], "pts": [], "keyframe": [], "boxes": [], "region": {}}
    started = time.perf_counter()
    pipe = streamlens.Pipeline.from_yaml(path)
    for r in pipe.results():
        if not isinstance(r, FrameResult):
            continue
        f, d = r.frame, r.detections
        out["size"] = (f.width, f.height)
        out["index"].append(f.index)
        out["pts"].append(f.pts)
        out["keyframe"].append(bool(r.keyframe))
        cls = d.class_id if d.class_id is not None else np.full(len(d), -1)
        out["boxes"].append([[*map(float, b), int(c)] for b, c in zip(d.xyxy, cls)])
        if r.keyframe:
            out["region"][f.index] = None if f.region is None else tuple(int(v) for v in f.region)
    out["seconds"] = time.perf_counter() - started
    planner = pipe._engine.regions.get("clip") if pipe._engine is not None else None
    out["reasons"] = dict(planner.counts) if planner is not None else {}
    return out


def score(result: dict, ref) -> dict:
    from streamlens.bench.accuracy import score_stream

    keys = [i for i, k in enumerate(result["keyframe"]) if k]
    pick = lambda rows: [[result[k][i] for i in rows] for k in ("index", "pts", "boxes")]  # noqa: E731
    return {"all": score_stream(result["index"], result["pts"], result["boxes"], ref)["f1"],
            "keyframes": score_stream(*pick(keys), ref)["f1"]}


def time_detector(video: str, detector: dict, regions: dict) -> dict:
    """Per keyframe of `regions` (index -> region or None), ms of the detector on the whole frame and
    on the region, in alternating order (see the module docs)."""
    from streamlens.config import DetectorConfig
    from streamlens.detect import build_detector
    from streamlens.sources.file import FileSource

    model = build_detector(DetectorConfig(**detector))
    whole, part = {}, {}
    try:
        with FileSource("timing", video) as source:
            for frame in source.frames(threading.Event()):
                if frame.index not in regions:
                    continue
                frame.image  # decoded to BGR once, outside the timings  # noqa: B018
                region = regions[frame.index]
                order = ("whole", "part") if frame.index % 2 else ("part", "whole")
                for which in order:
                    frame.region = None if which == "whole" else region
                    t = time.perf_counter()
                    model.detect([frame])
                    ms = (time.perf_counter() - t) * 1000
                    (whole if which == "whole" else part)[frame.index] = ms
    finally:
        model.close()
    for i, region in regions.items():  # an empty region: the detector is not run
        if region is not None and (region[2] <= region[0] or region[3] <= region[1]):
            part[i] = 0.0
    return {"whole": whole, "part": part}


def summarise(result: dict, timing: dict, frame_area: int) -> dict:
    regions = result["region"]
    reasons = {"whole": 0, "region": 0, "empty": 0}
    shares = []
    for region in regions.values():
        if region is None:
            reasons["whole"] += 1
        elif region[2] <= region[0] or region[3] <= region[1]:
            reasons["empty"] += 1
        else:
            reasons["region"] += 1
            shares.append((region[2] - region[0]) * (region[3] - region[1]) / frame_area)
    whole = [timing["whole"][i] for i in regions]
    used = [timing["whole"][i] if regions[i] is None else timing["part"][i] for i in regions]
    cropped = [i for i, r in regions.items() if r is not None and r[2] > r[0]]
    return {"keyframes": len(regions), **reasons, "reasons": result["reasons"],
            "region_share": round(statistics.mean(shares), 3) if shares else None,
            "ms_whole_p50": round(statistics.median(whole), 2) if whole else None,
            "ms_region_p50": round(statistics.median([timing["part"][i] for i in cropped]), 2) if cropped else None,
            "ms_total_whole": round(sum(whole), 1), "ms_total_used": round(sum(used), 1),
            "time_ratio": round(sum(used) / sum(whole), 3) if whole else None}


def choose(clips: dict, names: list[str], levels: list[str], max_drop: float) -> str | None:
    """The point with the least summed time ratio over the clips `names` among those that keep F1
    (all frames) within `max_drop` of off on each of them (None: none does)."""
    best = None
    for level in levels:
        runs = [clips[c]["levels"][level] for c in names]
        if all(r["f1"]["all"] >= clips[c]["off"]["f1"]["all"] - max_drop for r, c in zip(runs, names)):
            cost = sum(r["time_ratio"] for r in runs)
            if best is None or cost < best[0]:
                best = (cost, level)
    return None if best is None else best[1]


def leave_one_out(clips: dict, levels: list[str], max_drop: float) -> dict:
    """Per held-out clip: the point (change level / region_full_s / margin) chosen on the others (see
    the module docs) and its figures there; under "all clips", the point chosen on every clip."""
    chosen = {}
    for held in [*clips, "all clips"]:
        level = choose(clips, [c for c in clips if c != held], levels, max_drop)
        if level is None or held == "all clips":
            chosen[held] = {"level": level}
            continue
        r = clips[held]["levels"][level]
        chosen[held] = {"level": level, "f1_all": r["f1"]["all"], "f1_off": clips[held]["off"]["f1"]["all"],
                        "drop": round(clips[held]["off"]["f1"]["all"] - r["f1"]["all"], 4),
                        "time_ratio": r["time_ratio"]}
    return chosen


def write_page(data: dict, out: Path) -> None:
    title = "" if data["resize"] == "bucket" else f", on a fixed-size input (`resize: {data['resize']}`)"
    lines = [f"# Detection where things move (`detector.regions: motion`){title}", "",
             f"Command: `{data['command']}` ({data['seconds']:.0f} s)  ",
             f"Machine: {_machine(data)} (load average {data['load']} at the start); date {data['date']}, "
             f"commit {data['commit']}  ",
             f"Detector: YOLOX-Nano (../shared/data), onnxruntime, `resize: {data['resize']}`, one thread, the "
             "detector and keyframes of pipelines/highway_yolox.yaml (traffic clips) or indoor_yolox.yaml "
             "(people); tracker `mv`; file mode.", "",
             "F1 at IoU 0.5, class-aware, matched per frame, against the same detector on every whole frame. "
             "`ms whole` / `ms region`: the detector call (preprocessing to NMS) per keyframe, medians, paired "
             "on the same frames; `time`: the run's detector time with regions over the same keyframes as "
             "whole frames (empty regions cost 0).", ""]
    for name, clip in data["clips"].items():
        off = clip["off"]
        lines += [f"## {name} ({clip['frames']} frames, {clip['size'][0]}x{clip['size'][1]})", "",
                  "| regions | change level / full s / margin | keyframes | whole / region / empty | region share | F1 all | "
                  "F1 keyframes | ms whole | ms region | time |", "|---|---|---|---|---|---|---|---|---|---|",
                  f"| off | - | {off['keyframes']} | - | - | {off['f1']['all']:.3f} | {off['f1']['keyframes']:.3f} "
                  "| - | - | 1 |"]
        for level, r in clip["levels"].items():
            lines.append(f"| motion | {level} | {r['keyframes']} | {r['whole']} / {r['region']} / {r['empty']} | "
                         f"{'-' if r['region_share'] is None else r['region_share']} | {r['f1']['all']:.3f} | "
                         f"{r['f1']['keyframes']:.3f} | {r['ms_whole_p50']} | {r['ms_region_p50'] or '-'} | "
                         f"**{r['time_ratio']}** |")
        lines.append("")
    if data.get("loo"):
        lines += [f"## The change level, full_s and margin, by leaving one clip out (F1 within {data['max_drop']} of off on every "
                  "other clip, least detector time)", "",
                  "| held-out clip | level / full s / margin chosen on the others | F1 off | F1 motion | drop | time |",
                  "|---|---|---|---|---|---|"]
        for name, c in data["loo"].items():
            if c["level"] is None:
                lines.append(f"| {'(chosen on every clip)' if name == 'all clips' else name} | none keeps F1 | | | | |")
            elif name == "all clips":
                lines.append(f"| (chosen on every clip) | **{c['level']}** | | | | |")
            else:
                lines.append(f"| {name} | {c['level']} | {c['f1_off']:.3f} | {c['f1_all']:.3f} | {c['drop']:+.3f} | "
                             f"{c['time_ratio']} |")
        lines.append("")
    write_text_page(out, "\n".join(lines), keep="## Notes")


def _machine(data: dict) -> str:
    """The machine in words: `machine_line` of what was measured (an older JSON holds the CPU's name
    alone, and the cores beside it)."""
    m = data["machine"]
    return machine_line(m) if isinstance(m, dict) else f"{m}, {data['cores']} cores"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--clips", default=",".join(CLIPS))
    parser.add_argument("--levels", default="12")
    parser.add_argument("--margins", default="0.06,0.1,0.15", help="the planner's MARGIN values")
    parser.add_argument("--full", default="1,2", help="region_full_s values (seconds)")
    parser.add_argument("--max-drop", type=float, default=0.01)
    parser.add_argument("--resize", default="bucket", choices=["bucket", "letterbox"])
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "streamlens_bench_regions")
    parser.add_argument("--out", type=Path, default=RESULTS / "regions.md")
    parser.add_argument("--from-json", type=Path, help="measure nothing: choose again and rewrite the page from "
                                                       "a regions.json this tool wrote")
    args = parser.parse_args(argv)
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        levels = list(next(iter(data["clips"].values()))["levels"])
        data["loo"] = leave_one_out(data["clips"], levels, data["max_drop"]) if len(data["clips"]) > 1 else {}
        args.out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
        write_page(data, args.out)
        return 0
    need(args.data / MODEL)
    from streamlens.bench.reference import reference_for
    from streamlens.config import DetectorConfig

    started = time.monotonic()
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    points = [(float(level), float(full), float(margin)) for level in args.levels.split(",")
              for full in args.full.split(",") for margin in args.margins.split(",")]
    clips = {}
    with tempfile.TemporaryDirectory() as work:
        for name in args.clips.split(","):
            video = str(args.data / "video" / name)
            detector, keyframes = sections(CLIPS[name], args.data, args.resize)
            ref = reference_for(DetectorConfig(**detector), video, args.cache)
            off = run(video, detector, keyframes, None, Path(work))
            clip = {"frames": len(off["index"]), "off": {"keyframes": len(off["region"]), "f1": score(off, ref),
                                                         "seconds": round(off["seconds"], 1)}, "levels": {}}
            clip["size"] = off["size"]
            for level, full, margin in points:
                on = run(video, detector, keyframes, level, Path(work), full, margin)
                timing = time_detector(video, detector, on["region"])
                size, key = clip["size"], f"{level:g}/{full:g}/{margin:g}"
                clip["levels"][key] = {**summarise(on, timing, size[0] * size[1]), "f1": score(on, ref),
                                       "seconds": round(on["seconds"], 1)}
                print(name, key, json.dumps(clip["levels"][key]), flush=True)
            print(name, "off", json.dumps(clip["off"]), flush=True)
            clips[name] = clip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    data = {"command": command_line([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
            "seconds": time.monotonic() - started, "machine": machine(),
            "cores": os.cpu_count(), "load": load, "resize": args.resize, "max_drop": args.max_drop, "date": now(),
            "commit": commit.strip(), "clips": clips,
            "loo": leave_one_out(clips, [f"{lv:g}/{f:g}/{m:g}" for lv, f, m in points], args.max_drop)
            if len(clips) > 1 else {}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    write_page(data, args.out)
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
