"""MOTChallenge scores per sequence, the `trackers` package's ByteTrack beside streamlens' tracker, and
leave-one-out choice of tracker constants.

The six shared sequences of ../shared/data/mot (MOT17-02, -04, -05, -09; KITTI-17 and ETH-Sunnyday from
2D MOT 2015, moving cameras) are replayed with their public detections given on every N-th frame, as
`streamlens eval mot` does, and scored with the TrackEval-compatible metrics (`streamlens.eval.metrics`).

- `streamlens`: `KeyframeTracker("kalman")` (no images: the Kalman prediction carries the frames between
  keyframes);
- `bytetrack`: `trackers` 2.6.1 `ByteTrackTracker` with its defaults, given the keyframes only and told
  the keyframe rate (its lost-track buffer counts updates); on the frames between it shows its last
  keyframe's boxes (held). This reproduces the reference figures of ../shared/data/README.md.

`--set NAME=VALUE` changes a constant for the streamlens runs: a `KeyframeTracker` keyword, else a
module constant of `streamlens.track.tracker` or `.kalman` (upper case), e.g.
`--set coast_s=0.5 --set VELOCITY_NOISE=0.5`. `--loo NAME=V1,V2,...` runs every value, then for each
sequence picks the value with the best combined HOTA on the five others (at every interval given,
summed) and reports the held-out sequence's score with it.

    python tools/bench_mot.py                                # both trackers, intervals 1 and 5
    python tools/bench_mot.py --trackers streamlens --loo coast_s=0.3,0.4,0.5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from pathlib import Path

import numpy as np
import supervision as sv

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streamlens.eval.metrics import combine, read_mot_file, score_sequence  # noqa: E402
from streamlens.eval.mot import load_sequence, replay, write_results  # noqa: E402
from streamlens.frame import empty_detections  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "mot"
SEQUENCES = ("MOT17-02", "MOT17-04", "MOT17-05", "MOT17-09", "KITTI-17", "ETH-Sunnyday")


def _apply(settings: dict[str, float]) -> dict[str, float]:
    """Set module constants named in `settings`; the rest are `KeyframeTracker` keywords (returned)."""
    import inspect

    from streamlens.track import kalman, tracker
    modules = [tracker, kalman]
    keywords = inspect.signature(tracker.KeyframeTracker.__init__).parameters
    options = {}
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
    sequence = load_sequence(DATA / name)
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


def leave_one_out(rows: list[dict], name: str, values: list[str]) -> list[str]:
    """For each sequence, the value with the best combined HOTA (summed over intervals) on the others,
    and the held-out sequence's HOTA with it."""
    intervals = sorted({r["interval"] for r in rows})
    by = {(r["settings"][name], r["sequence"], r["interval"]): _scores(r) for r in rows}
    lines = [f"| held out | {name} chosen on the others | " + " | ".join(f"HOTA i{i}" for i in intervals)
             + " | best for it alone |", "|---|---|" + "---|" * (len(intervals) + 1)]
    picks = []
    for held in SEQUENCES:
        others = [s for s in SEQUENCES if s != held]

        def fit(value, among):
            return sum(combine([by[(value, s, i)] for s in among]).hota for i in intervals)

        best = max(values, key=lambda v: fit(v, others))
        alone = max(values, key=lambda v: fit(v, [held]))
        picks.append(best)
        lines.append(f"| {held} | {best} | " + " | ".join(f"{by[(best, held, i)].hota:.1f}" for i in intervals)
                     + f" | {alone} |")
    lines.append("")
    lines.append(f"| {name} | " + " | ".join(f"HOTA i{i} {s}" for i in intervals for s in ("MOT17", "all"))
                 + " |")
    lines.append("|---|" + "---|" * (2 * len(intervals)))
    for value in values:
        cells = []
        for i in intervals:
            cells.append(f"{combine([by[(value, s, i)] for s in SEQUENCES[:4]]).hota:.1f}")
            cells.append(f"{combine([by[(value, s, i)] for s in SEQUENCES]).hota:.1f}")
        lines.append(f"| {value} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"per sequence, HOTA at each value of {name}:")
    lines.append("")
    lines.append("| value | interval | " + " | ".join(SEQUENCES) + " |")
    lines.append("|---|---|" + "---|" * len(SEQUENCES))
    for value in values:
        for i in intervals:
            lines.append(f"| {value} | {i} | " + " | ".join(f"{by[(value, s, i)].hota:.1f}" for s in SEQUENCES) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--intervals", default="1,5")
    parser.add_argument("--trackers", default="bytetrack,streamlens")
    parser.add_argument("--sequences", default=",".join(SEQUENCES))
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--loo", default=None, metavar="NAME=V1,V2,...")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write every run's scores here")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "streamlens_bench_mot")
    args = parser.parse_args(argv)
    if not DATA.is_dir():
        print(f"{DATA} not found: the benchmark data lives outside the repository", file=sys.stderr)
        return 1
    intervals = [int(x) for x in args.intervals.split(",")]
    names = args.sequences.split(",")
    settings = dict(s.split("=", 1) for s in args.set)
    settings = {k: float(v) for k, v in settings.items()}
    print(f"command: python tools/bench_mot.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip())
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, numpy {np.__version__}; date {date.today()}\n")
    rows: list[dict] = []
    if args.loo:
        name, values = args.loo.split("=", 1)
        values = values.split(",")
        jobs = [("streamlens", s, i, {**settings, name: float(v)}, str(args.out / f"{name}={v}"))
                for v in values for s in SEQUENCES for i in intervals]
        rows = run_all(jobs, args.workers)
        for row in rows:
            row["settings"][name] = next(v for v in values if float(v) == row["settings"][name])
        print("\n".join(leave_one_out(rows, name, values)))
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
