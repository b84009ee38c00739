"""The overload curve (issue 23, point 4): `streamlens bench --curve` from one stream up to the
decode-only limit, on the shared highway clip (pipelines/highway_yolox.yaml) and on the 10 fps indoor
clip (pipelines/indoor_yolox.yaml), written up as tools/results/overload.md (+ overload.json).

    python tools/bench_overload.py [--base DIR] [--seconds 15] [--warmup 8]
                                   [--highway 1,2,4,...] [--indoor 1,4,...] [--only highway|indoor]

At every K the target is p95 <= the budget (33 ms) and every stream within 10 points of the others
in frames kept; kept (mean, worst, spread) and F1 (mean, worst) are reported beside it. With
`--base DIR` (a checkout of an earlier commit, e.g. `git worktree add /work/ov_base <commit>`) the
same trial runs with that code too, K by K, the two alternating (which goes first alternates too),
so both see the same machine; the load average is noted beside every trial. The decode-only limit
is measured once per clip (`streamlens.bench.probe.decode_limit`, 10 s).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import yaml

from streamlens.bench.harness import (PIPELINES, REPO, RESULTS, command_line, machine, machine_line, shipped_file,
                                      versions)

ROOT = REPO
CLIPS = {
    "highway": (PIPELINES / "highway_yolox.yaml", "1,2,4,6,8,10,12,16,20,24,30"),
    "indoor": (PIPELINES / "indoor_yolox.yaml", "1,4,8,12,18,24,32,48,64,96,128"),
}
MAX_SPREAD = 0.10


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "-"


def run_one(code: Path, pipeline: Path, k: int, seconds: float, warmup: float) -> dict:
    """One `streamlens bench` trial with the code in `code`; its trial dict, with the load around it."""
    with tempfile.TemporaryDirectory(prefix="overload-") as tmp:
        out = Path(tmp) / "bench.json"
        command = [sys.executable, "-m", "streamlens", "bench", str(pipeline), "--streams", str(k),
                   "--seconds", str(seconds), "--warmup", str(warmup), "--no-baseline", "--no-hold",
                   "--decode-seconds", "0", "--out", str(out), "--curve"]
        env = {**os.environ, "PYTHONPATH": str(code)}
        before = load()
        done = subprocess.run(command, cwd=code, env=env, capture_output=True, text=True, timeout=900, check=False)
        after = load()
        if not out.exists():
            return {"k": k, "status": "error", "error": (done.stderr or done.stdout).strip().splitlines()[-1:],
                    "load": [before, after]}
        trial = json.loads(out.read_text())["trials"][0]
    trial["load"] = [before, after]
    return trial


def summary(trial: dict, budget_ms: float) -> dict:
    """What the curve reports of a trial."""
    if trial.get("status") != "ok":
        return {"k": trial["k"], "status": "error", "error": trial.get("error"), "load": trial.get("load")}
    kept = [s["kept"] for s in trial["streams"].values() if "kept" in s]
    kept += [0.0] * (trial["k"] - len(kept))  # a stream that delivered nothing in the window
    acc = trial.get("accuracy") or {}
    causes: dict[str, int] = {}
    for entry in trial["streams"].values():
        lost = (entry.get("eos") or {}).get("lost") or (entry.get("stats") or {}).get("lost") or {}
        for cause, n in lost.items():
            causes[cause] = causes.get(cause, 0) + (n or 0)
    p95 = trial["latency_ms"]["p95"]
    spread = round(max(kept) - min(kept), 4)
    return {"k": trial["k"], "status": "ok", "kept": trial["kept"], "kept_min": min(kept), "kept_max": max(kept),
            "kept_spread": spread, "p50": trial["latency_ms"]["p50"], "p95": p95, "p99": trial["latency_ms"]["p99"],
            "f1": acc.get("f1"), "f1_min": acc.get("f1_min"), "detected_rate": trial.get("detected_rate"),
            "lost_by_cause": causes, "load": trial["load"],
            "streams": {name: {"kept": entry.get("kept"), "frames": entry.get("frames"),
                               "detected": entry.get("detected"), "f1": (entry.get("accuracy") or {}).get("f1"),
                               "lost": (entry.get("eos") or {}).get("lost") or (entry.get("stats") or {}).get("lost")}
                        for name, entry in trial["streams"].items()},
            "passed": bool(trial["frames"] and p95 is not None and p95 <= budget_ms and spread <= MAX_SPREAD)}


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _num(v, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table(rows: list[dict], label: str) -> list[str]:
    lines = [f"| K | {label}: kept | worst | spread (points) | p95 ms | F1 | worst F1 | frames detected | "
             "lost by cause | load (1/5/15 min) | passes |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['k']} | error: {r.get('error')} | | | | | | | | {r.get('load')} | no |")
            continue
        causes = ", ".join(f"{c} {n}" for c, n in sorted(r["lost_by_cause"].items()) if n) or "none"
        lines.append(f"| {r['k']} | {_pct(r['kept'])} | {_pct(r['kept_min'])} | {_num(100 * r['kept_spread'])} | "
                     f"{_num(r['p95'])} | {_num(r['f1'], 3)} | {_num(r['f1_min'], 3)} | {_pct(r['detected_rate'])} | "
                     f"{causes} | {r['load'][0]} | {'yes' if r['passed'] else 'no'} |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, help="a checkout of the code to compare with (run with PYTHONPATH)")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--warmup", type=float, default=8.0)
    p.add_argument("--highway", default=CLIPS["highway"][1], help="the Ks tried on the highway clip")
    p.add_argument("--indoor", default=CLIPS["indoor"][1], help="the Ks tried on the indoor clip")
    p.add_argument("--only", choices=sorted(CLIPS), help="one clip only")
    p.add_argument("--decode", choices=["as-configured", "process"], default="as-configured",
                   help="process: every source decoded in a worker process, as a camera is (`decode: process`)")
    p.add_argument("--out", type=Path, default=RESULTS / "overload.json")
    p.add_argument("--tables", action="store_true", help="print the tables of --out as Markdown, run nothing")
    args = p.parse_args()
    if args.tables:
        document = json.loads(args.out.read_text())
        print(f"Command: `{document['command']}`  \nDate: {document['date']}  \n"
              f"Machine: {machine_line(document['machine'])}")
        for name, clip in document["clips"].items():
            limit = clip["decode_limit"]
            print(f"\n### {name} ({clip['pipeline']}, decode: {clip.get('decode', 'as-configured')}; "
                  f"decode-only limit {limit['streams']:g} streams, "
                  f"load {limit['load']})\n")
            print("\n".join(table(clip["after"], "after")))
            if clip["before"]:
                print()
                print("\n".join(table(sorted(clip["before"], key=lambda r: r["k"]), "before")))
        return 0
    document = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_line(),
                "machine": machine(), "versions": versions(), "seconds": args.seconds, "warmup_s": args.warmup,
                "base": str(args.base) if args.base else None, "max_spread": MAX_SPREAD, "clips": {}}
    if args.base:
        document["base_commit"] = subprocess.run(["git", "-C", str(args.base), "log", "-1", "--format=%h %s"],
                                                 capture_output=True, text=True, check=False).stdout.strip()
    document["commit"] = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"],
                                        capture_output=True, text=True, check=False).stdout.strip()
    document["decode"] = args.decode
    for name, (configured, _) in CLIPS.items():
        if args.only and name != args.only:
            continue
        shipped = shipped_file(configured)  # on its shared clip, with the shared model
        pipeline = shipped if args.decode == "as-configured" else decoded_in_process(shipped)
        try:
            run_clip(args, document, name, pipeline, configured)
        finally:
            if pipeline != shipped:
                pipeline.unlink()
    print(f"wrote {args.out}")
    return 0


def decoded_in_process(pipeline: Path) -> Path:
    """A copy of `pipeline` beside it (its relative paths hold) with `decode: process` on every source."""
    document = yaml.safe_load(pipeline.read_text())
    for source in document["sources"]:
        source["decode"] = "process"
    with tempfile.NamedTemporaryFile("w", dir=pipeline.parent, prefix=f".{pipeline.stem}-process-", suffix=".yaml",
                                     delete=False) as out:
        yaml.safe_dump(document, out, sort_keys=False)
    return Path(out.name)


def run_clip(args, document: dict, name: str, pipeline: Path, configured: Path) -> None:
    """The curve of one clip, both sides when there is a base, written to `args.out` after each trial."""
    from streamlens.bench.probe import decode_limit
    from streamlens.config import load_pipeline

    config = load_pipeline(pipeline)
    budget = config.runtime.budget_ms
    limit_load = load()
    limit = decode_limit(config.sources[0].uri, 10.0, export_mvs=config.tracker.motion == "mv")
    print(f"{name}: decode-only limit {limit['streams']:g} streams (load {limit_load})", flush=True)
    clip = {"pipeline": str(configured.relative_to(ROOT)), "decode": args.decode, "budget_ms": budget,
            "decode_limit": {**limit, "load": limit_load}, "after": [], "before": []}
    ladder = [int(k) for k in getattr(args, name).split(",")]
    for i, k in enumerate(ladder):
        # both sides with --curve: without it a stream's kept is taken over the span of the frame
        # numbers it delivered, and one that delivered for the window's last 3 s read as if for all 12
        sides = [("after", ROOT)] + ([("before", args.base)] if args.base else [])
        for side, code in (sides if i % 2 == 0 else sides[::-1]):
            trial = summary(run_one(code, pipeline, k, args.seconds, args.warmup), budget)
            clip[side].append(trial)
            print(f"  {name} K={k} {side}: " + (f"kept {_pct(trial['kept'])} (worst {_pct(trial['kept_min'])}, "
                  f"spread {_num(100 * trial['kept_spread'])}), p95 {_num(trial['p95'])} ms, "
                  f"F1 {_num(trial['f1'], 3)} (worst {_num(trial['f1_min'], 3)}), load {trial['load'][0]}"
                  if trial["status"] == "ok" else f"error {trial.get('error')}"), flush=True)
            document["clips"][name] = clip
            args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
