"""The memory `runtime.workers` costs: one engine against `auto` (one per core), side by side.

    python tools/experiments/bench_engine_memory.py [--streams 2,4] [--workers 1,auto] [--seconds 20] [--repeats 2]

Each run is `streamlens run` on a pipeline of K live looping copies of the shared highway clip
(720p30) with `pipelines/highway_yolox.yaml`'s detector, keyframes and tracker and no sink; the
resident memory of its whole process tree (the run, its engines, their decode workers) is summed
every half second (psutil; RSS, so pages two processes share count twice: none are shared here
but the libraries' code), and the run's median and peak after its first 5 s are kept, with the
largest process. Runs alternate between the settings (in turns, the order reversed each round).
Prepends a section to tools/results/memory.md with the command, the machine and the date: a one-off
experiment, beside tools/bench_memory.py, which writes the rest of that page.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

from streamlens.bench.harness import PIPELINES, RESULTS, VIDEOS, header, in_turns, need, now, prepend_section, shipped

CLIP = VIDEOS / "highway_720p30.mp4"
SHIPPED = PIPELINES / "highway_yolox.yaml"


def pipeline(folder: Path, streams: int, workers: str) -> Path:
    """K live looping copies of the clip with the shipped highway pipeline's detector, keyframes and
    tracker (the shared model: `harness.shipped`), no sink, `runtime.workers` as asked."""
    tree = shipped(SHIPPED.name)
    data = {"sources": [{"name": f"s{i}", "uri": str(CLIP), "live": True, "loop": True} for i in range(streams)],
            "detector": tree["detector"], "keyframes": tree["keyframes"], "tracker": tree["tracker"],
            "runtime": {"workers": workers if workers == "auto" else int(workers)}}
    path = folder / f"k{streams}-{workers}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def one_run(path: Path, seconds: float) -> dict:
    """Summed RSS of the run's process tree every 0.5 s from its 5th second: median, peak (MiB)."""
    run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    root, samples, largest, processes = psutil.Process(run.pid), [], 0, 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds and run.poll() is None:
            time.sleep(0.5)
            if time.monotonic() - started < 5:
                continue
            tree = [root, *root.children(recursive=True)]
            sizes = []
            for p in tree:
                try:
                    sizes.append(p.memory_info().rss)
                except psutil.Error:
                    pass
            samples.append(sum(sizes) / 2**20)
            largest, processes = max(largest, max(sizes) / 2**20), max(processes, len(sizes))
    finally:
        run.send_signal(signal.SIGINT)  # Ctrl-C, as a user ends it (a run that does not end in a minute fails this)
        run.wait(60)
    if not samples:
        raise SystemExit(f"{path.name}: the run ended early: {run.stderr.read()[-2000:]}")
    return {"median": statistics.median(samples), "peak": max(samples), "largest": largest, "processes": processes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="2,4")
    ap.add_argument("--workers", default="1,auto")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS / "memory.md")
    args = ap.parse_args()
    need(CLIP)
    ks, settings = [int(k) for k in args.streams.split(",")], args.workers.split(",")
    with tempfile.TemporaryDirectory() as folder:

        def trial(setting: tuple[int, str], r: int) -> dict:
            k, w = setting
            found = one_run(pipeline(Path(folder), k, w), args.seconds)
            print(f"K={k} workers={w}: median {found['median']:.0f} MiB, peak {found['peak']:.0f}, "
                  f"largest process {found['largest']:.0f}, {found['processes']} processes", flush=True)
            return found

        found = in_turns([(k, w) for k in ks for w in settings], args.repeats, trial)
    lines = [f"## Engines and memory ({now()})", "", header(None).rstrip(),
             f"Each run {args.seconds:g} s of `streamlens run`, runs in turns (the order reversed each round), "
             f"medians over {args.repeats} runs.", "",
             "| streams | workers | processes | resident memory of the run, median MiB | peak MiB "
             "| largest process MiB |",
             "|---|---|---|---|---|---|"]
    for (k, w), runs in found.items():
        lines.append(f"| {k} | {w} | {max(r['processes'] for r in runs)} | "
                     f"{statistics.median(r['median'] for r in runs):.0f} | "
                     f"{statistics.median(r['peak'] for r in runs):.0f} | "
                     f"{statistics.median(r['largest'] for r in runs):.0f} |")
    section = "\n".join(lines) + "\n"
    prepend_section(args.out, section, title=None if args.out.exists() else "Memory")
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
