"""The memory `runtime.workers` costs: one engine against `auto` (one per core), side by side.

    python tools/bench_engine_memory.py [--streams 2,4] [--workers 1,auto] [--seconds 20] [--repeats 2]

Each run is `streamlens run` on a pipeline of K live looping copies of the shared highway clip
(720p30) with `pipelines/highway_yolox.yaml`'s detector, keyframes and tracker and no sink; the
resident memory of its whole process tree (the run, its engines, their decode workers) is summed
every half second (psutil; RSS, so pages two processes share count twice: none are shared here
but the libraries' code), and the run's median and peak after its first 5 s are kept, with the
largest process. Runs alternate between the settings. Prepends a section to
tools/results/memory.md with the command, the machine and the date.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
CLIP = DATA / "video" / "highway_720p30.mp4"
SHIPPED = REPO / "pipelines" / "highway_yolox.yaml"


def pipeline(folder: Path, streams: int, workers: str) -> Path:
    """K live looping copies of the clip with the shipped highway pipeline's detector, keyframes and
    tracker (its model paths made absolute), no sink, `runtime.workers` as asked."""
    shipped = yaml.safe_load(SHIPPED.read_text())
    detector = dict(shipped["detector"])
    for key in ("model", "names"):
        detector[key] = str((SHIPPED.parent / detector[key]).resolve())
    data = {"sources": [{"name": f"s{i}", "uri": str(CLIP), "live": True, "loop": True} for i in range(streams)],
            "detector": detector, "keyframes": shipped["keyframes"], "tracker": shipped["tracker"],
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
    ap.add_argument("--out", type=Path, default=REPO / "tools" / "results" / "memory.md")
    args = ap.parse_args()
    if not CLIP.exists():
        raise SystemExit(f"{CLIP}: not found (../shared/data)")
    ks, settings = [int(k) for k in args.streams.split(",")], args.workers.split(",")
    found: dict[tuple[int, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):
            for k in ks:
                for w in settings:
                    r = one_run(pipeline(Path(folder), k, w), args.seconds)
                    found.setdefault((k, w), []).append(r)
                    print(f"K={k} workers={w}: median {r['median']:.0f} MiB, peak {r['peak']:.0f}, "
                          f"largest process {r['largest']:.0f}, {r['processes']} processes", flush=True)
    command = "python tools/bench_engine_memory.py " + " ".join(sys.argv[1:])
    lines = [f"## Engines and memory ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"Command: `{command.strip()}`, {platform.machine()} with {os.cpu_count()} cores, "
             f"{psutil.virtual_memory().total / 2**30:.1f} GiB, Python {platform.python_version()}; each run "
             f"{args.seconds:g} s of `streamlens run`, runs alternating, medians over {args.repeats} runs.", "",
             "| streams | workers | processes | resident memory of the run, median MiB | peak MiB "
             "| largest process MiB |",
             "|---|---|---|---|---|---|"]
    for (k, w), runs in found.items():
        lines.append(f"| {k} | {w} | {max(r['processes'] for r in runs)} | "
                     f"{statistics.median(r['median'] for r in runs):.0f} | "
                     f"{statistics.median(r['peak'] for r in runs):.0f} | "
                     f"{statistics.median(r['largest'] for r in runs):.0f} |")
    section = "\n".join(lines) + "\n\n"
    old = args.out.read_text() if args.out.exists() else "# Memory\n\n"
    head, _, rest = old.partition("\n\n")
    args.out.write_text(f"{head}\n\n{section}{rest}")
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
