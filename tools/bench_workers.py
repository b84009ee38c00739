"""One engine against N engine processes (`runtime.workers`), side by side in one run.

Runs `streamlens bench PIPELINE --streams K --workers W` for each K and W, in turns (every setting
once a round, the order reversed each round), `--repeats` rounds, and writes a table of the medians
(kept frames, p95 latency, F1 against detecting every frame, frames detected) and every trial to
`--out` (markdown) with the command, the machine and the date, above the runs already on that page.
A trial passes by issue 27's rule: every stream keeps at least 97% of its frames, p95 within the
budget and the worst stream's F1 at least 0.85. A shipped YOLOX pipeline runs on its shared clip with
the shared model (`harness.shipped_file`).

    python tools/bench_workers.py pipelines/highway_yolox.yaml --streams 4,6 --workers 1,2 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from streamlens.bench.harness import RESULTS, header, in_turns, median_of, now, prepend_section, shipped_file


def trial(pipeline: str, k: int, workers: int, seconds: float, out: Path) -> dict:
    command = [sys.executable, "-m", "streamlens", "bench", str(shipped_file(pipeline)), "--streams", str(k),
               "--workers", str(workers), "--seconds", str(seconds), "--min-kept", "0.97", "--min-f1", "0.85",  # issue 27's rule
               "--no-baseline", "--no-hold", "--decode-seconds", "0", "--out", str(out)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    t = json.loads(out.read_text())["trials"][0]
    accuracy = t.get("accuracy") or {}
    return {"kept_min": t.get("kept_min"), "p95_ms": (t.get("latency_ms") or {}).get("p95"),
            "f1": accuracy.get("f1"), "f1_min": accuracy.get("f1_min"), "detected_rate": t.get("detected_rate"),
            "passed": t.get("passed")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pipeline")
    p.add_argument("--streams", default="4,6")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--out", default=str(RESULTS / "workers.md"))
    args = p.parse_args()
    streams = [int(k) for k in args.streams.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    trials: list[str] = []  # every trial, in the order run
    with tempfile.TemporaryDirectory() as tmp:

        def one(setting: tuple[int, int], r: int) -> dict:
            k, w = setting
            t = trial(args.pipeline, k, w, args.seconds, Path(tmp) / "b.json")
            trials.append(f"K={k} workers={w}: kept (min stream) {t.get('kept_min')}, "
                          f"p95 {t.get('p95_ms')} ms, "
                          f"F1 {t.get('f1')} (worst stream {t.get('f1_min')}), "
                          f"{'passes' if t.get('passed') else 'fails'}")
            print(trials[-1], file=sys.stderr, flush=True)
            return t

        # in turns: the machine's drift falls on every setting alike
        runs = in_turns([(k, w) for k in streams for w in workers], args.repeats, one)
    med = median_of

    def cell(value, fmt):
        return "-" if value is None else fmt.format(value)

    rows = ["| K | workers | kept (min stream) | p95 ms | F1 (worst stream) | frames detected | passes |",
            "|---|---|---|---|---|---|---|"]
    for k in streams:
        for w in workers:
            ts = runs[(k, w)]
            rows.append(f"| {k} | {w} | {cell(med([t.get('kept_min') for t in ts]), '{:.1%}')} | "
                        f"{cell(med([t.get('p95_ms') for t in ts]), '{:.1f}')} | "
                        f"{cell(med([t.get('f1') for t in ts]), '{:.3f}')} "
                        f"({cell(med([t.get('f1_min') for t in ts]), '{:.3f}')}) | "
                        f"{cell(med([t.get('detected_rate') for t in ts]), '{:.1%}')} | "
                        f"{sum(bool(t.get('passed')) for t in ts)}/{len(ts)} |")
    text = (f"## {now()}\n\n" + header(None) + f"\n`streamlens bench` trials of {args.seconds:g} s, "
            f"{args.repeats} rounds in turns (the order reversed each round), medians.\n\n" + "\n".join(rows)
            + "\n\nTrials, in order:\n\n" + "".join(f"- {line}\n" for line in trials))
    # the newest run first, none lost
    prepend_section(Path(args.out), text, title="One engine against several (`runtime.workers`)")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
