"""Where a run's CPU and its GIL go, by stage, at K live streams (issue 27 point 2: measure the
engine's CPU per frame by stage before cutting it).

`streamlens run` of `pipelines/highway_yolox.yaml`'s settings with K live, looping copies of the
shared 720p clip (files decode on threads of the run's process, so everything is in one process),
sampled by py-spy (`--extra profile`) twice for `--seconds` each:

- every thread that is running, waits excluded (`Condition.wait`, sleeps): where the process's CPU
  goes; each stage's thread-milliseconds per published frame (frames counted from `/metrics`);
- only the thread that holds the GIL (`py-spy --gil`): how much of the time the GIL is held at all,
  and by which stage. A GIL held most of the time is what a detector in a process of its own (or
  `runtime.workers`) would relieve; a GIL mostly free says the cores, not the GIL, are the limit.

Stages by the code a sample is in, first match wins: the detector's inference (onnxruntime's run),
its pre- and post-processing, decoding (PyAV, in the source threads), admission (the scene sample,
the motion observation), tracking, message building, publishing, the result stages, the engine's
own loop, the run's loop. Sampling shares are robust to the machine's load in a way wall times are
not, but a loaded machine still changes the frames a second: the load average is on the page.

    python tools/profile_engine.py [--streams 8] [--seconds 20]      # writes tools/results/profile.md
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_http_flood import scrape, wait_until_published  # a tool beside this one (tools/ is the script's folder)

from streamlens.bench.harness import RESULTS, VIDEOS, YOLOX_NANO, header, need, write_page
from streamlens.testing.rtsp_server import free_port

VIDEO = VIDEOS / "highway_720p30.mp4"
MODEL = YOLOX_NANO
#: what `PIPELINE` takes of `pipelines/highway_yolox.yaml`, and of `indoor_yolox.yaml` for the shared indoor clip
HIGHWAY = {"classes": "[car, truck, bus, motorbike]", "interval": 5, "max_interval": 15}
INDOOR_VIDEO = VIDEOS / "person_indoor_768x432.mp4"
INDOOR = {"classes": "[person]", "interval": 3, "max_interval": 9}

#: (stage, substrings of a sample's stack): the first stage whose substring a stack holds is its stage
STAGES = [
    ("detector: inference (onnxruntime)", ["OnnxDetector.run_outputs", "OnnxDetector.run_raw"]),
    ("detector: pre- and post-processing", ["streamlens/detect/"]),
    ("detector thread: batching", ["detect_worker.py", "batcher.py"]),
    ("decoding (PyAV, source threads)", ["file_passes.py", "sources/decode.py", "sources/file.py",
                                         "sources/live.py", "sources/worker.py"]),
    ("admission (scene sample, motion observation)", ["graph/admit.py"]),
    ("tracking (update, propagate)", ["streamlens/track/"]),
    ("message building (JSON)", ["wire/schema.py", "wire/codec.py"]),
    ("publishing (fan-out, ZeroMQ)", ["graph/publish/fanout.py", "sinks/zmq.py", "sinks/base.py"]),
    ("result stages and figures", ["graph/publish/route.py", "graph/publish/stages.py", "analytics/", "graph/run/stats.py",
                                   "graph/run/reports.py"]),
    ("engine: loop, keyframe choice", ["graph/engine.py", "graph/schedule/keyframes.py", "graph/schedule/chooser.py", "graph/channel.py"]),
    ("run loop, controller", ["graph/run/pipeline.py", "graph/overload/control.py", "graph/run/losses.py"]),
]
#: a sample whose innermost frame is one of these is a wait, not work
WAITS = ("Condition.wait", "Event.wait", "sleep (", "select (", "poll (", "Thread.join")

PIPELINE = """sources:
{sources}
detector: {{backend: onnx, model: {model}/yolox_nano.onnx, names: {model}/coco_classes.txt, conf: 0.3,
           resize: bucket, threads: 1, classes: {classes}}}
keyframes: {{interval: {interval}, adaptive: true, max_interval: {max_interval}}}
tracker: {{motion: mv}}
sinks: [{{type: zmq, endpoint: "tcp://127.0.0.1:{zmq}"}}]
runtime: {{http: {{port: {http}}}}}
"""


def frames_published(port: int) -> float:
    return scrape(port)[1]


def stage_of(stack: str) -> str:
    for name, keys in STAGES:
        if any(key in stack for key in keys):
            return name
    return "other"


def read(path: Path) -> tuple[collections.Counter, int, int]:
    """py-spy's raw output: samples by stage (waits left out), samples of work, samples in all."""
    by_stage, work, total = collections.Counter(), 0, 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        total += int(n)
        if stack.split(";")[-1].startswith(WAITS):
            continue
        work += int(n)
        by_stage[stage_of(stack)] += int(n)
    return by_stage, work, total


