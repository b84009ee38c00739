"""The secondary stage against issue 18's targets (tools/results/secondary.md).

Calls per track, what they cost a file run, the cache's share of the compute on a looping clip and
on two pipelines reading one camera, and the
live capacity with and without it; written up as tools/results/secondary.md (+ secondary.json).

Set-up: pipelines/highway_yolox.yaml (YOLOX-Nano ONNX, keyframes from interval 5, adaptive, the `mv`
tracker) on the shared highway clip (720p30, 897 frames), with one secondary entry

    secondary: [{name: kind, kind: classify, model: yolov8n-cls.onnx, classes: <the detector's classes>}]

where yolov8n-cls.onnx is Ultralytics' YOLOv8n-cls built from `yolov8n-cls.yaml` with random weights
and exported to ONNX (tools/make_classifier.py; the compute of the real model, none of its knowledge,
so its labels mean nothing: what is measured is how often it runs and what that costs).

Parts (each prints its figures and writes its section of secondary.json and the page; `--no-write`
only prints):

- `calls`: file mode (as fast as it goes, sinks off), the pipeline with and without the entry,
  alternating, `--repeats` times: wall and CPU time, frames/s, whether the boxes delivered are the
  same; tracks looked at, looks per track (mean and distribution, read from the stage's own per-track
  counts at the stream's end), ms per crop, mean batch, dropped crops, tracks that got attributes;
  then once each with `max_attempts` 1 and 5 and with `every_s: 2`.
- `cache-loop`: the clip looping (`loop: true`, file mode), `--laps` laps, the memory cache on: per
  lap the share of crops answered from the cache, with `every_s: 1, max_attempts: 20` and with the
  default rules; and per lap how many keyframes fall on the same frame of the clip as in lap 1 and
  carry the same boxes there (a crop is found only where both hold).
- `cache-camera`: the clip served as a live RTSP camera (the test suite's GStreamer server), two
  pipeline processes reading it at the same time for `--seconds`, both with
  `runtime.cache: {items: 10000, redis: ...}` on one local redis-server: each one's cached share, and
  how many of their keyframes are the same picture with the same boxes. Then (`--file-pair auto`:
  when the live share is below 0.3) the same file read by two pipelines in file mode one after the
  other through the same Redis.
- `capacity`: `streamlens bench PIPELINE --streams K --seconds S --no-baseline --no-hold
  --decode-seconds 0` for each K, on the pipeline as it is and on a copy with the entry, alternating
  per K, `--repeats` times: the largest K that passes for each, and the rows (kept, p95, F1 against
  detecting every frame, frames detected, the secondary's figures under load). It needs a quiet
  machine. `--dry-run` writes the copy, checks that it loads and prints the commands.
- `page`: rewrite secondary.md from secondary.json.

Every run here is one subprocess of this script (`_trial`), so its CPU time is its own.

Run:
    nice -n 19 python tools/bench_secondary.py calls
    nice -n 19 python tools/bench_secondary.py cache-loop --laps 3
    nice -n 19 python tools/bench_secondary.py cache-camera --seconds 30
    python tools/bench_secondary.py capacity            # on a quiet machine: --streams 4,5,6,7 --seconds 20
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from streamlens.bench import harness
from streamlens.bench.harness import PIPELINES, REPO, RESULTS, machine_line

ROOT = REPO
PIPELINE = PIPELINES / "highway_yolox.yaml"
JSON_OUT = RESULTS / "secondary.json"
PAGE = RESULTS / "secondary.md"
DEFAULT_MODEL = Path("~/.cache/streamlens/models/yolov8n-cls.onnx").expanduser()
ENTRY = "kind"  # the secondary entry's name


# -- the pipelines --------------------------------------------------------------------------------

def base_pipeline(pipeline: Path = PIPELINE) -> dict:
    """The shipped pipeline as a dict on the shared clip with the shared model, its paths absolute (so a
    copy can live anywhere): `harness.shipped`."""
    return harness.shipped(pipeline.name)


def entry(model: Path, classes: list[str], **rules) -> dict:
    return {"name": ENTRY, "kind": "classify", "model": str(model), "classes": list(classes), **rules}


def file_mode(data: dict, *, loop: bool = False) -> dict:
    """`data` reading its first source as a file, as fast as it goes (not paced), no sinks."""
    out = json.loads(json.dumps(data))
    src = out["sources"][0]
    src["live"] = False
    src.pop("loop", None)
    if loop:
        src["loop"] = True
    out["sources"] = [src]
    out["sinks"] = []
    return out


def write_yaml(data: dict, path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# -- one run, in a subprocess ---------------------------------------------------------------------

def _hash(array) -> str:
    import numpy as np

    return hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def picture_id(frame) -> str:
    """A frame's picture, by a hash of a subsample: of its BGR image's green channel when it has been
    converted, else of the decoder's luma plane (so that nothing is converted for it). `clip_ids`
    knows both for every frame of the clip."""
    if frame._image is not None:
        return "g" + _hash(frame._image[::8, ::8, 1])
    return "y" + _hash(frame.grey_sample(8))


def clip_ids(video: str) -> dict[str, int]:
    """Each frame of `video` by both of its `picture_id`s: {id: index in the clip}."""
    import av

    from streamlens.pictures import to_bgr

    ids: dict[str, int] = {}
    with av.open(video) as container:
        for i, picture in enumerate(container.decode(video=0)):
            plane = picture.planes[0]
            import numpy as np

            luma = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)[:picture.height, :picture.width]
            ids["y" + _hash(luma[::8, ::8])] = i
            ids["g" + _hash(to_bgr(picture, 1)[::8, ::8, 1])] = i
    return ids


def trial_main(spec_path: str, out_path: str) -> int:
    """`_trial`: run one pipeline as `spec` says and write what was seen as JSON.

    spec: yaml (the pipeline file), frames (stop after this many results; None: to the end),
    seconds (stop after this long; live), lap_frames (snapshot the secondary's counters every this
    many results), offers (record each keyframe the secondary stage is offered: its frame index,
    a hash of its picture, the detector's boxes it crops)."""
    import numpy as np

    import streamlens
    from streamlens.frame import FrameResult
    from streamlens.secondary import stage as stage_module

    spec = json.loads(Path(spec_path).read_text())
    looks: dict = {}
    offers: list = []

    original_ended = stage_module.SecondaryStage.stream_ended
    original_offer = stage_module.SecondaryStage.offer

    def stream_ended(self, stream):  # the stage's per-track counts, before it forgets them
        for track, mine in self._looks.get(stream, {}).items():
            look = mine.get(ENTRY)
            if look is not None and look.attempts:
                looks[str(track)] = [look.attempts, look.answered]
        return original_ended(self, stream)

    def offer(self, frame, found, det):
        if det.tracker_id is not None and len(det) and found is not None:
            # the detector's boxes: what the stage crops
            boxes = sorted([round(float(v), 2) for v in row] for row in found.xyxy.tolist())
            frame.image  # noqa: B018 - converted now, as the stage converts it to crop
            offers.append([frame.index, picture_id(frame), boxes])
        return original_offer(self, frame, found, det)

    learned: dict = {}  # track -> index of the frame whose apply() took its first answer
    original_apply = stage_module.SecondaryStage.apply

    def apply(self, result):
        for track, *_ in list(self._done.get(result.frame.stream, ())):
            learned.setdefault(str(track), result.frame.index)
        return original_apply(self, result)

    stage_module.SecondaryStage.stream_ended = stream_ended
    stage_module.SecondaryStage.apply = apply
    if spec.get("offers"):
        stage_module.SecondaryStage.offer = offer

    tracks: dict[int, dict] = {}
    digest = hashlib.sha1()
    frames = keyframes = 0
    laps: list = []
    keyframe_indices: list = []
    published: list = []
    min_size = spec.get("min_size", 24)
    limit, seconds, lap = spec.get("frames"), spec.get("seconds"), spec.get("lap_frames")
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    first_result = None
    first_wall = None
    with streamlens.Pipeline.from_yaml(spec["yaml"]) as pipe:
        for item in pipe.results():
            if not isinstance(item, FrameResult):
                continue
            if first_result is None:
                first_result = time.perf_counter()
                first_wall = time.time()
            frames += 1
            if spec.get("frame_ids"):
                published.append(picture_id(item.frame))
            if item.keyframe:
                keyframes += 1
                keyframe_indices.append(item.frame.index)
            det = item.detections
            ids = det.tracker_id.tolist() if det.tracker_id is not None and len(det) else []
            names = det.data.get("class_name") if ids else None
            width, height = item.frame.width, item.frame.height
            if spec.get("digest", True):
                digest.update(np.round(np.asarray(det.xyxy, np.float64), 1).tobytes() if ids else b"-")
                digest.update(np.asarray(ids, np.int64).tobytes())
            for i, tid in enumerate(ids):
                if tid < 0:
                    continue
                x1, y1, x2, y2 = det.xyxy[i].tolist()
                t = tracks.setdefault(tid, {"frames": 0, "first": item.frame.index, "labels": Counter(),
                                            "good": False, "known": None})
                t["frames"] += 1
                t["last"] = item.frame.index
                t["labels"][str(names[i]) if names is not None else str(det.class_id[i])] += 1
                if min(x2 - x1, y2 - y1) >= min_size and x1 >= 1 and y1 >= 1 and x2 <= width - 1 and y2 <= height - 1:
                    t["good"] = True
                known = item.attributes[i] if item.attributes is not None else None
                if known and ENTRY in known and t["known"] is None:
                    t["known"] = item.frame.index
            if lap and frames % lap == 0:
                s = pipe.secondary_stats().get(ENTRY, {})
                laps.append({"frames": frames, "computed": s.get("computed"), "cached": s.get("cached"),
                             "calls": s.get("calls"), "tracks": s.get("tracks")})
            if limit and frames >= limit:
                break
            if seconds and first_result is not None and time.perf_counter() - first_result >= seconds:
                break
        wall = time.perf_counter() - started
        stats = pipe.secondary_stats()
        stream_stats = next(iter(pipe.stats.values()))
        processing_s = stream_stats.wall_s
        counters = {k: getattr(stream_stats, k, None) for k in ("late_keyframes", "deferred_keyframes",
                                                                 "discarded_detections", "dropped")}
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime) + children.ru_utime + children.ru_stime
    result = {
        "frames": frames, "keyframes": keyframes, "wall_s": round(wall, 3), "processing_s": round(processing_s, 3),
        "cpu_s": round(cpu, 3), "fps": round(frames / processing_s, 2) if processing_s else None,
        "boxes_sha1": digest.hexdigest()[:16], "secondary": stats, "looks": looks, "learned": learned, "laps": laps,
        "offers": offers, "first_result_at": first_wall, "ended_at": time.time(), "counters": counters,
        "keyframe_indices": keyframe_indices, "published": published,
        "tracks": {str(k): {**v, "labels": dict(v["labels"])} for k, v in tracks.items()},
    }
    Path(out_path).write_text(json.dumps(result))
    return 0


