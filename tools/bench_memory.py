"""Peak memory of `streamlens run` on a long file with a slow detector: does a file wait for the
detector, or does it fill the memory? Each run is one `streamlens run` process; its peak resident
memory is the kernel's (`ru_maxrss` from wait4), with its wall time and exit code beside it.

    python tools/bench_memory.py [--baseline DIR] [--repeats 2] [--out tools/results/memory.md]

The pipeline: the 1080p highway clip from ../shared/data, YOLOX-Nano on every frame (interval 1,
the slowest case: the detector takes longer per frame than decoding), no tracker, a JSONL sink; run
once in realtime mode and once with `--bulk`. `--baseline DIR` runs the same with the code of
another checkout (e.g. `git worktree add /tmp/old d13200f`), in turns with this one (every run once
a round, the order reversed each round).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streamlens.bench.harness import REPO, RESULTS, VIDEOS, YOLOX_NANO, header, in_turns, need, write_page

CLIP = VIDEOS / "highway_1080p30.mp4"
MODEL = YOLOX_NANO


def pipeline(folder: Path) -> Path:
    path = folder / "memory.yaml"
    path.write_text(f"""sources: [{{name: cam1, uri: '{CLIP}'}}]
detector: {{backend: onnx, model: '{MODEL / 'yolox_nano.onnx'}', names: '{MODEL / 'coco_classes.txt'}',
           conf: 0.3, resize: bucket}}
keyframes: {{interval: 1}}
tracker: none
sinks: [{{type: jsonl, path: '{folder / 'out.jsonl'}'}}]
""")
    return path


def run_once(code: Path, path: Path, bulk: bool) -> dict:
    """One run of the code in `code` (its folder goes first on the import path)."""
    args = [sys.executable, "-m", "streamlens", "run", str(path), "-q"] + (["--bulk"] if bulk else [])
    started = time.monotonic()
    proc = subprocess.Popen(args, cwd=code, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(code)})
    _, status, usage = os.wait4(proc.pid, 0)
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    code_ = os.waitstatus_to_exitcode(status)
    lines = sum(1 for _ in open(path.parent / "out.jsonl")) if (path.parent / "out.jsonl").exists() else 0
    return {"peak_mb": usage.ru_maxrss / 1024, "wall_s": time.monotonic() - started, "exit": code_,
            "lines": lines, "stderr": stderr.strip().splitlines()[-1:] if code_ else []}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with, run alternately")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "memory.md")
    args = parser.parse_args()
    need(CLIP, MODEL / "yolox_nano.onnx")
    codes = {"this": REPO} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    with tempfile.TemporaryDirectory(prefix="streamlens-memory-") as tmp:
        path = pipeline(Path(tmp))

        def trial(arm: tuple[str, str], repeat: int) -> dict:
            mode, name = arm
            r = run_once(codes[name], path, mode == "bulk")
            print(f"{name:>8} {mode:>8} #{repeat + 1}: peak {r['peak_mb']:.0f} MB, {r['wall_s']:.1f} s, "
                  f"exit {r['exit']}, {r['lines']} lines {' '.join(r['stderr'])}", flush=True)
            return r

        found = in_turns([(mode, name) for mode in ("realtime", "bulk") for name in codes], args.repeats, trial)
    results = {(name, mode): runs for (mode, name), runs in found.items()}
    rows = ["| code | mode | peak RSS, median (MB) | runs (MB) | wall s, median | JSONL lines | exit |",
            "|---|---|---|---|---|---|---|"]
    for (name, mode), runs in results.items():
        rows.append(f"| {name} | {mode} | {statistics.median(r['peak_mb'] for r in runs):.0f} | "
                    f"{', '.join(format(r['peak_mb'], '.0f') for r in runs)} | "
                    f"{statistics.median(r['wall_s'] for r in runs):.1f} | {runs[0]['lines']} | "
                    f"{', '.join(str(r['exit']) for r in runs)} |")
    text = (header("Peak memory on a long file with a slow detector") + "\n"
            f"Pipeline: {CLIP.name} (1920x1080, 897 frames), YOLOX-Nano (`resize: bucket`) on every frame, no "
            f"tracker, one JSONL sink; realtime mode and `--bulk`. Peak RSS of the `streamlens run` process "
            f"(ru_maxrss).\n\n" + "\n".join(rows) + "\n")
    write_page(args.out, text)
    print(f"bench_memory: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