def record(pid: int, seconds: float, rate: int, out: Path, gil: bool) -> None:
    subprocess.run(["py-spy", "record", "-p", str(pid), "--duration", str(int(seconds)), "--rate", str(rate),
                    "--format", "raw", "--nonblocking", "--subprocesses", "-o", str(out)] + (["--gil"] if gil else []),
                   check=True, capture_output=True, text=True)


@contextlib.contextmanager
def highway_run(streams: int, tool: str, seconds_before: float = 1, code: Path | None = None, indoor: bool = False):
    """`streamlens run` of `PIPELINE` on `streams` live, looping copies of the clip, in a folder of its
    own: `(process, HTTP port, folder)` once it has published `seconds_before` seconds of every
    stream's frames; stopped with Ctrl-C as a user would, and its folder removed, at the end. `code`:
    a checkout of streamlens to run instead of this one (first on PYTHONPATH). `indoor`: the shared
    indoor clip at `indoor_yolox.yaml`'s settings instead (`INDOOR`)."""
    folder = Path(tempfile.mkdtemp(prefix=f"{tool}-"))
    http = free_port()
    video, settings = (INDOOR_VIDEO, INDOOR) if indoor else (VIDEO, HIGHWAY)
    sources = "\n".join(f"  - {{name: s{i}, uri: {video}, live: true, loop: true}}" for i in range(streams))
    (folder / "p.yaml").write_text(PIPELINE.format(sources=sources, model=MODEL, zmq=free_port(), http=http,
                                                   **settings))
    env = None if code is None else dict(os.environ, PYTHONPATH=str(code))
    run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(folder / "p.yaml")], cwd=code,
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_until_published(run, http, 30 * streams * seconds_before, 120, tool)
        yield run, http, folder
    finally:
        os.killpg(run.pid, signal.SIGINT)
        run.wait(60)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=int, default=200, help="samples a second")
    parser.add_argument("--out", type=Path, default=RESULTS / "profile.md")
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        raise SystemExit("profile_engine: py-spy is not installed (pip install -e '.[profile]')")
    need(VIDEO, MODEL)
    found = {}
    # up, and past its first seconds (the model loaded, every stream flowing)
    with highway_run(args.streams, "profile_engine", seconds_before=3) as (run, http, folder):
        load = os.getloadavg()[0]
        for kind, gil in (("threads", False), ("gil", True)):
            before, started = frames_published(http), time.monotonic()
            record(run.pid, args.seconds, args.rate, folder / f"{kind}.txt", gil)
            found[kind] = (*read(folder / f"{kind}.txt"), frames_published(http) - before,
                           time.monotonic() - started)
    stages, work, _, frames, wall = found["threads"]
    held, held_work, _, _, gil_wall = found["gil"]
    expected = args.rate * gil_wall  # samples had some thread held the GIL all the time
    rows = []
    for name in [name for name, _ in STAGES] + ["other"]:
        n = stages.get(name, 0)
        ms = n / args.rate * 1000 / frames if frames else float("nan")
        rows.append(f"| {name} | {n / work:.1%} | {ms:.2f} | {held.get(name, 0) / held_work:.1%} |")
    text = header(f"Where the CPU and the GIL go, by stage, at {args.streams} live 720p streams",
                  more=[f"Load average (1 min) {load:.2f} when sampling began. py-spy, {args.rate} samples a second, "
                        f"{args.seconds:g} s each way."])
    text += f"""
`pipelines/highway_yolox.yaml`'s settings (YOLOX-Nano, one onnxruntime thread, `mv` tracker,
adaptive keyframes 5 to 15) on {args.streams} live, looping copies of `{VIDEO.name}` (1280x720, 30 fps),
one zmq sink; files decode on threads of the run's process, so the whole run is one process.
{frames / wall:.0f} frames a second were published while the threads were sampled
({args.streams * 30} offered).

| stage | share of the threads' work | thread ms per published frame | share of the GIL-held time |
|---|---|---|---|
{chr(10).join(rows)}

Threads' work: every running thread's samples, waits left out; thread ms per frame: those samples
as time, over the frames published meanwhile (all threads together: on 2 cores at most 2,000 ms of
it a second). **The GIL was held {held_work / expected:.0%} of the time** (samples of the thread
holding it, against {args.rate} a second).
"""
    write_page(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