def run_trial(spec: dict, folder: Path, name: str, *, wait: bool = True):
    """Start `_trial` on `spec` in a subprocess (nice as this process is); its JSON, or (with
    `wait=False`) the Popen and the path its JSON will be at."""
    spec_path, out_path = folder / f"{name}.spec.json", folder / f"{name}.out.json"
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "_trial", str(spec_path), str(out_path)]
    log = open(folder / f"{name}.log", "wb")
    popen = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if not wait:
        return popen, out_path, log
    return finish_trial(popen, out_path, log, folder / f"{name}.log")


def finish_trial(popen, out_path: Path, log, log_path: Path | None = None, timeout: float = 1200) -> dict:
    try:
        code = popen.wait(timeout=timeout)
    finally:
        log.close()
    if code != 0 or not out_path.exists():
        tail = Path(log.name).read_text(errors="replace")[-3000:]
        raise RuntimeError(f"trial failed (exit {code}):\n{tail}")
    return json.loads(out_path.read_text())


# -- what a run says ------------------------------------------------------------------------------

def summarise(run: dict, classes: list[str], max_attempts: int) -> dict:
    """The secondary's figures of one run: stage counters and the per-track view."""
    s = run["secondary"].get(ENTRY) or {}
    tracks = run["tracks"]

    def label(t):
        return max(t["labels"], key=t["labels"].get)

    eligible = {k: t for k, t in tracks.items() if label(t) in classes}
    good = {k: t for k, t in eligible.items() if t["good"]}
    known = {k: t for k, t in eligible.items() if t["known"] is not None}
    looks = run["looks"]
    answered = Counter(a for _, a in looks.values())
    attempts = Counter(a for a, _ in looks.values())
    waits = sorted(t["known"] - t["first"] for t in known.values())
    learned = run.get("learned", {})
    answered_tracks = [k for k, (_, b) in looks.items() if b > 0]
    too_late = [k for k in answered_tracks if k in tracks and learned.get(k, -1) > tracks[k]["last"]]
    long = {k: t for k, t in eligible.items() if t["frames"] > 15}
    return {
        "frames": run["frames"], "keyframes": run["keyframes"], "tracks_published": len(tracks),
        "tracks_of_classes": len(eligible), "tracks_with_good_view": len(good),
        "tracks_looked_at": s.get("tracks"), "calls": s.get("calls"), "calls_per_track": s.get("attempts_per_track"),
        "answered_per_track": {str(k): answered[k] for k in sorted(answered)},
        "asked_per_track": {str(k): attempts[k] for k in sorted(attempts)},
        "asked_not_answered": sum(a - b for a, b in looks.values()),
        "above_max_attempts": sum(1 for a, b in looks.values() if max(a, b) > max_attempts),
        "tracks_with_attributes": len(known),
        "good_view_never_answered": sum(1 for k in good if k not in known),
        "frames_to_first_answer_p50": statistics.median(waits) if waits else None,
        "answered_after_last_frame": len(too_late),
        "looked_at_5_frames_or_less": sum(1 for k in looks if k in tracks and tracks[k]["frames"] <= 5),
        "tracks_5_frames_or_less": sum(1 for t in eligible.values() if t["frames"] <= 5),
        "tracks_over_15_frames": len(long),
        "tracks_over_15_frames_with_attributes": sum(1 for t in long.values() if t["known"] is not None),
        "track_frames_p50": statistics.median(t["frames"] for t in eligible.values()) if eligible else None,
        "computed": s.get("computed"), "cached": s.get("cached"), "hit_rate": s.get("hit_rate"),
        "batch_mean": s.get("batch_mean"), "ms_per_crop": s.get("ms_per_crop"), "dropped": s.get("dropped"),
        "by_class": dict(Counter(label(t) for t in eligible.values())),
    }


