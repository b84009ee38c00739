"""MOTChallenge scores per sequence, the `trackers` package's ByteTrack beside streamlens' tracker, and
leave-one-kind-out choice of tracker design and constants.

The eight shared sequences of ../shared/data/mot (MOT17-02, -04, -05, -09; KITTI-17, ETH-Sunnyday,
TUD-Campus and TUD-Stadtmitte from 2D MOT 2015) are replayed with their public detections given on
every N-th frame, as `streamlens eval mot` does, and scored with the TrackEval-compatible metrics
(`streamlens.eval.metrics`). Kinds of camera (`KINDS`): still (MOT17-02, -04, -09, TUD-*), walking
(MOT17-05, ETH-Sunnyday), on a car (KITTI-17).

- `streamlens`: `KeyframeTracker("kalman")` (no images: the Kalman prediction carries the frames between
  keyframes);
- `bytetrack`: `trackers` 2.6.1 `ByteTrackTracker` with its defaults, given the keyframes only and told
  the keyframe rate (its lost-track buffer counts updates); on the frames between it shows its last
  keyframe's boxes (held). This reproduces the reference figures of ../shared/data/README.md.

`--set NAME=VALUE` changes a constant for the streamlens runs: a `KeyframeTracker` keyword, else a
module constant of `streamlens.track.tracker`, `.kalman`, `.association` or `.reassoc` (upper case; 0/1 for a
switch), e.g. `--set coast_s=0.5 --set WEAK_KEEP_LOST=0`. `--loko NAME=V1,V2,...` (repeatable) runs
every combination of the values; for each kind of camera it picks the combination with the best fit
on the two other kinds (the mean over those kinds of their sequences' mean HOTA at every interval
run) and reports every held-out sequence's HOTA with it, beside ByteTrack's.

    python tools/bench_mot.py                                # both trackers, intervals 1 and 5
    python tools/bench_mot.py --loko lost_s=1,2,3 --loko WEAK_KEEP_LOST=0,1
    python tools/bench_mot.py --bounds --intervals 5         # what the frames between keyframes can add

`--bounds` asks how much of the HOTA at an interval is lost between keyframes: per sequence,
streamlens as it runs (causal: the Kalman prediction between keyframes), the same keyframes'
objects held between them (what the prediction adds over holding), and those objects moved
linearly from each keyframe to the next where the next keyframe has the same track (a non-causal
reference: a live tracker cannot read the next keyframe before the frames between are published;
the keyframes' own tracks are kept as they are, so it says what motion between them can add, not
what a different association could); beside them streamlens and ByteTrack at interval 1 and the
issue's goal at that interval (ByteTrack held + 5).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from pathlib import Path

import numpy as np
import supervision as sv

from streamlens.bench import harness
from streamlens.bench.harness import command_line, machine_line, need
from streamlens.eval.metrics import combine, read_mot_file, score_sequence
from streamlens.eval.mot import load_sequence, replay, write_results
from streamlens.frame import empty_detections

DATA = harness.DATA / "mot"
#: every shared sequence by the kind of camera that filmed it (../shared/data/README.md)
KINDS = {"still": ("MOT17-02", "MOT17-04", "MOT17-09", "TUD-Campus", "TUD-Stadtmitte"),
         "walking": ("MOT17-05", "ETH-Sunnyday"), "car": ("KITTI-17",)}
SEQUENCES = ("MOT17-02", "MOT17-04", "MOT17-05", "MOT17-09", "KITTI-17", "ETH-Sunnyday", "TUD-Campus",
             "TUD-Stadtmitte")
KIND_OF = {name: kind for kind, names in KINDS.items() for name in names}
#: the 2D MOT 2015 TUD sequences come as flat files (gt.txt, det_frcnn.txt) without seqinfo.ini: their
#: frame rate, length and size as MOTChallenge's seqinfo.ini states them
FLAT = {"TUD-Campus": (25, 71, 640, 480), "TUD-Stadtmitte": (25, 179, 640, 480)}


def sequence_folder(name: str, scratch: Path | None = None) -> Path:
    """The MOTChallenge folder of shared sequence `name`; a flat TUD sequence is laid out as one
    (seqinfo.ini, det/det.txt, gt/gt.txt) under `scratch` first, so `streamlens eval mot` reads it."""
    if name not in FLAT:
        return DATA / name
    fps, length, width, height = FLAT[name]
    folder = (scratch or Path(tempfile.gettempdir()) / "streamlens_mot_data") / name
    for sub, source in (("det", "det_frcnn.txt"), ("gt", "gt.txt")):
        (folder / sub).mkdir(parents=True, exist_ok=True)
        target = folder / sub / f"{sub}.txt"
        if not target.exists():
            target.write_bytes((DATA / name / source).read_bytes())
    (folder / "seqinfo.ini").write_text(f"[Sequence]\nname={name}\nframeRate={fps}\nseqLength={length}\n"
                                        f"imWidth={width}\nimHeight={height}\n")
    return folder


_COMMITTED: dict[str, dict[str, float]] = {}


def _apply(settings: dict[str, float]) -> dict[str, float]:
    """Set module constants named in `settings`; the rest are `KeyframeTracker` keywords (returned)."""
    import inspect

    from streamlens.track import association, kalman, reassoc, tracker
    modules = [tracker, kalman, association, reassoc]
    keywords = inspect.signature(tracker.KeyframeTracker.__init__).parameters
    options = {}
    for module in modules:  # a run in the same process starts from the committed values
        committed = _COMMITTED.setdefault(module.__name__, {k: v for k, v in vars(module).items()
                                                             if k.isupper() and isinstance(v, (int, float))})
        for name, value in committed.items():
            setattr(module, name, value)
    for name, value in settings.items():
        if name in keywords:
            options[name] = value
            continue
        owners = [m for m in modules if hasattr(m, name)]
        if not owners:
            raise SystemExit(f"--set {name}: neither a KeyframeTracker keyword nor a tracker constant")
        for module in owners:
            setattr(module, name, type(getattr(module, name))(value))
    # the filter's noise constants are its keyword defaults
    kalman.BoxKalmanFilter.__init__.__defaults__ = (kalman.POSITION_NOISE, kalman.VELOCITY_NOISE,
                                                    kalman.MEASUREMENT_NOISE)
    return options


def run_one(job: tuple[str, str, int, dict[str, float], str]) -> dict:
    """One tracker on one sequence at one interval: its scores as a dict."""
    kind, name, interval, settings, out = job
    sequence = load_sequence(sequence_folder(name))
    if kind == "bytetrack":
        results = _bytetrack(sequence, interval)
    else:
        from streamlens.track.tracker import KeyframeTracker
        options = _apply(settings)
        results = replay(sequence, KeyframeTracker("kalman", sequence.fps, **options), interval)
    path = write_results(results, Path(out) / kind / f"interval{interval}" / f"{name}.txt")
    scores = score_sequence(name, read_mot_file(sequence.gt_path), read_mot_file(path), sequence.length)
    return {"kind": kind, "sequence": name, "interval": interval, "settings": settings,
            "clear": scores.clear, "hota": scores.hota_detail, "identity": scores.identity}


def _bytetrack(sequence, interval: int) -> dict[int, sv.Detections]:
    """`trackers`' ByteTrack, defaults, on the keyframes; its last keyframe's boxes held in between."""
    from trackers import ByteTrackTracker

    tracker = ByteTrackTracker(frame_rate=sequence.fps / interval)  # its buffer counts updates: keyframes
    results, held = {}, empty_detections()
    for number in range(1, sequence.length + 1):
        if (number - 1) % interval == 0:
            out = tracker.update(sequence.detections.get(number, empty_detections()))
            held = out[out.tracker_id >= 0] if len(out) else out
            if held.tracker_id is None:
                held.tracker_id = np.empty(0, np.int64)
        results[number] = held
    return results


def between_keyframes(results: dict[int, sv.Detections], interval: int) -> tuple[dict, dict]:
    """A tracker's objects per frame as two others: each keyframe's objects held until the next
    (`held`), and moved linearly towards the next keyframe's box of the same track (`moved`, the
    non-causal reference of `--bounds`; a track the next keyframe does not have is held)."""
    held, moved = {}, {}
    keys = [n for n in sorted(results) if (n - 1) % interval == 0]
    for first, after in zip(keys, keys[1:] + [None]):
        start = results[first]
        end = results[after] if after is not None else None
        ids = start.tracker_id if start.tracker_id is not None else np.empty(0, np.int64)
        for number in range(first, first + interval):
            if number not in results:
                break
            held[number] = start
            if end is None or number == first or not len(start):
                moved[number] = start
                continue
            t = (number - first) / (after - first)
            where = {int(i): k for k, i in enumerate(end.tracker_id)}
            boxes = start.xyxy.copy()
            for k, track in enumerate(ids):
                if int(track) in where:
                    boxes[k] = start.xyxy[k] * (1 - t) + end.xyxy[where[int(track)]] * t
            moved[number] = sv.Detections(xyxy=boxes, tracker_id=ids, class_id=start.class_id)
    return held, moved


def bounds(name: str, intervals: list[int], out: str) -> list[dict]:
    """The `--bounds` rows of one sequence, one per interval (HOTA of each way; see the module docs)."""
    from streamlens.track.tracker import KeyframeTracker

    sequence = load_sequence(sequence_folder(name))
    gt = read_mot_file(sequence.gt_path)

    def hota(results: dict, label: str, interval: int) -> float:
        path = write_results(results, Path(out) / "bounds" / label / f"interval{interval}" / f"{name}.txt")
        return score_sequence(name, gt, read_mot_file(path), sequence.length).hota

    every_frame = {"streamlens_i1": hota(replay(sequence, KeyframeTracker("kalman", sequence.fps), 1), "streamlens", 1),
                   "bytetrack_i1": hota(_bytetrack(sequence, 1), "bytetrack", 1)}
    rows = []
    for interval in intervals:
        tracked = replay(sequence, KeyframeTracker("kalman", sequence.fps), interval)
        held, moved = between_keyframes(tracked, interval)
        rows.append({"sequence": name, "interval": interval, "streamlens": hota(tracked, "streamlens", interval),
                     "held": hota(held, "held", interval), "moved": hota(moved, "moved", interval), **every_frame,
                     "bytetrack_held": hota(_bytetrack(sequence, interval), "bytetrack", interval)})
    return rows


def _scores(row: dict):
    from streamlens.eval.metrics import SequenceScores
    return SequenceScores(row["sequence"], clear=row["clear"], hota_detail=row["hota"], identity=row["identity"])


def run_all(jobs: list, workers: int) -> list[dict]:
    if workers <= 1:
        return [run_one(job) for job in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(run_one, jobs))


def table(rows: list[dict], label: str) -> list[str]:
    """Per interval: HOTA, MOTA, IDF1, IDs per sequence and combined (MOT17 four and all six)."""
    lines = [f"| {label} | interval | " + " | ".join(SEQUENCES) + " | MOT17 combined | all combined |",
             "|---|---|" + "---|" * (len(SEQUENCES) + 2)]
    for interval in sorted({r["interval"] for r in rows}):
        chosen = {r["sequence"]: _scores(r) for r in rows if r["interval"] == interval}
        mot17 = combine([chosen[s] for s in SEQUENCES[:4] if s in chosen])
        every = combine(list(chosen.values()))
        for metric in ("hota", "mota", "idf1"):
            cells = [f"{getattr(chosen[s], metric):.1f}" if s in chosen else "" for s in SEQUENCES]
            lines.append(f"| {metric.upper()} | {interval} | " + " | ".join(cells)
                         + f" | {getattr(mot17, metric):.1f} | {getattr(every, metric):.1f} |")
        cells = [str(chosen[s].summary()["IDs"]) if s in chosen else "" for s in SEQUENCES]
        lines.append(f"| IDs | {interval} | " + " | ".join(cells)
                     + f" | {mot17.summary()['IDs']} | {every.summary()['IDs']} |")
    return lines


def grid(specs: list[str]) -> list[dict[str, str]]:
    """Every combination of the values in `specs` (`NAME=V1,V2,...` each), as {name: value}."""
    points: list[dict[str, str]] = [{}]
    for spec in specs:
        name, values = spec.split("=", 1)
        points = [{**point, name: value} for point in points for value in values.split(",")]
    return points


def _label(point: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items()) or "(as committed)"


def leave_one_kind_out(rows: list[dict], points: list[dict[str, str]], baseline: dict) -> list[str]:
    """For each kind of camera: the grid point with the best fit on the other kinds, and every held-out
    sequence's HOTA with it, beside ByteTrack's (`baseline`: (sequence, interval) -> HOTA). The fit
    of a point on some kinds: the mean over those kinds of the mean over their sequences of the HOTA
    at every interval run (each kind counts alike, whatever its number of sequences). Only points
    that score at least ByteTrack at interval 1 on every sequence of those kinds are chosen, when
    there are any (the issue's first requirement is a bound, the fit what is best within it)."""
    intervals = sorted({r["interval"] for r in rows})
    hota = {(_label(r["point"]), r["sequence"], r["interval"]): _scores(r).hota for r in rows}
    labels = [_label(p) for p in points]

    def fit(label: str, kinds) -> float:
        return float(np.mean([np.mean([hota[(label, s, i)] for s in KINDS[k] for i in intervals]) for k in kinds]))

    head = " | ".join(f"i{i} HOTA (ByteTrack{' held' if i > 1 else ''})" for i in intervals)
    lines = [f"| held out | chosen on the other kinds | sequence | {head} | best fit on this kind alone |",
             "|---|---|---|" + "---|" * (len(intervals) + 1)]
    for kind in [*KINDS, None]:  # None: nothing held out, the choice on all three kinds (the default)
        others = [k for k in KINDS if k != kind]
        allowed = [label for label in labels if 1 in intervals
                   and all(hota[(label, s, 1)] >= baseline[(s, 1)] for k in others for s in KINDS[k])]
        best = max(allowed or labels, key=lambda label: fit(label, others))
        if kind is None:
            lines.append(f"| none | {best} (on all three kinds) | | | | |")
            continue
        alone = max(labels, key=lambda label: fit(label, [kind]))
        for name in KINDS[kind]:
            cells = " | ".join(f"{hota[(best, name, i)]:.1f} ({baseline.get((name, i), float('nan')):.1f})"
                               for i in intervals)
            lines.append(f"| {kind} | {best} | {name} | {cells} | {alone} |")
    lines += ["", "Every point, HOTA per sequence (fit: as above, on all three kinds):", "",
              "| point | interval | " + " | ".join(SEQUENCES) + " | fit |", "|---|---|" + "---|" * (len(SEQUENCES) + 1)]
    for label in labels:
        for i in intervals:
            lines.append(f"| {label} | {i} | " + " | ".join(f"{hota[(label, s, i)]:.1f}" for s in SEQUENCES)
                         + f" | {fit(label, KINDS):.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--intervals", default="1,5")
    parser.add_argument("--trackers", default="bytetrack,streamlens")
    parser.add_argument("--sequences", default=",".join(SEQUENCES))
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--loko", action="append", default=[], metavar="NAME=V1,V2,...",
                        help="leave one kind out over every combination of these values (repeatable)")
    parser.add_argument("--bounds", action="store_true",
                        help="what the frames between keyframes lose and could gain, per sequence (see the docs)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write every run's scores here")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "streamlens_bench_mot")
    args = parser.parse_args(argv)
    need(DATA)
    intervals = [int(x) for x in args.intervals.split(",")]
    names = args.sequences.split(",")
    settings = dict(s.split("=", 1) for s in args.set)
    settings = {k: float(v) for k, v in settings.items()}
    print(f"command: {command_line([sys.argv[0], *(argv if argv is not None else sys.argv[1:])])}")
    print(f"machine: {machine_line()}, Python {platform.python_version()}, numpy {np.__version__}; "
          f"date {date.today()}\n")
    rows: list[dict] = []
    if args.bounds:
        lines = ["| sequence | kind | interval | streamlens | its keyframes held | moved to the next keyframe "
                 "(non-causal) | streamlens i1 | ByteTrack i1 | goal: ByteTrack held + 5 |",
                 "|---|---|---|---|---|---|---|---|---|"]
        rows_by_name = {s: bounds(s, [i for i in intervals if i > 1], str(args.out)) for s in names}
        for k, i in enumerate(i for i in intervals if i > 1):
            for row in (rows_by_name[s][k] for s in names):
                lines.append(f"| {row['sequence']} | {KIND_OF[row['sequence']]} | {i} | " + " | ".join(
                    f"{row[k]:.1f}" for k in ("streamlens", "held", "moved", "streamlens_i1", "bytetrack_i1"))
                    + f" | {row['bytetrack_held'] + 5:.1f} |")
        print("\n".join(lines))
        return 0
    if args.loko:
        points = grid(args.loko)
        jobs = [("bytetrack", s, i, {}, str(args.out)) for s in SEQUENCES for i in intervals]
        rows = run_all(jobs, args.workers)
        baseline = {(r["sequence"], r["interval"]): _scores(r).hota for r in rows}
        runs = [(p, s, i) for p in points for s in SEQUENCES for i in intervals]
        tried = run_all([("streamlens", s, i, {**settings, **{k: float(v) for k, v in p.items()}},
                          str(args.out / _label(p).replace(" ", "_"))) for p, s, i in runs], args.workers)
        for (point, _, _), row in zip(runs, tried):
            row["point"] = point
        rows += tried
        print("\n".join(leave_one_kind_out(tried, points, baseline)))
    else:
        for kind in args.trackers.split(","):
            jobs = [(kind, s, i, settings, str(args.out)) for s in names for i in intervals]
            done = run_all(jobs, args.workers)
            rows += done
            print("\n".join(table(done, kind)) + "\n", flush=True)
    if args.json:
        summary = [{"tracker": r["kind"], "sequence": r["sequence"], "interval": r["interval"],
                    "settings": r["settings"], **_scores(r).summary()} for r in rows]
        args.json.write_text(json.dumps(summary, default=float, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
