"""Two pipelines, without and with one feature, measured in turns by `streamlens bench --streams K`
(so both see the same machine): what tools/bench_clips.py and tools/bench_segment_live.py share.

`ab_arguments` parses `--streams`, `--rounds`, `--seconds` and `--out`; `in_turns` runs the rounds
and gives each trial's figures (kept, worst kept, p95, median and worst F1 over the streams, the
bench's JSON, the load average before it) to the caller's `row` for its table; `medians` sums up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
VIDEO = DATA / "video" / "highway_720p30.mp4"
MODEL = DATA / "models" / "yolox_nano"
NAMES = ("without", "with")


def ab_arguments(doc: str, streams: int, rounds: int, out: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=streams)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "tools" / "results" / out)
    args = parser.parse_args()
    if not VIDEO.is_file():
        raise SystemExit(f"{VIDEO} not found: the shared clips live in ../shared/data")
    return args


def trial(pipeline: Path, k: int, seconds: int, out: Path) -> dict:
    """One `streamlens bench` trial of `pipeline` at K streams: its figures, and its JSON under `bench`."""
    subprocess.run([sys.executable, "-m", "streamlens", "bench", str(pipeline), "--streams", str(k), "--seconds",
                    str(seconds), "--no-baseline", "--no-hold", "--decode-seconds", "0", "--out", str(out)],
                   check=True, capture_output=True, text=True)
    bench = json.loads(out.read_text())
    found = bench["trials"][0]
    f1 = [s["accuracy"]["f1"] for s in found["streams"].values() if s.get("accuracy")]
    return {"kept": found["kept"], "kept_min": found["kept_min"], "p95": found["latency_ms"]["p95"],
            "f1": statistics.median(f1) if f1 else None, "f1_min": min(f1) if f1 else None, "bench": bench}


def in_turns(folder: Path, args: argparse.Namespace, row: Callable[[int, str, float, dict], str]) -> tuple[list, dict]:
    """`folder/without.yaml` and `folder/with.yaml` in turns for `args.rounds` rounds: the table's
    rows (`row(round, name, load, figures)`) and every trial's figures by name."""
    rows, results = [], {name: [] for name in NAMES}
    for r in range(args.rounds):
        for name in NAMES:
            load = os.getloadavg()[0]
            found = trial(folder / f"{name}.yaml", args.streams, args.seconds, folder / f"{name}-{r}.json")
            results[name].append(found)
            rows.append(row(r + 1, name, load, found))
            print(rows[-1], flush=True)
    return rows, results


def figures(found: dict) -> str:
    """A trial's kept, p95 and F1 as table cells."""
    return (f"{found['kept']:.1%} ({found['kept_min']:.1%}) | {found['p95']:.1f} | "
            f"{found['f1']:.3f} ({found['f1_min']:.3f})")


def medians(results: dict) -> str:
    """The medians of both, as a sentence."""
    med = {name: {key: statistics.median(t[key] for t in trials) for key in ("kept", "kept_min", "p95", "f1")}
           for name, trials in results.items()}
    return " ".join(f"{name}: {m['kept']:.1%} kept (worst {m['kept_min']:.1%}), p95 {m['p95']:.1f} ms, F1 "
                    f"{m['f1']:.3f}{';' if name == 'without' else '.'}" for name, m in med.items())
