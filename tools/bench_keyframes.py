"""Agreement with detecting every frame, on keyframes and between them, through the real pipeline.

    python tools/bench_keyframes.py                          # intervals 1,3,5,10 x kalman,flow,mv: about 5 minutes
    python tools/bench_keyframes.py --intervals 5 --motions mv
    python tools/bench_keyframes.py --clips all --intervals 2,3,5 --motions mv --coast-s 0,0.4 --out /tmp/k.md

The clip is ../shared/data/video/highway_720p30.mp4 (`--clips`: others of ../shared/data/video, `all`
for every clip of more than a few frames), the detector the `detector` section of the pipeline
made for the clip (`PIPELINES`: pipelines/highway_yolox.yaml for traffic, indoor_yolox.yaml for
people; its model and names from ../shared/data). `--coast-s` runs each setting with
`tracker.coast_s` at each value given (default: the tracker's own). Each run is `streamlens run`
in file mode (nothing dropped, the same every run) at a fixed keyframe interval (`adaptive: false`)
with one motion model and a JSONL sink; its frame messages are scored by `streamlens.bench.accuracy`
against the same detector on every frame of the clip (`streamlens.bench.reference`, cached in
`--cache`): F1 of boxes at IoU 0.5, matched per frame, on the keyframes (`keyframe: true`) and on
the frames between, class-aware as the bench scores (a box matches a reference box of its class),
and on keyframes also class-agnostic: a keyframe publishes the detector's boxes, so that figure is
1.0 up to NMS ties, and the class-aware one falls short of it by the boxes whose detection's class
is not their track's label (the vote over the track's life, `streamlens/track/labels.py`).

Writes tools/results/keyframes.md and keyframes.json (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streamlens.bench import harness
from streamlens.bench.harness import DATA, REPO, RESULTS, command_line, machine, machine_line, need, now

PIPELINE = harness.PIPELINES / "highway_yolox.yaml"
CLIP = "video/highway_720p30.mp4"
#: each shared clip's pipeline (whose detector section it runs with); street_night has 8 frames only
PIPELINES = {"highway_720p30.mp4": "highway_yolox.yaml", "highway_320x240.avi": "highway_yolox.yaml",
             "highway_1080p30.mp4": "highway_yolox.yaml", "road_topdown_640x360.avi": "highway_yolox.yaml",
             "person_indoor_768x432.mp4": "indoor_yolox.yaml"}


def detector_section(data: Path, pipeline: Path = PIPELINE) -> dict:
    """The shipped pipeline's `detector` section with the shared model in `data` (`harness.shipped`)."""
    return dict(harness.shipped(pipeline.name, data)["detector"])


def run(video: str, detector: dict, interval: int, motion: str, work: Path, coast_s: float | None = None) -> dict:
    """One file-mode run; its frame messages split into keyframes and the frames between."""
    import yaml

    out = work / f"{motion}-{interval}.jsonl"
    tracker = {"motion": motion, **({} if coast_s is None else {"coast_s": coast_s})}
    tree = {"sources": [{"name": "clip", "uri": video}], "detector": detector,
            "keyframes": {"interval": interval, "adaptive": False}, "tracker": tracker,
            "sinks": [{"type": "jsonl", "path": str(out)}]}
    path = work / f"{motion}-{interval}.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run([sys.executable, "-m", "streamlens", "run", "-q", str(path)], cwd=REPO, env=env, check=True,
                   capture_output=True, text=True)
    parts = {True: ([], [], []), False: ([], [], [])}
    for line in out.open():
        m = json.loads(line)
        if m["type"] == "frame":
            frames, pts, boxes = parts[m["keyframe"]]
            frames.append(m["frame"])
            pts.append(m["pts"])
            boxes.append([o["box"] + [o["cls"]] for o in m["objects"]])
    return parts


