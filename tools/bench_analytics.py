"""The cost of analytics per frame: `--objects` tracked objects moving through `--zones` zones and
`--lines` lines, on one core; median and p95 of `StreamAnalytics.update` over `--frames` frames,
printed under the command and the machine.

    python tools/bench_analytics.py --objects 20 --zones 4 --lines 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from streamlens.analytics import LineRule, StreamAnalytics, ZoneRule
from streamlens.bench.harness import command_line, machine_line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=20)
    p.add_argument("--zones", type=int, default=4)
    p.add_argument("--lines", type=int, default=2)
    p.add_argument("--frames", type=int, default=3000)
    args = p.parse_args()
    w, h = 1280, 720
    zones = [(ZoneRule(f"z{i}", [(i * 300, 100), (i * 300 + 250, 100), (i * 300 + 250, 600), (i * 300, 600)],
                       loiter_s=10.0), None) for i in range(args.zones)]
    lines = [(LineRule(f"l{i}", ((0, 200 + 300 * i), (w, 200 + 300 * i))), None) for i in range(args.lines)]
    analytics = StreamAnalytics(lines=lines, zones=zones, pixels_per_metre=20.0)
    rng = np.random.default_rng(0)
    start = rng.uniform([0, 0], [w, h], (args.objects, 2))
    speed = rng.uniform(-8, 8, (args.objects, 2))
    ids, labels, scores = np.arange(args.objects), ["car"] * args.objects, np.full(args.objects, 0.8)
    times = []
    for f in range(args.frames):
        centre = (start + f * speed) % [w, h]
        xyxy = np.column_stack([centre - 20, centre + 20])
        began = time.perf_counter()
        analytics.update(f / 30, xyxy, ids, labels, scores)
        times.append((time.perf_counter() - began) * 1000)
    times.sort()
    print(f"{command_line()}\nmachine: {machine_line()}")
    print(f"{args.objects} objects, {args.zones} zones, {args.lines} lines: median {statistics.median(times):.3f} ms, "
          f"p95 {times[int(0.95 * len(times))]:.3f} ms per frame ({args.frames} frames)")


if __name__ == "__main__":
    main()
