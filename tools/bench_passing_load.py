"""A load that passes: does the run come back to every frame? (issue 47: the ladder's trap)

K live highway streams (`profile_engine.highway_run`: the default engines); after `--before-s`
seconds, two processes that spin on the CPU for `--load-s` seconds; every `--every-s` the streams'
frames a second and the share the controller sheds, from /api/stats, until `--seconds` after the
load began. With `--before DIR` the same with that checkout of the code, in turn.

    python tools/bench_passing_load.py [--streams 14] [--before DIR]   # tools/results/passing_load.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from profile_engine import highway_run  # a tool beside this one (tools/ is the script's folder)

from streamlens.bench.harness import RESULTS, header, write_page


def sample(port: int) -> tuple[float, float]:
    """The streams' mean frames a second and mean share shed, now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/stats", timeout=60) as r:
        streams = list(json.load(r)["streams"].values())
    fps = sum(s.get("fps") or 0.0 for s in streams) / len(streams)
    shed = sum((s.get("control") or {}).get("shed_fraction", 0.0) for s in streams) / len(streams)
    return fps, shed


def trace(args, code: Path | None) -> list[tuple[float, float, float]]:
    found = []
    with highway_run(args.streams, "passing_load", code=code) as (_, port, _folder):
        time.sleep(args.before_s)
        spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        began = time.monotonic()
        try:
            while time.monotonic() - began < args.seconds:
                time.sleep(args.every_s)
                if spin and time.monotonic() - began >= args.load_s:
                    for p in spin:
                        p.kill()
                        p.wait()
                    spin = []
                found.append((time.monotonic() - began, *sample(port)))
        finally:
            for p in spin:
                p.kill()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=14)
    parser.add_argument("--before-s", type=float, default=8)
    parser.add_argument("--load-s", type=float, default=10)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--every-s", type=float, default=3)
    parser.add_argument("--before", type=Path, help="a checkout of the code before, run in turn")
    parser.add_argument("--out", type=Path, default=RESULTS / "passing_load.md")
    args = parser.parse_args()
    arms = [("now", None)] + ([("before", args.before.resolve())] if args.before else [])
    traces = {name: trace(args, code) for name, code in arms}
    rows = []
    for i, (t, fps, shed) in enumerate(traces["now"]):
        cells = [f"{t:.0f}", f"{fps:.1f}", f"{shed:.2f}"]
        if "before" in traces and i < len(traces["before"]):
            cells += [f"{traces['before'][i][1]:.1f}", f"{traces['before'][i][2]:.2f}"]
        rows.append("| " + " | ".join(cells) + " |")
    columns = "| s after the load began | fps a stream | share shed |" + (" fps, before | shed, before |" if args.before else "")
    text = header(f"A load that passes, at {args.streams} live highway streams")
    text += f"""
Two processes spin on the CPU from 0 s to {args.load_s:g} s, {args.before_s:g} s into the run; each row
is the streams' mean (frames a second over the engine's recent window, share the controller sheds), from
/api/stats.

{columns}
|{'---|' * (columns.count('|') - 1)}
{chr(10).join(rows)}
"""
    write_page(args.out, text, keep="## Notes")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
