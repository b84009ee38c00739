"""Capacity from the streams' start, arms side by side (issue 47): `streamlens bench` at each K with
no warm-up excluded (cameras start together after a restart too), every arm in turns, each round.

Arms: `now` (this checkout, the pipeline as shipped), `before` (`--before DIR`: a checkout of the
code to compare, e.g. a `git worktree` of the commit before; run with that directory first on
PYTHONPATH), and `now+fast_decode` (this checkout, the source with `fast_decode: true`); with
`--hold`, the plain baseline (the newest frame of each stream detected in turn, its boxes held)
runs once per K beside them. The decode-only limit is measured once, for the ratio of the largest
K that passes to it.

    python tools/bench_capacity.py [--streams 12,14] [--rounds 2] [--seconds 30] [--before DIR] [--hold]
        [--pipeline pipelines/highway_yolox.yaml] [--out capacity]      # tools/results/capacity.md

A trial passes as the issue's targets read: every stream keeps every frame, p95 <= the budget,
the worst stream's F1 >= 0.85.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from streamlens.bench.harness import PIPELINES, REPO, RESULTS, header, shipped_file, write_page

ARMS = ("now", "before", "now+fast_decode")


def trial(code: Path, pipeline: Path, k: int, seconds: float, out: Path, hold: bool, decode_s: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code))
    command = [sys.executable, "-m", "streamlens", "bench", str(pipeline), "--streams", str(k), "--seconds",
               str(seconds), "--warmup", "0", "--no-baseline", "--decode-seconds", str(decode_s), "--out", str(out)]
    if not hold:
        command.append("--no-hold")
    subprocess.run(command, cwd=code, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def row(k: int, arm: str, r: int, t: dict) -> str:
    streams = t["streams"].values()
    f1 = sorted(s["accuracy"]["f1"] for s in streams)
    lost = t.get("lost_by_cause") or {}
    p95 = t["latency_ms"]["p95"]
    passed = t["kept_min"] >= 1.0 and p95 <= 33 and f1[0] >= 0.85
    return (f"| {k} | {arm} | {r} | {t['kept']:.1%} ({t['kept_min']:.1%}) | {t['kept_spread'] * 100:.1f} | "
            f"{p95:.1f} | {f1[len(f1) // 2]:.3f} ({f1[0]:.3f}) | {t['detected_rate']:.1%} | "
            f"{lost.get('stale', 0)} / {lost.get('shed', 0)} | {'yes' if passed else 'no'} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", default="12,14")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--before", type=Path, help="a checkout of the code to compare")
    p.add_argument("--arms", default=",".join(ARMS), help="which arms (default: %(default)s; before needs --before)")
    p.add_argument("--hold", action="store_true", help="the plain baseline once per K")
    p.add_argument("--pipeline", type=Path, default=PIPELINES / "highway_yolox.yaml")
    p.add_argument("--out", default="capacity")
    args = p.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_capacity-"))
    plain = shipped_file(args.pipeline)
    data = yaml.safe_load(Path(plain).read_text())
    data["sources"][0]["fast_decode"] = True
    fast = folder / "fast.yaml"
    fast.write_text(yaml.safe_dump(data, sort_keys=False))
    arms = {"now": (REPO, Path(plain)), "now+fast_decode": (REPO, fast)}
    if args.before:
        arms["before"] = (args.before.resolve(), Path(plain))
    chosen = [a for a in args.arms.split(",") if a in arms]
    rows, holds, limit, results = [], [], None, []
    for k in (int(k) for k in args.streams.split(",")):
        for r in range(1, args.rounds + 1):
            for arm in chosen:
                code, pipeline = arms[arm]
                first = limit is None
                found = trial(code, pipeline, k, args.seconds, folder / f"{arm}-{k}-{r}.json",
                              hold=args.hold and arm == "now" and r == 1, decode_s=10 if first else 0)
                limit = limit or found.get("decode_limit")
                t = found["trials"][0]
                results.append({"k": k, "arm": arm, "round": r, "trial": t})
                rows.append(row(k, arm, r, t))
                print(rows[-1], flush=True)
                if found.get("hold"):
                    holds.append(row(k, "plain baseline", r, found["hold"][0]))
    (RESULTS / f"{args.out}.json").write_text(json.dumps({"results": results, "decode_limit": limit}, indent=1))
    streams = limit.get("streams") if limit else None
    text = header(f"Capacity from the streams' start: {args.pipeline.name}, arms in turns")
    text += f"""
`streamlens bench` on `{Path(args.pipeline).name}`'s settings (its shared clip, K live looping copies, one
zmq sink and an outside subscriber), `--warmup 0` (counted from the streams' start), {args.seconds:g} s a
trial; arms in turns within each round. F1: each stream's received boxes against the detector on every
full-size frame; median over the streams (worst). Lost: frames too old for the budget / shed by the
controller. Pass: every frame kept, p95 <= 33 ms, worst F1 >= 0.85. Decode-only limit:
{'%.1f streams' % streams if streams else 'not measured'}.

| K | arm | round | kept (worst) | spread, points | p95 ms | F1 (worst) | frames detected | lost stale / shed | passes |
|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows + holds)}
"""
    write_page(RESULTS / f"{args.out}.md", text, keep="## Notes")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
