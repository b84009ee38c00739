"""Peak memory of a long file run over several engines: a clip looped to `--minutes` of video.

Makes the long clip with FFmpeg (stream copy, no re-encode), runs `streamlens run --bulk` on a
pipeline of `--streams` copies of it with `runtime.workers: --workers`, samples the resident memory
of `streamlens run` and all its children every second, and prints the peak (total and per process)
with the frames each stream published, and the machine it ran on. A one-off experiment: it prints
its figures (JSON) rather than writing a page.

    python tools/experiments/bench_long_file.py samples/traffic.mp4 --minutes 60 --streams 2 --workers 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from streamlens.bench.harness import command_line, machine, need, versions


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("video")
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--streams", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    need(args.video)
    with tempfile.TemporaryDirectory() as tmp:
        seconds = float(subprocess.check_output(["ffprobe", "-v", "error", "-show_entries", "format=duration",
                                                 "-of", "csv=p=0", args.video]))
        loops = max(0, round(args.minutes * 60 / seconds) - 1)
        long = Path(tmp) / "long.mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-stream_loop", str(loops), "-i", args.video, "-c", "copy", str(long)],
                       check=True)
        sources = "\n".join(f"  - {{uri: {long}}}" for _ in range(args.streams))
        pipeline = Path(tmp) / "p.yaml"
        pipeline.write_text(f"sources:\n{sources}\ndetector: {{backend: motion}}\ntracker: none\n"
                            f"runtime: {{workers: {args.workers}}}\nsinks: [{{type: jsonl, path: {tmp}/out.jsonl}}]\n")
        started = time.monotonic()
        run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", "--bulk", str(pipeline)])
        peak_total, peak_each = 0, {}
        while run.poll() is None:
            try:
                procs = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
                rss = {pr.pid: pr.memory_info().rss for pr in procs}
            except psutil.Error:
                continue
            peak_total = max(peak_total, sum(rss.values()))
            for pid, value in rss.items():
                peak_each[pid] = max(peak_each.get(pid, 0), value)
            time.sleep(1.0)
        frames: dict[str, int] = {}
        with open(Path(tmp) / "out.jsonl") as f:
            for line in f:
                m = json.loads(line)
                if m["type"] == "frame":
                    frames[m["stream"]] = frames.get(m["stream"], 0) + 1
    print(json.dumps({"command": command_line(), "machine": machine(), "versions": versions(), "video": args.video,
                      "minutes": args.minutes, "streams": args.streams, "workers": args.workers,
                      "exit_code": run.returncode, "wall_s": round(time.monotonic() - started, 1),
                      "frames": frames, "peak_rss_mb_total": round(peak_total / 2**20, 1),
                      "peak_rss_mb_per_process": sorted(round(v / 2**20, 1) for v in peak_each.values())}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
