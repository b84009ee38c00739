"""The `streamlens` command.

    streamlens run PIPELINE.yaml       run a pipeline; Ctrl-C stops it cleanly (twice: at once); --live
                                       plays its files as cameras, paced and looping, until Ctrl-C
    streamlens validate PIPELINE.yaml  check a pipeline file and say what is wrong
    streamlens schema                  print the pipeline file's JSON Schema (for editors)
    streamlens subscribe ENDPOINT      print a zmq sink's messages as JSON lines, report lost ones
    streamlens events ENDPOINT         the same for the analytics' events only
    streamlens keygen DIR              make CurveZMQ keys for the zmq sink and its subscribers
    streamlens eval mot SEQ_DIR... --interval N --out DIR
                                       replay MOTChallenge detections through the tracker, score them
    streamlens bench PIPELINE.yaml [--streams 1-16] [--seconds 30] [--baseline-model M] [--out F]
                                       find how many live streams the pipeline carries within its
                                       budget; the decode-only limit and an Ultralytics baseline beside
    streamlens quantize MODEL.onnx VIDEO... --out MODEL_int8.onnx
                                       an INT8 copy of an ONNX detector calibrated on your video, kept
                                       only when its boxes agree (the quantize extra)
    streamlens models list | pull NAME | pull --url U --sha256 H | export MODEL.pt --format F --imgsz N
                                       the models streamlens knows, downloads checked against their
                                       sha256 into the cache (`model: models:NAME`), Ultralytics exports

Exit codes: 0 done, 1 failed, 2 bad pipeline file or usage, 130 interrupted.
Errors are one line each; `--debug` adds tracebacks and debug logs. Log lines and error lines show
control characters they were given (a newline, an ANSI escape in a name or URI) as escapes
(streamlens/logs.py), never raw.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from importlib.metadata import PackageNotFoundError, version

from .bench import command as bench_command
from .commands import history as history_command
from .commands import keygen as keygen_command
from .commands import models as models_command
from .commands import quantize as quantize_command
from .commands import search as search_command
from .commands import subscribe as subscribe_command
from .config import PipelineConfig, load_pipeline, preflight_problems
from .eval import command as eval_command
from .errors import ConfigError, StreamlensError
from .logs import escape
from .logs import setup as setup_logs
from .signals import SignalRelay

EXIT_USAGE = 2
#: after a second Ctrl-C, how long the run may take to close its sinks before the process exits anyway
ABORT_GRACE_S = 2.0


def _version() -> str:
    try:
        return version("streamlens")
    except PackageNotFoundError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamlens", description="Real-time video analytics engine.")
    p.add_argument("--version", action="version", version=f"streamlens {_version()}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="debug logs and tracebacks")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", parents=[common], help="run a pipeline file")
    run.add_argument("pipeline", help="pipeline YAML file")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress display and no summary")
    run.add_argument("--cluster", metavar="ADDRESS",
                     help="run the engines as Ray actors on this cluster (runtime.cluster.address)")
    pace = run.add_mutually_exclusive_group()
    pace.add_argument("--bulk", action="store_true",
                      help="archives as fast as possible: every frame detected, big batches (runtime.mode: bulk)")
    pace.add_argument("--live", action="store_true",
                      help="play files as cameras: at their frame rate, from the start again at their end, until "
                           "Ctrl-C (each file source's live: true, loop: true); to watch the live page")
    val = sub.add_parser("validate", parents=[common], help="check a pipeline file")
    val.add_argument("pipeline", help="pipeline YAML file")
    sub.add_parser("schema", parents=[common], help="print the pipeline file's JSON Schema (for editors)")
    subscribe_command.add_parser(sub, common)
    subscribe_command.add_events_parser(sub, common)
    keygen_command.add_parser(sub, common)
    history_command.add_parser(sub, common)
    search_command.add_parser(sub, common)
    eval_command.add_parser(sub, common)
    bench_command.add_parser(sub, common)
    quantize_command.add_parser(sub, common)
    models_command.add_parser(sub, common)
    return p


def _cmd_validate(args) -> int:
    """The file's keys, then what a run would check before it starts: paths, ports, each input file
    opened as its source opens it, the model. Each mistake is a line `FILE: key.path: ...` on stderr
    and the exit code is 2. What may fail but need not (a camera's host that does not resolve now:
    DNS or the camera may be down while validating) is a line `FILE: key.path: warning: ...` on
    stderr, and leaves the exit code 0."""
    from .config.preflight import input_problems, preflight_warnings

    cfg = load_pipeline(args.pipeline)
    problems = preflight_problems(cfg) + input_problems(cfg)
    if not problems:
        try:  # the model loads (and an ONNX model's shape is checked) as a run would load it
            from .detect import build_detector

            build_detector(cfg.detector).close()
        except StreamlensError as e:
            problems.append(str(e))
    for line in problems + preflight_warnings(cfg):
        print(escape(line), file=sys.stderr)
    if problems:
        return EXIT_USAGE
    print(f"{escape(args.pipeline)}: ok: {len(cfg.sources)} source(s), detector {cfg.detector.backend}, "
          f"{len(cfg.sinks)} sink(s)")
    return 0


def _cmd_schema(args) -> int:
    from .config import json_schema

    print(json_schema())
    return 0


def _exit_soon(code: int, seconds: float) -> None:
    """End the process `seconds` from now whatever its threads are doing (a sink blocked in a
    write, a detector inside a long batch): the second Ctrl-C's promise."""
    def exit_now() -> None:
        print("streamlens: stopped at once: something did not end in time", file=sys.stderr)
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(seconds, exit_now)
    timer.daemon = True
    timer.start()


