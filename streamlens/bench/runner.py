"""The bench's pipeline process: one pipeline, run for a set time, then stopped and reported.

It loads the pipeline file with the trial's overrides (K looping live sources, one zmq sink), runs
it, and stops it (gracefully: what was decoded is still processed, published, and each stream gets
its `eos`) once `--warmup` + `--seconds` (+ a short margin) have passed since the first frame was
published. It then writes one line to stdout, `BENCH-REPORT <json>`, with the run's status, error,
and every counter of each stream (frames, dropped, keyframes, late keyframes, and whatever else
`StreamStats` holds). SIGTERM or SIGINT stops it the same way early; a second one aborts.

A pipeline that cannot be built (a missing model, a port in use) is reported the same way with
status `failed`, its error also as the last line on stderr, exit code 1.

Example:
    $ python -m streamlens.bench.runner pipelines/quickstart.yaml --overrides '{"sources": [...]}' \\
          --warmup 1 --seconds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time

from .. import logs
from ..config import load_pipeline
from ..errors import StreamlensError
from ..signals import SignalRelay

MARKER = "BENCH-REPORT "
#: run this much past warm-up + seconds, so that the last frames of the window are surely sent
MARGIN_S = 0.5


def stream_counters(stats) -> dict:
    """Every plain (JSON-able) public field of a `StreamStats`: name, frames, dropped, keyframes,
    late_keyframes, state, ... including fields added later."""
    out = {}
    for f in dataclasses.fields(stats):
        if f.name.startswith("_") or f.name in ("started", "ended"):  # monotonic clock readings
            continue
        value = getattr(stats, f.name, None)
        if value is None or isinstance(value, (bool, int, float, str)):
            out[f.name] = value
    out["mean_fps"] = round(getattr(stats, "mean_fps", 0.0), 3)
    return out


def run(path: str, overrides: dict, warmup: float, seconds: float, startup_s: float) -> dict:
    """Run the pipeline; the report as a dict (status done/interrupted/failed, error, streams)."""
    from ..scale.supervisor import runner_for

    config = load_pipeline(path, overrides=overrides)
    pipeline = runner_for(config)
    relay = SignalRelay(lambda presses: pipeline.stop() if presses == 1 else pipeline.abort())
    begun = time.monotonic()
    first: list[float] = []

    def on_tick(p) -> None:
        if p.stopping:
            return
        now = time.monotonic()
        if not first:
            started = [st.started for st in p.stats.values() if st.started is not None]
            if started:
                first.append(min(started))
            elif now - begun > startup_s:  # no frame at all: stop rather than wait for ever
                p.stop()
                return
        if first and now - first[0] >= warmup + seconds + MARGIN_S:
            p.stop()

    try:
        report = pipeline.run(on_tick=on_tick)
    except StreamlensError as e:  # a node could not be built: nothing ran
        return {"status": "failed", "error": str(e), "wall_s": time.monotonic() - begun, "streams": []}
    finally:
        relay.close()
    status = report.status
    if status == "interrupted" and relay.presses == 0:
        status = "done"  # stopped by the bench's own clock, as planned
    return {"status": status, "error": report.error, "wall_s": round(report.wall_s, 3),
            "streams": [stream_counters(st) for st in report.streams]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streamlens.bench.runner",
                                description="Run a pipeline for a set time after its first frame (the bench's pipeline).")
    p.add_argument("pipeline", help="pipeline YAML file")
    p.add_argument("--overrides", default="{}", help="JSON: sections to replace (see load_pipeline)")
    p.add_argument("--warmup", type=float, default=0.0, help="seconds of warm-up")
    p.add_argument("--seconds", type=float, required=True, help="seconds measured after the warm-up")
    p.add_argument("--startup-s", type=float, default=120.0,
                   help="stop if no frame was published this long after the start (default 120)")
    p.add_argument("--debug", action="store_true", help="debug logs and tracebacks on stderr")
    args = p.parse_args(argv)
    logs.setup(logging.DEBUG if args.debug else logging.WARNING)  # lines with control characters escaped
    return report(lambda: run(args.pipeline, json.loads(args.overrides), args.warmup, args.seconds, args.startup_s),
                  "pipeline", args.debug)


def report(trial, what: str, debug: bool) -> int:
    """Run a trial child's `trial()` and print its result after `MARKER` for the bench to read; a
    `StreamlensError` (a ConfigError too: the bench validated the file first) is a failed result and
    one line on stderr. The exit code: 0 done, 1 failed."""
    try:
        result = trial()
    except StreamlensError as e:
        if debug:
            raise
        result = {"status": "failed", "error": str(e), "wall_s": 0.0, "streams": []}
    print(MARKER + json.dumps(result), flush=True)
    if result["status"] == "failed":
        print(f"streamlens bench: {what} failed: {result['error']}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