def med(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


# -- the machine ----------------------------------------------------------------------------------

def machine() -> dict:
    """The harness's machine (CPU model and flags, cores, memory, system), with `nproc` as older pages
    named the usable cores."""
    found = harness.machine()
    return {**found, "nproc": found["usable_cores"]}


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("streamlens", "onnxruntime", "numpy", "av", "opencv-python", "redis"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[name] = md.version(name)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = [line[3:] for line in subprocess.run(["git", "status", "--porcelain", "--", "streamlens"], cwd=ROOT,
                                                     capture_output=True, text=True).stdout.splitlines()]
        if head:
            out["streamlens"] = f"{out.get('streamlens', '?')} at {head}" + (
                f" (not committed: {', '.join(dirty[:3])}{', ...' if len(dirty) > 3 else ''})" if dirty else "")
    if shutil.which("redis-server"):
        words = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
        out["redis-server"] = next((w.split("=", 1)[1] for w in words if w.startswith("v=")), "?")
    return out


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def header(command: str) -> dict:
    return {"command": command, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "versions": versions(), "load_before": load()}


def model_arg(path: str | None) -> Path:
    model = Path(path).expanduser() if path else DEFAULT_MODEL
    if not model.is_file():
        sys.exit(f"{model}: not found; build it with `python tools/make_classifier.py {model}`")
    return model.resolve()


def save(part: str, data: dict, write: bool) -> None:
    print(json.dumps(data, indent=1))
    if not write:
        return
    everything = json.loads(JSON_OUT.read_text()) if JSON_OUT.exists() else {}
    everything[part] = data
    JSON_OUT.write_text(json.dumps(everything, indent=1) + "\n")
    write_page(everything)
    print(f"wrote {JSON_OUT.relative_to(ROOT)} and {PAGE.relative_to(ROOT)}", file=sys.stderr)


def command_line() -> str:
    return harness.command_line()


# -- 1. calls per track, and the cost of a file run -----------------------------------------------

def part_calls(args) -> dict:
    model = model_arg(args.model)
    base = base_pipeline()
    classes = list(base["detector"].get("classes") or [])
    data = header(command_line())
    plain = file_mode(base)
    with_entry = file_mode({**base, "secondary": [entry(model, classes)]})
    runs: dict[str, list] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory(prefix="bench_secondary_") as tmp:
        folder = Path(tmp)
        paths = {"without": write_yaml(plain, folder / "without.yaml"), "with": write_yaml(with_entry, folder / "with.yaml")}
        for r in range(args.repeats):
            for variant in ("without", "with") if r % 2 == 0 else ("with", "without"):  # alternating
                run = run_trial({"yaml": str(paths[variant])}, folder, f"{variant}{r}")
                runs[variant].append(run)
                print(f"repeat {r + 1} {variant}: {run['frames']} frames, wall {run['wall_s']} s, "
                      f"cpu {run['cpu_s']} s, {run['fps']} frames/s, boxes {run['boxes_sha1']}", file=sys.stderr, flush=True)
        variants = []
        for label, rules in (("max_attempts 1", {"max_attempts": 1}), ("max_attempts 5", {"max_attempts": 5}),
                             ("every_s 2", {"every_s": 2})):
            cfg = file_mode({**base, "secondary": [entry(model, classes, **rules)]})
            run = run_trial({"yaml": str(write_yaml(cfg, folder / "v.yaml"))}, folder, "variant")
            variants.append({"rules": label, "wall_s": run["wall_s"], "fps": run["fps"], "cpu_s": run["cpu_s"],
                             **summarise(run, classes, rules.get("max_attempts", 3))})
            print(f"{label}: {variants[-1]['calls']} calls on {variants[-1]['tracks_looked_at']} tracks", file=sys.stderr)
    data["load_after"] = load()
    data["entry"] = entry(model.name, classes)
    data["model_bytes"] = model.stat().st_size
    data["pipeline"] = {"source": Path(base["sources"][0]["uri"]).name, "keyframes": base.get("keyframes"),
                        "tracker": base.get("tracker"), "detector": Path(base["detector"]["model"]).name,
                        "classes": classes}
    data["repeats"] = args.repeats
    data["timing"] = {v: {"wall_s": [r["wall_s"] for r in rs], "processing_s": [r["processing_s"] for r in rs],
                          "cpu_s": [r["cpu_s"] for r in rs], "fps": [r["fps"] for r in rs],
                          "boxes_sha1": sorted({r["boxes_sha1"] for r in rs}), "frames": rs[0]["frames"],
                          "keyframes": [r["keyframes"] for r in rs]}
                      for v, rs in runs.items()}
    every = runs["without"] + runs["with"]
    schedules = [tuple(r["keyframe_indices"]) for r in every]
    diverge = [next((a for a, b in zip(schedules[0], s) if a != b), None) for s in schedules[1:]]
    data["reproducible"] = {
        "runs": len(every), "distinct_box_hashes": len({r["boxes_sha1"] for r in every}),
        "hash_shared_with_and_without": sorted(set(data["timing"]["with"]["boxes_sha1"])
                                               & set(data["timing"]["without"]["boxes_sha1"])),
        "distinct_keyframe_schedules": len(set(schedules)),
        "first_keyframe_difference_from_run_1": diverge,
    }
    data["default_rules"] = [summarise(r, classes, 3) for r in runs["with"]]
    data["variants"] = variants
    return data


# -- 2. a looping clip ----------------------------------------------------------------------------

def clip_frames(path: str) -> int:
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        if stream.frames:
            return int(stream.frames)
        return sum(1 for _ in container.decode(stream))


def keyframe_overlap(offers: list, lap_frames: int, laps: int) -> list[dict]:
    """Per lap: keyframes offered to the stage, how many fall on a frame of the clip that an earlier
    lap also offered, and how many of those show the same picture with the same boxes as there."""
    by_lap: list[dict[int, tuple]] = [dict() for _ in range(laps)]
    for index, digest, boxes in offers:
        lap, at = divmod(index, lap_frames)
        if lap < laps:
            by_lap[lap][at] = (digest, json.dumps(boxes))
    earlier: dict[int, set] = {}
    out = []
    for lap, offered in enumerate(by_lap):
        same_frame = [at for at in offered if at in earlier]
        out.append({"lap": lap + 1, "keyframes": len(offered), "same_frame_as_before": len(same_frame),
                    "same_picture": sum(any(offered[at][0] == d for d, _ in earlier[at]) for at in same_frame),
                    "same_boxes": sum(offered[at] in earlier[at] for at in same_frame)})
        for at, seen in offered.items():
            earlier.setdefault(at, set()).add(seen)
    return out


def per_lap(laps: list[dict]) -> list[dict]:
    out, prev = [], {"computed": 0, "cached": 0, "calls": 0, "tracks": 0}
    for i, snap in enumerate(laps):
        d = {k: (snap.get(k) or 0) - (prev.get(k) or 0) for k in ("computed", "cached", "calls", "tracks")}
        crops = d["computed"] + d["cached"]
        out.append({"lap": i + 1, **d, "cached_share": round(d["cached"] / crops, 4) if crops else None})
        prev = snap
    return out


def part_cache_loop(args) -> dict:
    model = model_arg(args.model)
    base = base_pipeline()
    classes = list(base["detector"].get("classes") or [])
    frames = clip_frames(base["sources"][0]["uri"])
    data = header(command_line())
    data.update({"laps": args.laps, "lap_frames": frames, "runs": []})
    with tempfile.TemporaryDirectory(prefix="bench_secondary_") as tmp:
        folder = Path(tmp)
        for label, rules in (("every_s 1, max_attempts 20", {"every_s": 1, "max_attempts": 20}),
                             ("default rules (regrow 0.2, max_attempts 3)", {})):
            cfg = file_mode({**base, "secondary": [entry(model, classes, **rules)],
                             "runtime": {"cache": {"items": 10000}}}, loop=True)
            spec = {"yaml": str(write_yaml(cfg, folder / "loop.yaml")), "frames": frames * args.laps,
                    "lap_frames": frames, "offers": True, "digest": False}
            run = run_trial(spec, folder, "loop")
            laps = per_lap(run["laps"])
            overlap = keyframe_overlap(run["offers"], frames, args.laps)
            for a, b in zip(laps, overlap):
                a.update({k: v for k, v in b.items() if k != "lap"})
            total = run["secondary"].get(ENTRY, {})
            data["runs"].append({"rules": label, "entry": entry(model.name, classes, **rules), "per_lap": laps,
                                 "total": {k: total.get(k) for k in ("computed", "cached", "hit_rate", "calls", "tracks",
                                                                     "dropped", "ms_per_crop", "batch_mean")},
                                 "cache": run["secondary"].get("cache"), "wall_s": run["wall_s"]})
            for lap in laps:
                print(f"{label}: lap {lap['lap']}: cached {lap['cached']} computed {lap['computed']} "
                      f"share {lap['cached_share']}; keyframes {lap['keyframes']}, on an earlier lap's keyframe frames "
                      f"{lap['same_frame_as_before']}, same picture {lap['same_picture']}, same boxes {lap['same_boxes']}",
                      file=sys.stderr, flush=True)
    data["load_after"] = load()
    return data


# -- 3. two pipelines on one camera ---------------------------------------------------------------

def offers_overlap(a: list, b: list) -> dict:
    """Keyframes of two pipelines by their picture: how many are the same picture, and how many of
    those also carry the same detector boxes."""
    pa = {pid: json.dumps(boxes) for _, pid, boxes in a}
    pb = {pid: json.dumps(boxes) for _, pid, boxes in b}
    common = set(pa) & set(pb)
    return {"keyframes_a": len(pa), "keyframes_b": len(pb), "same_picture": len(common),
            "same_picture_same_boxes": sum(pa[d] == pb[d] for d in common)}


def camera_overlap(a: dict, b: dict, ids: dict[str, int]) -> dict:
    """Two pipelines on one camera, by the frame of the clip each picture is: the frames both
    published, the keyframes each chose among those, the keyframes both chose (and with the same
    boxes). The camera loops the clip, so a frame of the clip is one picture whatever its lap."""
    out = {}
    sets = []
    for name, run in (("a", a), ("b", b)):
        got = [ids.get(pid) for pid in run["published"]]
        sets.append({i for i in got if i is not None})
        out[f"published_{name}"] = len(got)
        out[f"unmatched_{name}"] = sum(i is None for i in got)
        known = [i for i in got if i is not None]
        out[f"clip_frames_{name}"] = [known[0], known[-1]] if known else None
        out[f"first_result_{name}"] = run.get("first_result_at")
    common = sets[0] & sets[1]
    keys = [{ids.get(pid): json.dumps(boxes) for _, pid, boxes in run["offers"]} for run in (a, b)]
    both = set(keys[0]) & set(keys[1])
    out.update({"clip_frames_published_by_both": len(common),
                "keyframes_a": len(keys[0]), "keyframes_a_on_common_frames": len(set(keys[0]) & common),
                "keyframes_b": len(keys[1]), "keyframes_b_on_common_frames": len(set(keys[1]) & common),
                "same_keyframe": len(both), "same_keyframe_same_boxes": sum(keys[0][i] == keys[1][i] for i in both)})
    return out


def _pipeline_figures(name: str, run: dict, classes: list[str]) -> dict:
    s = run["secondary"].get(ENTRY, {})
    t = summarise(run, classes, 3)
    return {"name": name, "frames": run["frames"], "keyframes_offered": len(run["offers"]), "fps": run["fps"],
            **{k: s.get(k) for k in ("computed", "cached", "hit_rate", "calls", "tracks", "attempts_per_track",
                                     "dropped", "ms_per_crop")},
            "redis_hits": (run["secondary"].get("cache") or {}).get("redis_hits"),
            "frames_dropped": (run.get("counters") or {}).get("dropped"),
            "tracks_with_attributes": t["tracks_with_attributes"], "answered_after_last_frame": t["answered_after_last_frame"]}


def part_cache_camera(args) -> dict:
    from streamlens.testing.redis_server import RedisServer, redis_missing
    from streamlens.testing.rtsp_server import ChildProcess, GstRtspServer, gst_missing

    for reason in (gst_missing(), redis_missing()):
        if reason:
            sys.exit(f"cache-camera: {reason}")
    model = model_arg(args.model)
    base = base_pipeline()
    classes = list(base["detector"].get("classes") or [])
    video = Path(base["sources"][0]["uri"])
    data = header(command_line())
    data["seconds"] = args.seconds
    ids = clip_ids(str(video))
    with tempfile.TemporaryDirectory(prefix="bench_secondary_") as tmp:
        folder = Path(tmp)
        (folder / "rtsp").mkdir()
        with RedisServer(folder / "redis") as redis_server, GstRtspServer({"highway": video}, folder / "rtsp") as rtsp:
            import redis

            client = redis.Redis.from_url(redis_server.url)
            url = rtsp.url("highway")
            cache = {"items": 10000, "redis": redis_server.url}
            live = json.loads(json.dumps(base))
            live["sources"] = [{"name": "highway", "uri": url, "live": True, "transport": "tcp"}]
            live["sinks"] = []
            live["secondary"] = [entry(model, classes)]
            live["runtime"] = {"cache": cache}
            path = write_yaml(live, folder / "camera.yaml")
            # The test server's shared media runs from its start: the first client to connect is sent what
            # arrived since (here many seconds of the clip) before it is live. A first reader, kept on for the
            # whole run, takes that backlog, so that both pipelines get the camera as it is now.
            drain = ChildProcess(["ffmpeg", "-nostdin", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", url,
                                  "-an", "-c", "copy", "-f", "null", "-"], folder / "drain.log")
            time.sleep(3)
            spec = {"yaml": str(path), "seconds": args.seconds, "offers": True, "digest": False, "frame_ids": True}
            try:
                started = [run_trial(spec, folder, name, wait=False) for name in ("a", "b")]
                a, b = (finish_trial(*s) for s in started)
            finally:
                drain.kill()
            data["live"] = {"url": "rtsp://127.0.0.1:PORT/highway (GStreamer RTSP server, RTSP over TCP)",
                            "entry": entry(model.name, classes), "cache": {**cache, "redis": "redis://127.0.0.1:PORT/0"},
                            "pipelines": [_pipeline_figures(n, r, classes) for n, r in (("a", a), ("b", b))],
                            "overlap": camera_overlap(a, b, ids)}
            for p in data["live"]["pipelines"]:
                print(f"live {p['name']}: {p['frames']} frames, {p['keyframes_offered']} keyframes offered, computed "
                      f"{p['computed']}, cached {p['cached']}", file=sys.stderr, flush=True)
            print(f"live overlap: {data['live']['overlap']}", file=sys.stderr, flush=True)
            shares = [p["hit_rate"] or 0 for p in data["live"]["pipelines"]]
            if args.file_pair == "always" or (args.file_pair == "auto" and max(shares) < 0.3):
                client.flushall()
                cfg = file_mode({**base, "secondary": [entry(model, classes)], "runtime": {"cache": cache}})
                spec = {"yaml": str(write_yaml(cfg, folder / "file.yaml")), "offers": True, "digest": True}
                first = run_trial(spec, folder, "first")
                second = run_trial(spec, folder, "second")
                schedules = [first["keyframe_indices"], second["keyframe_indices"]]
                data["file_pair"] = {
                    "pipelines": [_pipeline_figures(n, r, classes) for n, r in (("first", first), ("second", second))],
                    "keyframes": offers_overlap(first["offers"], second["offers"]),
                    "same_keyframe_schedule": schedules[0] == schedules[1],
                    "first_keyframe_difference": next((x for x, y in zip(*schedules) if x != y), None),
                    "same_boxes_all_frames": first["boxes_sha1"] == second["boxes_sha1"]}
                for p in data["file_pair"]["pipelines"]:
                    print(f"file {p['name']}: computed {p['computed']}, cached {p['cached']}", file=sys.stderr)
                print(f"file pair: {data['file_pair']['keyframes']}, first schedule difference at "
                      f"{data['file_pair']['first_keyframe_difference']}", file=sys.stderr)
            client.close()
    data["load_after"] = load()
    return data


# -- 4. live capacity -----------------------------------------------------------------------------

def bench_trial(pipeline: Path, k: int, seconds: float, out: Path) -> dict:
    command = [sys.executable, "-m", "streamlens", "bench", str(pipeline), "--streams", str(k), "--seconds", str(seconds),
               "--no-baseline", "--no-hold", "--decode-seconds", "0", "--out", str(out)]
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    t = json.loads(out.read_text())["trials"][0]
    acc, lat = t.get("accuracy") or {}, t.get("latency_ms") or {}
    sec = {}
    for s in (t.get("streams") or {}).values():
        found = ((s.get("stats") or {}).get("secondary") or {}).get(ENTRY)
        if found:
            sec = {k: found.get(k) for k in ("calls", "tracks", "attempts_per_track", "computed", "cached",
                                             "dropped", "ms_per_crop", "batch_mean")}
            break
    return {"k": k, "kept_min": t.get("kept_min"), "p95_ms": lat.get("p95"), "f1": acc.get("f1"),
            "f1_min": acc.get("f1_min"), "detected_rate": t.get("detected_rate"), "passed": bool(t.get("passed")),
            "dropped": t.get("dropped"), "secondary": sec or None}


def part_capacity(args) -> dict:
    model = model_arg(args.model)
    base = base_pipeline()
    classes = list(base["detector"].get("classes") or [])
    streams = [int(k) for k in args.streams.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="bench_secondary_"))
    copy = write_yaml({**base, "secondary": [entry(model, classes)]}, folder / "highway_yolox_secondary.yaml")
    pipelines = {"as is": harness.shipped_file(PIPELINE), "with the entry": copy}
    if args.dry_run:
        from streamlens.config import load_pipeline

        cfg = load_pipeline(copy)
        print(f"{copy} loads: secondary {[e.name for e in cfg.secondary]} on {cfg.secondary[0].classes}")
        for k in streams:
            for name, p in pipelines.items():
                print(f"{name}: python -m streamlens bench {p} --streams {k} --seconds {args.seconds:g} --no-baseline "
                      f"--no-hold --decode-seconds 0 --out ...")
        shutil.rmtree(folder)
        return {}
    data = header(command_line())
    data.update({"streams": streams, "seconds": args.seconds, "repeats": args.repeats,
                 "entry": entry(model.name, classes), "trials": []})
    try:
        for r in range(args.repeats):
            for k in streams:
                order = list(pipelines) if (r + k) % 2 == 0 else list(reversed(pipelines))  # alternating
                for name in order:
                    t = bench_trial(pipelines[name], k, args.seconds, folder / "b.json")
                    t.update({"pipeline": name, "repeat": r + 1})
                    data["trials"].append(t)
                    print(f"K={k} {name}: kept {t['kept_min']} p95 {t['p95_ms']} F1 {t['f1']} (worst {t['f1_min']}) "
                          f"detected {t['detected_rate']} passed {t['passed']}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    data["load_after"] = load()
    return data


# -- the page -------------------------------------------------------------------------------------

def _f(value, fmt="{}", dash="-"):
    return dash if value is None else fmt.format(value)


def _meta(d: dict) -> list[str]:
    m, v = d["machine"], d["versions"]
    return [f"Command: `{d['command']}`, {d['date']}  ",
            f"Machine: {_machine(m)}, {m['system']}; load average "
            f"{d['load_before']} before, {d.get('load_after', '?')} after  ",
            "Versions: " + ", ".join(f"{k} {x}" for k, x in v.items())]


def _machine(m: dict) -> str:
    """`machine_line` of what was measured; an older JSON has the usable cores as `nproc` only."""
    return machine_line(m) if "cores" in m else f"{m['cpu']}, nproc {m['nproc']}, {m['memory_gib']} GiB"


def _calls_section(d: dict) -> list[str]:
    t, rules, rep = d["timing"], d["default_rules"], d["reproducible"]
    r0 = rules[0]
    fps, wait = med(t["with"]["fps"]), r0["frames_to_first_answer_p50"]
    wait_ms = 1000 * wait / fps if wait is not None and fps else None
    lines = ["## 1. Looks per track, and what they cost a file run", "", *_meta(d), "",
             f"File mode (decoded and processed as fast as it goes, no sinks), {t['with']['frames']} frames of "
             f"{d['pipeline']['source']}; entry `{json.dumps(d['entry'])}` (defaults: min_size 24, regrow 0.2, "
             f"max_attempts 3, max_batch 8, max_wait_ms 20, 1 onnxruntime thread); memory cache on (the default). "
             f"{d['repeats']} runs of each, alternating; medians. Each run is its own process; CPU s is its user + "
             f"system time, processing s from the stream's first frame to its end.", "",
             "| | wall s | processing s | CPU s | frames/s | keyframes |",
             "|---|---:|---:|---:|---:|---:|"]
    for variant, label in (("without", "without the entry"), ("with", "with the entry")):
        v = t[variant]
        lines.append(f"| {label} | {med(v['wall_s'])} | {med(v['processing_s'])} | {med(v['cpu_s'])} | {med(v['fps'])} | "
                     f"{med(v['keyframes'])} |")
    shared = rep["hash_shared_with_and_without"]
    if rep["distinct_box_hashes"] == 1:
        same = (f"identical in all {rep['runs']} runs, with the entry and without ({shared[0] if shared else '?'}): "
                f"the entry changes no box, so the accuracy of what is delivered is that of the pipeline without it")
    else:
        same = (f"{rep['distinct_box_hashes']} distinct hashes in {rep['runs']} runs"
                + (f"; a run with the entry and one without delivered identical boxes ({', '.join(shared)}), so the "
                   f"entry changes no box" if shared else "")
                + f"; {rep['distinct_keyframe_schedules']} distinct keyframe schedules (first difference from run 1 at "
                  f"frame {', '.join(_f(x) for x in rep['first_keyframe_difference_from_run_1'])})")
    lines += ["", f"Accuracy: the boxes and track ids of every frame, hashed per run: {same}. The classifier's labels "
              f"have no accuracy to give: its weights are random.", "",
              "| rules | tracks (of the classes) | good view | looked at | looks | looks per track | "
              "answered looks per track: tracks | with attributes | answered after the track's last frame | "
              "ms per crop | mean batch | dropped |",
              "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]

    def row(label, s):
        dist = ", ".join(f"{k}: {n}" for k, n in s["answered_per_track"].items())
        return (f"| {label} | {s['tracks_published']} ({s['tracks_of_classes']}) | {s['tracks_with_good_view']} | "
                f"{s['tracks_looked_at']} | {s['calls']} | **{s['calls_per_track']}** | {dist} | "
                f"{s['tracks_with_attributes']} | {s.get('answered_after_last_frame', '-')} | {s['ms_per_crop']} | "
                f"{s['batch_mean']} | {s['dropped']} |")

    for i, s in enumerate(rules):
        lines.append(row(f"default, run {i + 1}", s))
    for s in d["variants"]:
        lines.append(row(s["rules"], s))
    lines += ["", f"- Tracks by class (run 1): {', '.join(f'{k} {n}' for k, n in r0['by_class'].items())}; a track's median "
              f"life {r0.get('track_frames_p50')} frames; {r0.get('tracks_5_frames_or_less')} tracks lived 5 frames or "
              f"less (one keyframe interval), {r0.get('looked_at_5_frames_or_less')} of them were looked at; of the "
              f"{r0.get('tracks_over_15_frames')} tracks that lived more than 15 frames, "
              f"{r0.get('tracks_over_15_frames_with_attributes')} got attributes.",
              f"- Good view: the box's shorter side at least 24 px and inside the frame on some published frame (the "
              f"stage judges keyframes' boxes only). Looks per track: answered looks over tracks looked at, the stage's "
              f"`attempts_per_track`; the distribution is the stage's own per-track counts at the stream's end. Looks "
              f"asked for but not answered when the stream ended: {', '.join(str(s['asked_not_answered']) for s in rules)} "
              f"(per run); tracks above max_attempts: {sum(s['above_max_attempts'] for s in rules + d['variants'])}.",
              f"- \"Answered after the track's last frame\": the answer came back after the track had ended, so no "
              f"frame carried it. In file mode frames go {_f(med(t['with']['fps']), '{:.0f}')} a second, not 30: the "
              f"median first answer came {r0['frames_to_first_answer_p50']} frames after the track's first frame "
              f"({_f(wait_ms, '{:.0f}')} ms)."]
    return lines


def _loop_section(d: dict) -> list[str]:
    lines = ["## 2. A looping clip, memory cache", "", *_meta(d), "",
             f"The clip with `loop: true` in file mode, {d['laps']} laps of {d['lap_frames']} frames, "
             f"`runtime.cache: {{items: 10000}}`. Per lap: crops answered from the cache against crops computed; "
             f"the keyframes the stage was offered, how many fall on a frame of the clip that was a keyframe in an "
             f"earlier lap, and how many of those show the same picture with the same detector boxes (a crop is found in the "
             f"cache only then). Lap boundaries are read while the run goes on: a batch in flight may count in the "
             f"next lap.", ""]
    for run in d["runs"]:
        tot = run["total"]
        rules = {k: v for k, v in run["entry"].items() if k not in ("name", "kind", "model", "classes")}
        lines += [f"Rules: {run['rules']} (`{json.dumps(rules)}`)", "",
                  "| lap | crops computed | crops from the cache | cached share | keyframes | on a frame an earlier lap detected | "
                  "same picture | same boxes |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for lap in run["per_lap"]:
            lines.append(f"| {lap['lap']} | {lap['computed']} | {lap['cached']} | {_f(lap['cached_share'], '{:.1%}')} | "
                         f"{lap['keyframes']} | {lap['same_frame_as_before']} | {lap['same_picture']} | {lap['same_boxes']} |")
        laps = [lap for lap in run["per_lap"][1:] if lap["cached_share"] is not None]
        crops = sum(lap["cached"] + lap["computed"] for lap in laps)
        later = sum(lap["cached"] for lap in laps) / crops if crops else None
        lines += ["", f"All laps: {tot['computed']} computed, {tot['cached']} from the cache "
                  f"({_f(tot['hit_rate'], '{:.1%}')}); laps 2-{d['laps']}: {_f(later, '{:.1%}')} of their crops from the "
                  f"cache; {tot['dropped']} dropped; {tot['ms_per_crop']} ms per computed crop.", ""]
    return lines


def _camera_section(d: dict) -> list[str]:
    live = d["live"]
    o = live["overlap"]
    lines = ["## 3. Two pipelines on one camera, Redis", "", *_meta(d), "",
             f"The clip served as a live camera by the test suite's GStreamer RTSP server (streamlens/testing/rtsp_server.py: "
             f"`ffmpeg -re -stream_loop -1` into it, one shared media), two pipeline processes started together on "
             f"the same URL (RTSP over TCP), each stopped {d['seconds']:g} s after its first result, both with "
             f"`runtime.cache: {{items: 10000, redis: ...}}` on one local redis-server; default rules. Every "
             f"published frame is matched to its frame of the clip by a hash of a subsample of its picture.", "",
             "| pipeline | frames published | frames dropped | keyframes offered | crops computed | from the cache | "
             "cached share | Redis hits | looks / tracks | tracks with attributes | dropped crops |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for p in live["pipelines"]:
        lines.append(f"| {p['name']} | {p['frames']} | {p['frames_dropped']} | {p['keyframes_offered']} | {p['computed']} | "
                     f"{p['cached']} | {_f(p['hit_rate'], '{:.1%}')} | {p['redis_hits']} | {p['calls']} / {p['tracks']} | "
                     f"{p['tracks_with_attributes']} | {p['dropped']} |")
    lines += ["", f"Frames of the clip both published: {o['clip_frames_published_by_both']} (of {o['published_a']} and "
              f"{o['published_b']}; not matched to the clip: {o['unmatched_a']} and {o['unmatched_b']}). Keyframes "
              f"(offered to the stage): {o['keyframes_a']} and {o['keyframes_b']}, of which "
              f"{o['keyframes_a_on_common_frames']} and {o['keyframes_b_on_common_frames']} fall on frames both "
              f"published; the same keyframe in both: **{o['same_keyframe']}**, with the same boxes: "
              f"{o['same_keyframe_same_boxes']}. A crop is found in the cache only where both hold.", ""]
    fp = d.get("file_pair")
    if fp:
        k2 = fp["keyframes"]
        lines += ["The seeds' case: the same file read by two pipelines in file mode one after the other, the same "
                  "Redis (emptied first), default rules.", "",
                  "| pipeline | frames | keyframes offered | crops computed | from the cache | cached share | Redis hits |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for p in fp["pipelines"]:
            lines.append(f"| {p['name']} | {p['frames']} | {p['keyframes_offered']} | {p['computed']} | {p['cached']} | "
                         f"{_f(p['hit_rate'], '{:.1%}')} | {p['redis_hits']} |")
        schedule = ("yes" if fp["same_keyframe_schedule"]
                    else f"no (first difference at frame {_f(fp['first_keyframe_difference'])})")
        lines += ["", f"The same keyframe schedule both times: {schedule}; keyframes with the same picture and boxes in both: "
                  f"{k2['same_picture_same_boxes']} of {k2['keyframes_a']} and {k2['keyframes_b']}; boxes of every "
                  f"frame identical: {fp['same_boxes_all_frames']}.", ""]
    return lines


def _capacity_section(d: dict) -> list[str]:
    lines = ["## 4. Live capacity (`streamlens bench`)", "", *_meta(d), "",
             f"`streamlens bench PIPELINE --streams K --seconds {d['seconds']:g} --no-baseline --no-hold --decode-seconds 0` "
             f"per K and pipeline, alternating, {d['repeats']} repeat(s): pipelines/highway_yolox.yaml as it is, and a copy "
             f"with `secondary: [{json.dumps(d['entry'])}]`. Pass: every frame kept, p95 <= 33 ms, worst stream F1 >= 0.85 "
             f"against detecting every frame (F1 of the boxes the subscriber received).", "",
             "| K | pipeline | kept (min stream) | p95 ms | F1 (worst stream) | frames detected | passes | "
             "secondary: looks / tracks, computed, dropped |",
             "|---|---|---:|---:|---|---:|---|---|"]
    best: dict[str, int | None] = {}
    for k in d["streams"]:
        for name in ("as is", "with the entry"):
            ts = [t for t in d["trials"] if t["k"] == k and t["pipeline"] == name]
            if not ts:
                continue
            passes = sum(t["passed"] for t in ts)
            if passes == len(ts):
                best[name] = max(best.get(name) or 0, k)
            sec = [t["secondary"] for t in ts if t.get("secondary")]
            s = sec[0] if sec else None
            extra = f"{s['calls']} / {s['tracks']}, {s['computed']}, {s['dropped']}" if s else "-"
            lines.append(f"| {k} | {name} | {_f(med([t['kept_min'] for t in ts]), '{:.1%}')} | "
                         f"{med([t['p95_ms'] for t in ts])} | "
                         f"{_f(med([t['f1'] for t in ts]), '{:.3f}')} ({_f(med([t['f1_min'] for t in ts]), '{:.3f}')}) | "
                         f"{_f(med([t['detected_rate'] for t in ts]), '{:.1%}')} | {passes}/{len(ts)} | {extra} |")
    lines += ["", f"Largest K passing every trial: as is **{best.get('as is', 'none')}**, with the entry "
              f"**{best.get('with the entry', 'none')}**.", ""]
    return lines


def _targets(data: dict) -> list[str]:
    lines = ["## Against the targets", ""]
    c = data.get("calls")
    if c:
        means = [s["calls_per_track"] for s in c["default_rules"] if s["calls_per_track"] is not None]
        variants = ", ".join(f"{v['rules']}: {v['calls_per_track']}" for v in c["variants"])
        fps_with, fps_without = med(c["timing"]["with"]["fps"]), med(c["timing"]["without"]["fps"])
        cpu_with, cpu_without = med(c["timing"]["with"]["cpu_s"]), med(c["timing"]["without"]["cpu_s"])
        lines.append(f"- *Secondary calls per track <= 3 on average*: {'met' if means and max(means) <= 3 else 'not met'}: "
                     f"{', '.join(map(str, means))} looks per track looked at (default rules, {len(means)} runs; "
                     f"{variants}). "
                     f"A file run costs {_f(cpu_with and cpu_without and cpu_with - cpu_without, '{:.1f}')} CPU s more with the "
                     f"entry ({cpu_without} against {cpu_with}; frames/s {fps_without} against {fps_with}).")
    cap = data.get("capacity")
    if cap:
        best = {}
        for name in ("as is", "with the entry"):
            ok = [k for k in cap["streams"] if all(t["passed"] for t in cap["trials"] if t["k"] == k and t["pipeline"] == name)
                  and any(t["k"] == k and t["pipeline"] == name for t in cap["trials"])]
            best[name] = max(ok) if ok else 0
        drop = best["as is"] - best["with the entry"]
        lines.append(f"- *Live capacity drops by at most one stream*: {'met' if drop <= 1 else 'not met'}: "
                     f"{best['as is']} streams as is, {best['with the entry']} with the entry.")
    else:
        lines.append("- *Live capacity drops by at most one stream*: not measured yet "
                     "(`python tools/bench_secondary.py capacity` on a quiet machine).")
    shares = []
    loop = data.get("cache-loop")
    if loop:
        for run in loop["runs"]:
            later = [lap for lap in run["per_lap"][1:]]
            total = sum(lap["cached"] + lap["computed"] for lap in later)
            shares.append(f"{_f(sum(lap['cached'] for lap in later) / total if total else None, '{:.1%}')} of laps 2-"
                          f"{loop['laps']}'s crops with {run['rules']}")
        lines.append(f"- *The cache on a looping clip*: {'; '.join(shares)}, against the seeds' 60-90%.")
    cam = data.get("cache-camera")
    if cam:
        ps, o = cam["live"]["pipelines"], cam["live"]["overlap"]
        text = (f"- *Two pipelines reading the same camera*: {', '.join(_f(p['hit_rate'], '{:.1%}') for p in ps)} of each "
                f"one's crops from the cache (live, {cam['seconds']:g} s: {o['same_keyframe']} keyframes in common of "
                f"{o['keyframes_a']} and {o['keyframes_b']}, {o['same_keyframe_same_boxes']} of them with the same boxes)")
        if cam.get("file_pair"):
            second = cam["file_pair"]["pipelines"][1]
            text += f"; the same file read twice through Redis: {_f(second['hit_rate'], '{:.1%}')} for the second"
        lines.append(text + ".")
    lines.append("- *With Redis, a hit costs < 2 ms*: met, measured in [cache.md](cache.md) (`tools/bench_cache.py`): a "
                 "whole hit of one crop (key, MGET round trip, unpack) 0.17-0.19 ms at p50.")
    return lines + [""]


def write_page(data: dict) -> None:
    """secondary.md from secondary.json; a `## Notes` section already on the page is kept."""
    old = PAGE.read_text() if PAGE.exists() else ""
    notes = old[old.index("\n## Notes"):] if "\n## Notes" in old else ""
    lines = ["# Secondary models on tracked objects (issue 18)", "",
             "`tools/bench_secondary.py`: pipelines/highway_yolox.yaml (YOLOX-Nano ONNX at 416x256, keyframes every 5th "
             "frame, adaptive up to 15, the `mv` tracker) on ../shared/data/video/highway_720p30.mp4 (1280x720 H.264, "
             "30 fps, 897 frames) with one `classify` entry running YOLOv8n-cls (tools/make_classifier.py: Ultralytics' "
             "`yolov8n-cls.yaml`, random weights, exported to ONNX, 224x224, 1000 classes) on every class the detector "
             "keeps. The weights are random: the compute of the real model, labels that mean nothing.", "",
             *_targets(data)]
    for part, section in (("calls", _calls_section), ("cache-loop", _loop_section), ("cache-camera", _camera_section),
                          ("capacity", _capacity_section)):
        if data.get(part):
            lines += section(data[part]) + [""]
    text = "\n".join(lines).rstrip() + "\n" + notes
    PAGE.write_text(text)


# -- main -----------------------------------------------------------------------------------------

def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "_trial":
        return trial_main(sys.argv[2], sys.argv[3])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="part", required=True)
    parts = {}
    for name, text in (("calls", "looks per track and the cost of a file run"), ("cache-loop", "a looping clip"),
                       ("cache-camera", "two pipelines on one RTSP camera, Redis"),
                       ("capacity", "streamlens bench, with and without"),
                       ("page", "rewrite the page from the JSON")):
        parts[name] = sub.add_parser(name, help=text)
        if name != "page":
            parts[name].add_argument("--model", help=f"the classifier (default {DEFAULT_MODEL})")
            parts[name].add_argument("--no-write", action="store_true", help="print only")
    parts["calls"].add_argument("--repeats", type=int, default=3)
    parts["cache-loop"].add_argument("--laps", type=int, default=3)
    parts["cache-camera"].add_argument("--seconds", type=float, default=30.0)
    parts["cache-camera"].add_argument("--file-pair", choices=("auto", "always", "never"), default="auto",
                                       help="also the same file read twice in file mode (auto: when the live share < 0.3)")
    parts["capacity"].add_argument("--streams", default="4,5,6,7")
    parts["capacity"].add_argument("--seconds", type=float, default=20.0)
    parts["capacity"].add_argument("--repeats", type=int, default=1)
    parts["capacity"].add_argument("--dry-run", action="store_true", help="write the copy, check it loads, print the commands")
    args = p.parse_args()
    if args.part == "page":
        write_page(json.loads(JSON_OUT.read_text()))
        return 0
    run = {"calls": part_calls, "cache-loop": part_cache_loop, "cache-camera": part_cache_camera,
           "capacity": part_capacity}[args.part]
    data = run(args)
    if data:
        save(args.part, data, not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