def _as_cameras(config: PipelineConfig) -> PipelineConfig:
    """`config` with every file source played as a camera plays (`streamlens run --live`): paced at its
    frame rate and started again at its end (`live: true`, `loop: true`); cameras as they are."""
    return config.model_copy(update={"sources": [
        src.model_copy(update={"live": True, "loop": True}) if src.is_file else src for src in config.sources]})


def _cmd_run(args) -> int:
    pipeline, display = None, None

    def on_signal(presses: int) -> None:  # on the relay's thread (streamlens/signals.py)
        if presses == 1:
            message = "stopping: finishing what was decoded (Ctrl-C again to stop at once)"
            display.note(message) if display else print(message, file=sys.stderr)
            pipeline.stop()
        else:
            pipeline.abort()
            if presses == 2:
                _exit_soon(130, ABORT_GRACE_S)

    # the handlers come first: a SIGTERM while the modules and the model load ends the run cleanly
    # too (still loading: nothing has been produced, nothing to finish)
    relay = SignalRelay(on_signal, early=lambda: pipeline is None)
    try:
        from .config import ClusterConfig
        from .progress import ProgressDisplay, summary
        from .scale.supervisor import runner_for

        overrides = {"runtime": {"mode": "bulk"}} if args.bulk else None
        config = load_pipeline(args.pipeline, overrides=overrides)
        if args.live:
            config = _as_cameras(config)
        if args.cluster:
            given = config.runtime.cluster
            cluster = ClusterConfig(address=args.cluster,
                                    **({"cpus": given.cpus, "gpus": given.gpus} if given else {}))
            config = config.model_copy(update={"runtime": config.runtime.model_copy(update={"cluster": cluster})})
        display = None if args.quiet else ProgressDisplay()
        # runtime.workers, runtime.cluster: the streams over several engines, supervised
        pipeline = runner_for(config, log_level=logging.getLogger().level)
        report = pipeline.run(on_tick=display)
    finally:
        relay.close()
    if not args.quiet:
        print(summary(report), file=sys.stderr)
    if report.error:
        print(f"streamlens: error: {escape(report.error)}", file=sys.stderr)
    for line in report.incomplete:
        print(f"streamlens: error: {escape(line)}", file=sys.stderr)
    return report.exit_code


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logs(logging.DEBUG if args.debug else logging.WARNING)  # every line's arguments escaped
    try:
        return {"run": _cmd_run, "validate": _cmd_validate, "schema": _cmd_schema, "subscribe": subscribe_command.run,
                "events": subscribe_command.run_events,
                "keygen": keygen_command.run, "history": history_command.run,
                "search": search_command.run, "eval": eval_command.run,
                "bench": bench_command.run, "quantize": quantize_command.run,
                "models": models_command.run}[args.command](args)
    except ConfigError as e:
        if args.debug:
            raise
        print("\n".join(escape(line) for line in e.problems), file=sys.stderr)
        return EXIT_USAGE
    except StreamlensError as e:
        if args.debug:
            raise
        print(f"streamlens: error: {escape(str(e))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("streamlens: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `streamlens subscribe ... | head`: the reader has gone, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 1
    except Exception as e:  # noqa: BLE001 - one line unless --debug
        if args.debug:
            raise
        print(f"streamlens: internal error: {type(e).__name__}: {escape(str(e))} (run with --debug for details)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
