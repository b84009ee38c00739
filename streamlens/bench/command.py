"""`streamlens bench PIPELINE.yaml`: how many real-time streams this machine carries with a pipeline.

Runs K copies of a video as K live streams (paced at the video's frame rate, looping) through the
pipeline, and times every result from the moment its frame became available to an outside ZeroMQ
subscriber receiving it, and scores the boxes it received against the same detector run on every
frame of the video (F1 at IoU 0.5, class-aware, matched per frame). It finds the largest K whose p95
latency is within the budget while every stream keeps at least `--min-kept` of its frames (1.0:
none dropped) and delivers an F1 of at least `--min-f1`. In the same run it measures the
decode-only limit of the machine, a plain baseline at every K tried (the newest frame of each
stream detected in turn, its boxes held), and Ultralytics' own `model.track(stream=True)` on the
same video, and prints a table; everything measured goes to `--out` as JSON.

- `--streams`: `6` tries 6; `1,2,4` tries each; `1-16` (the default) searches: 1, 2, 4, 8, 16 while
  they pass, then halves the gap between the last pass and the first failure.
- Each trial is fresh: a pipeline process and a subscriber process, started and ended for it.
  Frames of the first `--warmup` seconds are not counted; the next `--seconds` are.
- The pipeline's sources are replaced by the K copies of `--video` (default: the pipeline's first
  source); its sinks by one zmq sink on a free local port (keeping the file's zmq `format`, `hwm`
  and `frames` settings). Its detector, keyframes, tracker and runtime settings are used as they
  are, except that `runtime.mode` is always realtime and the `/metrics` server is off.
- `--workers N` runs the pipeline over N engine processes (`runtime.workers`, streamlens/scale).
- `--stagger`: copy i of K begins i/K of the clip's length in (`start_s`; at the first keyframe
  after that, as a camera joins a stream), as independent cameras are out of step (their
  keyframes, scenes and traffic at different moments); without it every copy
  starts at the clip's first frame, the worst case: every stream's I-frame at the same instant.
- `--curve` measures overload instead of capacity: every K of `--streams` is tried whatever the
  results, and a trial passes when its p95 is within the budget and every stream kept within
  `--max-spread` (default 0.10) of the others' share of frames; kept (all streams, the worst, the
  spread) and F1 are reported beside it, not judged. Use it up to the decode-only limit. A
  stream's kept is then over the frames it had in the window (the video's rate x `--seconds`), not
  over the span of the frames it delivered, which reads 100% for a stream that delivered one.
- The budget (`--budget-ms`) defaults to the pipeline's `runtime.budget_ms` (33 ms unless set).
- Accuracy (`streamlens.bench.accuracy`): the reference is the pipeline's own detector (same model,
  resize mode, conf, classes) on every frame of one pass of the video, made once per video and
  detector and cached in `--reference-cache` (`streamlens.bench.reference`); `--reference-detector
  FILE` takes another pipeline file's detector instead (a BF16 or INT8 arm scored against FP32,
  not against itself). Each stream's received
  frames in the window are scored: F1 (a stream's worst F1 is what `--min-f1` judges), how many
  frames a new object waits for its first box, and the detection delay, from a keyframe becoming
  available to the first result carrying its detections. The JSON's `timeline` gives F1, the
  frames detected and the p95 over every stream by `--timeline-s` seconds (default 5) from the
  window's start, and the budget controller's highest rung (`rung`), the mean share shed (`shed`)
  and whether keyframes only were decoded, from the streams' `stats` messages (a window where no
  frame was delivered still shows them; the state the run ended on counts in its last window): with
  `--warmup 0` and 1 s, what a start costs second by second and what the controller did about it.
  Its `accuracy_by_age` gives F1 by the age of the detections each received frame carries (frames
  since the keyframe they are of; `none` before a stream's first), each age's share of the frames,
  the mean age and the mean gap between keyframes whose detections arrived: where a load's F1 goes.
- The plain baseline (`streamlens.bench.hold`, `--no-hold` skips it): K paced copies decoded on
  threads, one loop detecting the newest frame of each stream in turn and publishing every frame
  at once with its stream's last boxes; measured, scored and judged as a trial is.
- The decode-only limit: one process per CPU core, each decoding the video on one thread (with
  the motion vectors when the tracker uses them) as fast as it can; their frames per second over
  the video's frame rate is how many streams decoding alone could carry.
- The baseline needs a model Ultralytics loads: `--baseline-model`, or the pipeline's own when its
  detector backend is `ultralytics`; otherwise it is skipped, saying why.

Exit codes: 0 done (whatever the results), 1 the reference, a trial or a baseline failed to run
(a reference that cannot be made stops the bench before any trial), 2 bad pipeline file or
arguments, 130 interrupted.

Example:
    $ streamlens bench pipelines/highway_yolox.yaml --streams 1-12 --baseline-model yolov8n.pt
    $ streamlens bench pipelines/quickstart.yaml --streams 1,2 --seconds 5 --no-baseline --out bench.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from datetime import datetime, timezone
from pathlib import Path

from ..errors import ConfigError, StreamlensError
from .search import StreamSearch, curve_plan, streams_argument

#: the kept fraction reported beside the strict answer: the target of a real-time deployment
KEPT_TARGET = 0.97


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}")
    return value


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    """Add the `bench` subcommand to the `streamlens` parser's subparsers."""
    p = sub.add_parser("bench", parents=[common], help="find how many live streams a pipeline carries",
                       description=__doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pipeline", help="pipeline YAML file")
    p.add_argument("--video", metavar="PATH", help="the video played by every stream (default: the pipeline's first source)")
    p.add_argument("--streams", type=streams_argument, default=streams_argument("1-16"), metavar="SPEC",
                   help="streams to try: 6, a list 1,2,4, or a range 1-16 to search (default 1-16)")
    p.add_argument("--seconds", type=_positive(float), default=30.0, metavar="S", help="seconds measured per trial (default 30)")
    p.add_argument("--warmup", type=float, default=5.0, metavar="S", help="seconds not counted at the start of a trial (default 5)")
    p.add_argument("--budget-ms", type=_positive(float), metavar="MS",
                   help="p95 latency a trial may have (default: the pipeline's runtime.budget_ms, 33 unless set)")
    p.add_argument("--min-kept", type=_fraction, default=1.0, metavar="F",
                   help="fraction of frames every stream must keep to pass (default 1.0: none dropped)")
    p.add_argument("--min-f1", type=_fraction, default=0.85, metavar="F",
                   help="F1 against detecting every frame that every stream must reach to pass (default 0.85)")
    p.add_argument("--stagger", action="store_true",
                   help="copy i of K begins i/K of the clip's length in, at the keyframe after it (independent "
                        "cameras: keyframes and scenes out of step); default: every copy from the start, all in step")
    p.add_argument("--timeline-s", type=_positive(float), default=None, metavar="S",
                   help="the timeline's step in the JSON: F1, frames detected and p95 every S seconds "
                        "(default 5; 1 shows a start's first seconds)")
    p.add_argument("--reference-detector", metavar="FILE",
                   help="score against this pipeline file's detector on every frame instead of the pipeline's own "
                        "(e.g. FP32 onnxruntime for a BF16 OpenVINO arm)")
    p.add_argument("--reference-cache", metavar="DIR",
                   help="where detect-every-frame references are cached (default ~/.cache/streamlens/bench)")
    p.add_argument("--workers", type=_positive(int), metavar="N",
                   help="engine processes the streams are split over (runtime.workers; default: the file's)")
    p.add_argument("--no-hold", action="store_true", help="skip the plain detect-newest-and-hold baseline")
    p.add_argument("--curve", action="store_true",
                   help="the overload curve: try every K given, pass on p95 <= budget and kept spread <= --max-spread")
    p.add_argument("--max-spread", type=_fraction, default=0.10, metavar="F",
                   help="with --curve: the most a stream's kept share may lie below another's (default 0.10)")
    p.add_argument("--out", default="bench.json", metavar="FILE", help="where to write the JSON results (default bench.json)")
    p.add_argument("--baseline-model", metavar="PATH",
                   help="model for the Ultralytics baseline (default: the pipeline's, if its backend is ultralytics)")
    p.add_argument("--baseline-imgsz", type=_positive(int), default=416, metavar="N", help="baseline inference size (default 416)")
    p.add_argument("--baseline-frames", type=_positive(int), default=300, metavar="N",
                   help="frames the baseline tracks; the first 10 are not timed (default 300)")
    p.add_argument("--no-baseline", action="store_true", help="skip the Ultralytics baseline")
    p.add_argument("--decode-seconds", type=float, default=10.0, metavar="S",
                   help="seconds of the decode-only measurement; 0 skips it (default 10)")


# -- inputs --------------------------------------------------------------------------------------


def _inputs(args) -> tuple[object, str, float, dict, str | None, str, dict]:
    """Validate everything before anything runs: (config, video, budget, sink options, baseline
    model or None, why the baseline is skipped). Raises `ConfigError` (exit 2)."""
    from ..config import load_pipeline

    config = load_pipeline(args.pipeline)
    if args.video:
        video = Path(args.video).expanduser().resolve()
        if not video.is_file():
            raise ConfigError([f"--video: file not found: {args.video}"])
        video = str(video)
    else:
        first = config.sources[0]
        if not first.is_file:
            raise ConfigError([f"{args.pipeline}: sources[0].uri: {first.display_uri} is a camera; "
                               "the bench replays a video file: pass --video PATH"])
        video = first.uri
    # the trial's own sources and sink must be valid too (e.g. a per-source key the copies lack)
    from .trial import SOURCE_KEYS, trial_overrides

    sink = next((s.options for s in config.sinks if s.type == "zmq"), {})
    sink_options = {k: sink[k] for k in ("format", "hwm", "frames", "jpeg_quality", "annotate") if k in sink}
    first = config.sources[0]  # how the copies decode: as the file's first source does
    source_keys = {k: getattr(first, k) for k in SOURCE_KEYS if k in first.model_fields_set}
    load_pipeline(args.pipeline, overrides=trial_overrides(video, 1, "tcp://127.0.0.1:1", sink_options,
                                                           source_keys=source_keys))
    budget = args.budget_ms or config.runtime.budget_ms
    model, skipped = None, ""
    if args.no_baseline:
        skipped = "--no-baseline"
    elif args.baseline_model:
        model = Path(args.baseline_model).expanduser()
        if not model.is_file():
            raise ConfigError([f"--baseline-model: file not found: {args.baseline_model}"])
        model = str(model.resolve())
    elif config.detector.backend == "ultralytics" and config.detector.model is not None:
        model = str(config.detector.model)
    else:
        skipped = (f"the pipeline's detector is {config.detector.backend}, which Ultralytics cannot load; "
                   "pass --baseline-model (e.g. a YOLO .pt of the same size)")
    return config, video, float(budget), sink_options, model, skipped, source_keys


# -- output --------------------------------------------------------------------------------------


def _ms(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _count(value) -> str:
    return "-" if value is None else str(value)


def _f1(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_table(trials: list[dict]) -> str:
    """The trials as a fixed-width table, one row each, in the order they ran: kept frames (all
    streams, the worst stream, and the spread between streams in points), latency percentiles, F1 against detecting every frame (all
    streams, and the worst), p95 detection delay, p95 frames a new object waits for its box, the
    fraction of measured frames published with their detections (`keyframe: true`), the fraction
    whose detections reached the subscriber at all (in time or late: the detector's rate), and over
    the whole run, keyframes published before their detections came (late) and frames dropped in the
    pipeline."""
    head = ("K", "kept", "kept min", "spread", "p50 ms", "p95 ms", "p99 ms", "F1", "F1 min", "delay p95",
            "new wait", "keyframes", "detected", "late kf", "dropped", "result")
    rows = [head]
    for t in trials:
        lat = t.get("latency_ms") or {}
        acc = t.get("accuracy") or {}
        delay = (t.get("detection_delay_ms") or {}).get("p95")
        wait = (acc.get("new_object_wait_frames") or {}).get("p95")
        result = "error" if t["status"] != "ok" else ("pass" if t["passed"] else "fail")
        spread = t.get("kept_spread")
        rows.append((str(t["k"]), _pct(t.get("kept")), _pct(t.get("kept_min")),
                     "-" if spread is None else f"{100 * spread:.1f}", _ms(lat.get("p50")),
                     _ms(lat.get("p95")), _ms(lat.get("p99")), _f1(acc.get("f1")), _f1(acc.get("f1_min")),
                     _ms(delay), "-" if wait is None else f"{wait:g}", _pct(t.get("keyframe_rate")),
                     _pct(t.get("detected_rate")), _count(t.get("late_keyframes")), _count(t.get("dropped")), result))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows)


def answers(trials: list[dict], budget_ms: float, limit: dict | None, baseline: dict | None,
            min_f1: float = 0.0, hold: list[dict] | None = None) -> dict:
    """The largest K that passed, the largest with kept >= 97% and F1 >= `min_f1` within the budget
    (and the same for the hold baseline's trials), and the ratios."""
    ok = [t for t in trials if t["status"] == "ok"]
    best = max((t["k"] for t in ok if t["passed"]), default=None)

    def near(runs: list[dict]) -> int | None:
        return max((t["k"] for t in runs if t["status"] == "ok" and t["kept_min"] >= KEPT_TARGET
                    and t["latency_ms"]["p95"] is not None and t["latency_ms"]["p95"] <= budget_ms
                    and ((t.get("accuracy") or {}).get("f1_min") or 0.0) >= min_f1), default=None)

    out = {"max_streams": best, f"max_streams_kept_{round(KEPT_TARGET * 100)}": near(ok),
           "fraction_of_decode_limit": None, "ratio_to_baseline": None}
    if hold is not None:
        out["hold_max_streams"] = max((t["k"] for t in hold if t["status"] == "ok" and t["passed"]), default=None)
        out[f"hold_max_streams_kept_{round(KEPT_TARGET * 100)}"] = near(hold)
    if best is not None and limit and limit.get("streams"):
        out["fraction_of_decode_limit"] = round(best / limit["streams"], 3)
    if best is not None and baseline and baseline.get("streams"):
        out["ratio_to_baseline"] = round(best / baseline["streams"], 2)
    return out


def _write(path: str, document: dict) -> None:
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as e:
        raise StreamlensError(f"--out: cannot write {path}: {e.strerror or e}") from None


# -- the command ---------------------------------------------------------------------------------


def _summary(trial: dict) -> str:
    lat, acc = trial["latency_ms"], trial.get("accuracy") or {}
    return (f"kept {_pct(trial['kept'])} (min {_pct(trial['kept_min'])}, spread "
            f"{100 * trial.get('kept_spread', 0.0):.1f} points), p95 {_ms(lat['p95'])} ms, "
            f"F1 {_f1(acc.get('f1'))} (min {_f1(acc.get('f1_min'))}): {'pass' if trial['passed'] else 'fail'}")


def _interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt


def run(args) -> int:
    """Run the bench; 0 when every part ran (whatever it found), 1 when a trial or the baseline
    could not run. Bad input raises `ConfigError` (exit 2) before anything starts. SIGTERM is
    taken as Ctrl-C: the trial's processes are ended and the CLI exits with 130."""
    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run(args)
    finally:
        signal.signal(signal.SIGTERM, old)


def _run(args) -> int:
    from .baseline import BaselineFailed, run_baseline
    from .probe import decode_limit, machine, versions, video_info
    from .reference import default_cache_dir, reference_for
    from .trial import TrialFailed, run_hold_trial, run_trial

    config, video, budget, sink_options, model, skipped, source_keys = _inputs(args)
    try:
        info = video_info(video)
    except Exception as e:  # noqa: BLE001 - an unreadable video is one line
        raise ConfigError([f"{video}: not a video FFmpeg can read ({e})"]) from None
    stagger = 0.0  # checked before anything runs
    if args.stagger:
        if not (info.get("frames") and info.get("fps")):
            raise ConfigError([f"{video}: --stagger needs a clip that states its frames and rate"])
        stagger = info["frames"] / info["fps"]
    out = sys.stdout
    mvs = config.tracker.motion == "mv"
    print(f"streamlens bench: {args.pipeline} on {video} ({info['width']}x{info['height']} {info['codec']}, "
          f"{info['fps']:g} fps), budget p95 <= {budget:g} ms, kept >= {args.min_kept:g}, F1 >= {args.min_f1:g}",
          file=out, flush=True)
    document = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["streamlens", *sys.argv[1:]]),
        "machine": machine(), "versions": versions(), "pipeline": str(Path(args.pipeline).resolve()),
        "video": info, "budget_ms": budget, "min_kept": args.min_kept, "min_f1": args.min_f1, "warmup_s": args.warmup,
        "seconds": args.seconds, "curve": args.curve, "max_spread": args.max_spread if args.curve else None,
        "detector": config.detector.backend,
        "model": str(config.detector.model) if config.detector.model else None,
        "keyframes": {"interval": config.keyframes.interval, "adaptive": config.keyframes.adaptive,
                      "max_interval": config.keyframes.max_interval},
        "tracker": config.tracker.motion, "trials": [], "hold": None, "reference": None, "answers": None,
        "decode_limit": None,
        "baseline": {"skipped": skipped} if skipped else None,
    }
    failed = False

    limit = None
    if args.decode_seconds > 0:
        print(f"decode-only limit: {args.decode_seconds:g} s ...", file=out, flush=True)
        try:
            limit = decode_limit(video, args.decode_seconds, export_mvs=mvs)
            document["decode_limit"] = limit
        except StreamlensError as e:  # the trials still run; the failure is reported and the exit is 1
            print(f"streamlens bench: error: {e}", file=sys.stderr, flush=True)
            document["decode_limit"] = {"error": str(e)}
            failed = True

    cache = Path(args.reference_cache).expanduser() if args.reference_cache else default_cache_dir()
    yardstick = config.detector
    if args.reference_detector:
        from ..config import load_pipeline
        yardstick = load_pipeline(args.reference_detector).detector
        document["reference_detector"] = str(Path(args.reference_detector).resolve())
    print(f"reference: {yardstick.backend} on every frame of the video (cached in {cache}) ...",
          file=out, flush=True)
    try:
        reference = reference_for(yardstick, video, cache)
    except Exception as e:  # noqa: BLE001 - the detector cannot run: no trial could be scored
        if args.debug:
            raise
        why = str(e) if isinstance(e, StreamlensError) else f"{type(e).__name__}: {e}"
        print(f"streamlens bench: error: reference: {why}", file=sys.stderr, flush=True)
        document["reference"] = {"error": why}
        _write(args.out, document)
        print(f"wrote {args.out}", file=out, flush=True)
        return 1
    else:
        document["reference"] = {"frames": len(reference), "boxes": int(len(reference.xyxy)),
                                 "cache": str(reference.path), "computed": reference.computed,
                                 "matching": "per frame, Hungarian, IoU >= 0.5, same class id"}
        print(f"  {len(reference)} frames, {len(reference.xyxy)} boxes "
              f"({'detected now' if reference.computed else 'from the cache'})", file=out, flush=True)

    trials: list[dict] = []
    hold: list[dict] | None = None if args.no_hold else []
    document["stagger_s"] = stagger
    search = StreamSearch(curve_plan(args.streams) if args.curve else args.streams)
    while (k := search.next()) is not None:
        print(f"trial: {k} stream(s), {args.warmup:g} s warm-up + {args.seconds:g} s ...", file=out, flush=True)
        try:
            trial = run_trial(args.pipeline, video, k, warmup=args.warmup, seconds=args.seconds, budget_ms=budget,
                              min_kept=args.min_kept, min_f1=args.min_f1, reference=reference,
                              sink_options=sink_options, workers=args.workers, debug=args.debug,
                              curve=args.curve, max_spread=args.max_spread, source_keys=source_keys,
                              fps=info["fps"] if args.curve else None, stagger_s=stagger,
                              timeline_s=args.timeline_s)
        except TrialFailed as e:
            print(f"streamlens bench: error: {e}", file=sys.stderr, flush=True)
            trial = {"k": k, "status": "error", "error": str(e), "passed": False}
            trials.append(trial)
            failed = True
            search.stop()
            break
        trials.append(trial)
        search.record(k, trial["passed"])
        print("  " + _summary(trial), file=out, flush=True)
        if hold is not None:
            print(f"hold baseline: {k} stream(s), {args.warmup:g} s warm-up + {args.seconds:g} s ...", file=out,
                  flush=True)
            try:
                held = run_hold_trial(args.pipeline, video, k, warmup=args.warmup, seconds=args.seconds,
                                      budget_ms=budget, min_kept=args.min_kept, min_f1=args.min_f1,
                                      reference=reference, debug=args.debug, stagger_s=stagger,
                                      timeline_s=args.timeline_s)
            except TrialFailed as e:
                print(f"streamlens bench: error: hold baseline: {e}", file=sys.stderr, flush=True)
                held = {"k": k, "status": "error", "error": str(e), "passed": False}
                failed = True
            else:
                print("  " + _summary(held), file=out, flush=True)
            hold.append(held)
    document["trials"] = trials
    document["hold"] = hold

    baseline = None
    if model is not None:
        print(f"baseline: Ultralytics track on {args.baseline_frames} frames of the video ...", file=out, flush=True)
        try:
            baseline = run_baseline(model, video, args.baseline_imgsz, args.baseline_frames, info["fps"] or 30.0,
                                    debug=args.debug)
            document["baseline"] = baseline
        except BaselineFailed as e:
            print(f"streamlens bench: error: baseline: {e}", file=sys.stderr, flush=True)
            document["baseline"] = {"error": str(e), "model": model}
            failed = True

    document["answers"] = result = answers(trials, budget, limit, baseline, args.min_f1, hold)
    print("", file=out)
    print(format_table(trials), file=out)
    if hold:
        print("\nhold baseline (newest frame of each stream detected in turn, boxes held):", file=out)
        print(format_table(hold), file=out)
    print("", file=out)
    best, near = result["max_streams"], result[f"max_streams_kept_{round(KEPT_TARGET * 100)}"]
    if args.curve:
        failed_k = [t["k"] for t in trials if t["status"] == "ok" and not t["passed"]]
        print(f"overload curve (p95 <= {budget:g} ms, kept spread <= {100 * args.max_spread:g} points): "
              + ("every K passes" if not failed_k else f"fails at K = {', '.join(map(str, failed_k))}"), file=out)
    else:
        print(f"largest K passing (kept >= {args.min_kept:g}, p95 <= {budget:g} ms, F1 >= {args.min_f1:g}): "
              f"{best if best else 'none'}", file=out)
    print(f"largest K with kept >= {KEPT_TARGET:g}, p95 <= {budget:g} ms and F1 >= {args.min_f1:g}: "
          f"{near if near else 'none'}", file=out)
    if hold:
        held_best = result["hold_max_streams"]
        print(f"hold baseline, largest K passing: {held_best if held_best else 'none'}", file=out)
    if limit:
        print(f"decode-only limit: {limit['fps']:g} frames/s on {limit['workers']} core(s) = "
              f"{limit['streams']:g} real-time streams", file=out)
    if baseline:
        print(f"baseline (Ultralytics track, every frame, {baseline.get('device') or 'cpu'}): {baseline['fps']:g} frames/s "
              f"= {baseline['streams']:g} real-time streams", file=out)
    elif skipped:
        print(f"baseline: skipped: {skipped}", file=out)
    if result["ratio_to_baseline"] is not None:
        print(f"ratio to the baseline: {result['ratio_to_baseline']:g}x", file=out)
    if result["fraction_of_decode_limit"] is not None:
        print(f"fraction of the decode-only limit: {result['fraction_of_decode_limit']:.0%}", file=out)
    _write(args.out, document)
    print(f"wrote {args.out}", file=out, flush=True)
    return 1 if failed else 0


__all__ = ["add_parser", "run", "format_table", "answers"]
