"""Soak test for live sources: four looping RTSP cameras through `streamlens run` for a long time, with
the server killed and restarted every few minutes; resident memory and open file descriptors of the
pipeline (its process and its decode workers) sampled over time. Not part of CI.

    python tools/soak.py --minutes 30 --restart-every 300 --out tools/results/soak.csv

Pass: resident memory grows less than 5% after the first minute, open file descriptors stay flat.
`rss_mb` sums resident memory over the pipeline's processes (pages the decode workers share with the
forkserver are counted once per process); `pss_mb` splits shared pages among their sharers: the
machine's real cost.
The RTSP server is GStreamer's (tests/gst_rtsp_server.py, Debian packages, see .ci/run); the cameras
are samples/traffic.mp4 at 640x360 (two), a 320x180 copy and, when ../shared/data is there, the
1280x720 highway clip.

Example (a short run):
    $ python tools/soak.py --minutes 3 --restart-every 60
    t_s  rss_mb  fds  frames ...
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.rtsp_server import GstRtspServer, annexb_copy, gst_missing  # noqa: E402

SAMPLE = REPO / "samples" / "traffic.mp4"
HIGHWAY = REPO.parent / "shared" / "data" / "video" / "highway_720p30.mp4"


def _tree(pid: int) -> list[int]:
    """`pid` and all its descendants (decode workers, the forkserver)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kb(pid: int) -> int:
    """Proportional set size: resident memory with shared pages split among their sharers, so a
    sum over processes counts the forkserver's pages (shared with every worker) once."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _frames(stderr: Path) -> dict[str, int]:
    """The latest frame count per stream from the run's plain progress lines."""
    counts: dict[str, int] = {}
    for line in stderr.read_text(errors="replace").splitlines()[-40:]:
        parts = line.split()
        if len(parts) > 2 and parts[0].startswith("cam") and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--restart-every", type=float, default=300.0,
                        help="kill the RTSP server and restart it 4 s later every this many seconds (0: never)")
    parser.add_argument("--out", type=Path, default=REPO / "tools" / "results" / "soak.csv")
    args = parser.parse_args()
    reason = gst_missing()
    if reason:
        print(f"soak: {reason}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="streamlens-soak-"))
    media = {"cam1": SAMPLE, "cam2": SAMPLE, "cam3": annexb_copy(SAMPLE, work, scale=(320, 180)),
             "cam4": HIGHWAY if HIGHWAY.is_file() else SAMPLE}
    with GstRtspServer(media, work) as server:
        sources = "\n".join(
            f"  - {{name: {name}, uri: '{server.url(name, 'soak:${SOAK_PASSWORD}')}', timeout_s: 2, "
            f"backoff_max_s: 1}}" for name in media)
        pipeline = work / "pipeline.yaml"
        pipeline.write_text(f"sources:\n{sources}\ndetector: {{backend: motion}}\nkeyframes: {{interval: 10}}\n"
                            f"tracker: none\nsinks: []\n")
        stderr = work / "stderr.txt"
        proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(pipeline)], cwd=work,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(stderr, "wb"),
                                env={**os.environ, "SOAK_PASSWORD": "not-for-logs"})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        started = time.monotonic()
        next_restart = args.restart_every or float("inf")
        restarts = 0
        print(f"soak: {work}, pipeline pid {proc.pid}, {args.minutes} min", flush=True)
        print(f"{'t_s':>6} {'rss_mb':>8} {'pss_mb':>8} {'main_mb':>8} {'procs':>5} {'fds':>5}  frames", flush=True)
        try:
            while (elapsed := time.monotonic() - started) < args.minutes * 60:
                if proc.poll() is not None:
                    print(f"soak: the pipeline exited ({proc.returncode})", file=sys.stderr)
                    break
                if elapsed >= next_restart:
                    server.kill()
                    time.sleep(4.0)
                    server.restart()
                    restarts += 1
                    next_restart += args.restart_every
                pids = _tree(proc.pid)
                row = {"t_s": round(elapsed, 1), "rss_mb": round(sum(map(_rss_kb, pids)) / 1024, 1),
                       "pss_mb": round(sum(map(_pss_kb, pids)) / 1024, 1),
                       "main_mb": round(_rss_kb(proc.pid) / 1024, 1), "procs": len(pids),
                       "fds": sum(map(_fds, pids)), "restarts": restarts,
                       **{f"frames_{k}": v for k, v in _frames(stderr).items()}}
                rows.append(row)
                frames = " ".join(f"{k}={v}" for k, v in _frames(stderr).items())
                print(f"{row['t_s']:>6} {row['rss_mb']:>8} {row['pss_mb']:>8} {row['main_mb']:>8} "
                      f"{row['procs']:>5} {row['fds']:>5}  {frames}", flush=True)
                time.sleep(args.every)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        fields = sorted({k for r in rows for k in r}, key=lambda k: (not k.startswith("t_"), k))
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        leaked = "not-for-logs" in stderr.read_text(errors="replace")
        after = [r for r in rows if r["t_s"] >= 60]
        if after:
            base, last = after[0], rows[-1]
            growth = 100 * (last["rss_mb"] - base["rss_mb"]) / base["rss_mb"]
            peak = max(r["rss_mb"] for r in after)
            pss = 100 * (last["pss_mb"] - base["pss_mb"]) / base["pss_mb"]
            print(f"soak: RSS {base['rss_mb']} MB at {base['t_s']} s -> {last['rss_mb']} MB at {last['t_s']} s "
                  f"({growth:+.1f}%, peak {peak} MB); PSS {base['pss_mb']} -> {last['pss_mb']} MB ({pss:+.1f}%); "
                  f"fds {base['fds']} -> {last['fds']} "
                  f"(min {min(r['fds'] for r in after)}, max {max(r['fds'] for r in after)}); "
                  f"{restarts} server restarts; password in stderr: {leaked}; exit code {proc.returncode}")
        print(f"soak: samples in {args.out}; the run's stderr in {stderr}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