def score(parts: dict, ref) -> dict:
    from streamlens.bench.accuracy import score_stream
    from streamlens.bench.reference import Reference

    anyclass = Reference(pts=ref.pts, offsets=ref.offsets, xyxy=ref.xyxy, cls=np.zeros_like(ref.cls))
    keys, between = parts[True], parts[False]
    f1 = {"keyframes": score_stream(*keys, ref)["f1"],
          "keyframes_any_class": score_stream(keys[0], keys[1], [[b[:4] + [0] for b in f] for f in keys[2]],
                                              anyclass)["f1"],
          "between": score_stream(*between, ref)["f1"] if between[0] else None,
          "all": score_stream(keys[0] + between[0], keys[1] + between[1], keys[2] + between[2], ref)["f1"]}
    return {"keyframes": len(keys[0]), "frames": len(keys[0]) + len(between[0]), "f1": f1}


def write_page(data: dict, out: Path) -> None:
    clips = sorted({r["clip"] for r in data["runs"]})
    lines = ["# Keyframes and the frames between: agreement with detecting every frame", "",
             f"Command: `{data['command']}` ({data['seconds']:.0f} s)  ",
             f"Machine: {machine_line(m) if isinstance(m := data['machine'], dict) else m}; date {data['date']}, "
             f"commit {data['commit']}  ",
             f"Clips: {', '.join(clips)}; detector: the `detector` section of each clip's pipeline (`PIPELINES` in the "
             f"tool; `agnostic_nms: {data['agnostic_nms']}`); file mode, fixed intervals.", "",
             "F1 at IoU 0.5 against the same detector on every frame (`streamlens.bench.accuracy`). `keyframes`: "
             "class-aware, as every bench scores (a box's `cls`: the detector's class on a keyframe, its track's last "
             "detection's between); `any class`: the same boxes matched whatever their class.", "",
             "| clip | interval | motion | coast_s | keyframes | F1 keyframes | F1 keyframes, any class | F1 between | "
             "F1 all |", "|---|---|---|---|---|---|---|---|---|"]
    for r in data["runs"]:
        f = r["f1"]
        coast = "default" if r.get("coast_s") is None else f"{r['coast_s']:g}"
        lines.append(f"| {r['clip']} | {r['interval']} | {r['motion']} | {coast} | {r['keyframes']} | "
                     f"{f['keyframes']:.3f} | {f['keyframes_any_class']:.3f} | "
                     f"{'-' if f['between'] is None else format(f['between'], '.3f')} | {f['all']:.3f} |")
    harness.write_page(out, "\n".join(lines), keep="## Notes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--clips", default=Path(CLIP).name, help="clips of DATA/video, comma-separated, or all")
    parser.add_argument("--intervals", default="1,3,5,10")
    parser.add_argument("--motions", default="kalman,flow,mv")
    parser.add_argument("--coast-s", default=None, help="tracker.coast_s values, comma-separated (default: the tracker's)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "streamlens_bench_keyframes")
    parser.add_argument("--out", type=Path, default=RESULTS / "keyframes.md")
    args = parser.parse_args(argv)
    from streamlens.bench.reference import reference_for
    from streamlens.config import DetectorConfig

    started = time.monotonic()
    clips = list(PIPELINES) if args.clips == "all" else args.clips.split(",")
    coasts = [None] if args.coast_s is None else [float(v) for v in args.coast_s.split(",")]
    runs = []
    with tempfile.TemporaryDirectory() as work:
        for clip in clips:
            detector = detector_section(args.data, harness.PIPELINES / PIPELINES.get(clip, PIPELINE.name))
            video = str(need(args.data / "video" / clip))
            config = DetectorConfig(**detector)
            ref = reference_for(config, video, args.cache)
            for interval in (int(v) for v in args.intervals.split(",")):
                for motion in args.motions.split(","):
                    for coast in coasts:
                        parts = run(video, detector, interval, motion, Path(work), coast)
                        result = {"clip": clip, "interval": interval, "motion": motion, "coast_s": coast,
                                  **score(parts, ref)}
                        print(json.dumps(result), flush=True)
                        runs.append(result)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    data = {"command": command_line([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
            "seconds": time.monotonic() - started, "machine": machine(), "date": now(),
            "commit": commit.strip(), "agnostic_nms": config.agnostic_nms, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    write_page(data, args.out)
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
