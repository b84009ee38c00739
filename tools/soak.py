"""Soak test at the live benchmark's load: six live 720p streams (paced copies of the highway clip and
RTSP cameras serving it), YOLOX-Nano on keyframes, the `mv` tracker, a ZeroMQ publisher with a
subscriber in this process, through `streamlens run` for a long time. Every few minutes one camera's
decode worker is killed (SIGKILL, round robin over the cameras). Not part of CI.

    python tools/soak.py --minutes 30 --kill-every 300 --out tools/results/soak.csv

Sampled every `--every` seconds over the pipeline's process tree: resident memory (`rss_mb`, summed;
`pss_mb`, shared pages split among their sharers: the machine's real cost), open file descriptors,
and, from `/metrics`, the share of frames published within the 33 ms budget since the last sample
(`within_budget`) with a p95 estimated inside the histogram's buckets (`p95_ms`). The subscriber
counts what it received and the gaps in `seq` per stream.

Pass: resident memory grows less than 5% after the first minute, open file descriptors stay flat,
and p95 stays within the budget in every window but the few seconds around a killed worker.
Without ../shared/data the streams are samples/traffic.mp4 and the weight-free motion detector.

Example (a short run):
    $ python tools/soak.py --minutes 3 --kill-every 60
      t_s  rss_mb  pss_mb  fds  within  p95_ms  kills  received
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.rtsp_server import GstRtspServer, free_port, gst_missing  # noqa: E402

SAMPLE = REPO / "samples" / "traffic.mp4"
DATA = REPO.parent / "shared" / "data"
HIGHWAY = DATA / "video" / "highway_720p30.mp4"
YOLOX = DATA / "models" / "yolox_nano"
BUDGET_MS = 33.0


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


def _status_kb(pid: int, path: str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _decode_workers(pid: int) -> list[int]:
    """The camera decode workers: the forkserver's children (the forkserver is the child whose
    command line names it)."""
    out = []
    for child in _tree(pid)[1:]:
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"forkserver" in cmd:
            out += [p for p in _tree(child)[1:]]
    return sorted(out)


_BUCKET = re.compile(r'^streamlens_latency_seconds_bucket\{le="([^"]+)",stream="[^"]+"\} (\S+)$', re.M)


def _latency_buckets(port: int) -> dict[float, float]:
    """The latency histogram summed over streams: {upper bound in ms: cumulative count}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[float, float] = {}
    for le, count in _BUCKET.findall(text):
        bound = float("inf") if le == "+Inf" else float(le) * 1000
        out[bound] = out.get(bound, 0.0) + float(count)
    return out


def window_figures(before: dict[float, float], now: dict[float, float]) -> tuple[float | None, float | None]:
    """(share of the window's frames within the budget, p95 estimated by linear interpolation
    inside its bucket) between two scrapes of the cumulative histogram."""
    bounds = sorted(now)
    delta = [now[b] - before.get(b, 0.0) for b in bounds]
    total = delta[-1] if delta else 0.0
    if total <= 0:
        return None, None
    within = delta[bounds.index(BUDGET_MS)] / total if BUDGET_MS in bounds else None
    rank, low, below = 0.95 * total, 0.0, 0.0
    for bound, cum in zip(bounds, delta):
        if cum >= rank:
            if bound == float("inf"):
                return within, low
            return within, low + (bound - low) * (rank - below) / max(cum - below, 1e-9)
        low, below = bound, cum
    return within, None


class Subscriber(threading.Thread):
    """A SUB socket on the pipeline's publisher: frames received and seq gaps per stream."""

    def __init__(self, endpoint: str):
        super().__init__(name="subscriber", daemon=True)
        import zmq

        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"frame.")
        self.socket.setsockopt(zmq.RCVTIMEO, 500)
        self.socket.connect(endpoint)
        self.received: dict[str, int] = {}
        self.gaps: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        import json

        import zmq

        while not self.stop.is_set():
            try:
                _, payload = self.socket.recv_multipart()
            except zmq.Again:
                continue
            m = json.loads(payload)
            name, seq = m["stream"], m["seq"]
            self.received[name] = self.received.get(name, 0) + 1
            if name in self._last and seq != self._last[name] + 1:
                self.gaps[name] = self.gaps.get(name, 0) + 1
            self._last[name] = seq
        self.socket.close(0)


def pipeline_yaml(files: int, camera_urls: list[str], http_port: int, zmq_port: int) -> str:
    clip = HIGHWAY if HIGHWAY.is_file() else SAMPLE
    sources = [f"  - {{name: file{i + 1}, uri: '{clip}', live: true, loop: true}}" for i in range(files)]
    sources += [f"  - {{name: cam{i + 1}, uri: '{url}', timeout_s: 2}}" for i, url in enumerate(camera_urls)]
    if (YOLOX / "yolox_nano.onnx").is_file():
        detector = (f"detector: {{backend: onnx, model: '{YOLOX / 'yolox_nano.onnx'}', "
                    f"names: '{YOLOX / 'coco_classes.txt'}', conf: 0.3, resize: bucket, threads: 1, "
                    "classes: [car, truck, bus, motorbike]}\n"
                    "keyframes: {interval: 5, adaptive: true, max_interval: 15}\ntracker: {motion: mv}\n")
    else:
        detector = "detector: {backend: motion}\nkeyframes: {interval: 5}\ntracker: {motion: mv}\n"
    return ("sources:\n" + "\n".join(sources) + "\n" + detector
            + f"runtime: {{http: {{port: {http_port}}}}}\n"
            + f'sinks:\n  - {{type: zmq, endpoint: "tcp://127.0.0.1:{zmq_port}"}}\n')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--cameras", type=int, default=2, help="how many of the streams are RTSP cameras")
    parser.add_argument("--kill-every", type=float, default=300.0,
                        help="SIGKILL one camera's decode worker every this many seconds (0: never)")
    parser.add_argument("--out", type=Path, default=REPO / "tools" / "results" / "soak.csv")
    args = parser.parse_args()
    reason = gst_missing() if args.cameras else None
    if reason:
        print(f"soak: {reason}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="streamlens-soak-"))
    clip = HIGHWAY if HIGHWAY.is_file() else SAMPLE
    media = {f"cam{i + 1}": clip for i in range(args.cameras)}
    http_port, zmq_port = free_port(), free_port()
    with GstRtspServer(media, work) if media else _Nothing() as server:
        urls = [server.url(name, "soak:${SOAK_PASSWORD}") for name in media]
        pipeline = work / "pipeline.yaml"
        pipeline.write_text(pipeline_yaml(args.streams - args.cameras, urls, http_port, zmq_port))
        stderr = work / "stderr.txt"
        proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(pipeline)], cwd=work,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(stderr, "wb"),
                                env={**os.environ, "SOAK_PASSWORD": "not-for-logs"})
        sub = Subscriber(f"tcp://127.0.0.1:{zmq_port}")
        sub.start()
        rows: list[dict] = []
        started = time.monotonic()
        next_kill = args.kill_every or float("inf")
        kills, before = 0, {}
        print(f"soak: {work}, pipeline pid {proc.pid}, {args.minutes} min", flush=True)
        print(f"{'t_s':>6} {'rss_mb':>8} {'pss_mb':>8} {'fds':>5} {'within':>7} {'p95_ms':>7} {'kills':>5}  received",
              flush=True)
        try:
            while (elapsed := time.monotonic() - started) < args.minutes * 60:
                if proc.poll() is not None:
                    print(f"soak: the pipeline exited ({proc.returncode})", file=sys.stderr)
                    break
                killed = ""
                if elapsed >= next_kill and media:
                    workers = _decode_workers(proc.pid)
                    if workers:
                        victim = workers[kills % len(workers)]
                        os.kill(victim, signal.SIGKILL)
                        kills += 1
                        killed = str(victim)
                    next_kill += args.kill_every
                pids = _tree(proc.pid)
                try:
                    now = _latency_buckets(http_port)
                except OSError:
                    now = before
                within, p95 = window_figures(before, now) if before else (None, None)
                before = now
                row = {"t_s": round(elapsed, 1),
                       "rss_mb": round(sum(_status_kb(p, "status", "VmRSS:") for p in pids) / 1024, 1),
                       "pss_mb": round(sum(_status_kb(p, "smaps_rollup", "Pss:") for p in pids) / 1024, 1),
                       "main_mb": round(_status_kb(proc.pid, "status", "VmRSS:") / 1024, 1),
                       "procs": len(pids), "fds": sum(map(_fds, pids)),
                       "within_budget": None if within is None else round(within, 4),
                       "p95_ms": None if p95 is None else round(p95, 1), "kills": kills, "killed_pid": killed,
                       "received": sum(sub.received.values()), "seq_gaps": sum(sub.gaps.values())}
                rows.append(row)
                print(f"{row['t_s']:>6} {row['rss_mb']:>8} {row['pss_mb']:>8} {row['fds']:>5} "
                      f"{'' if within is None else f'{within:.3f}':>7} {'' if p95 is None else f'{p95:.1f}':>7} "
                      f"{kills:>5}  {row['received']}{' killed ' + killed if killed else ''}", flush=True)
                time.sleep(args.every)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            sub.stop.set()
            sub.join(5)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["t_s"])
            writer.writeheader()
            writer.writerows(rows)
        _report(rows, kills, proc.returncode, "not-for-logs" in stderr.read_text(errors="replace"), sub)
        print(f"soak: samples in {args.out}; the run's stderr in {stderr}")
    return 0


def _report(rows: list[dict], kills: int, code: int | None, leaked: bool, sub: Subscriber) -> None:
    after = [r for r in rows if r["t_s"] >= 60]
    if not after:
        return
    base, last = after[0], rows[-1]
    growth = 100 * (last["rss_mb"] - base["rss_mb"]) / base["rss_mb"]
    pss = 100 * (last["pss_mb"] - base["pss_mb"]) / base["pss_mb"] if base["pss_mb"] else 0.0
    windows = [r for r in after if r["p95_ms"] is not None]
    over = [r for r in windows if r["p95_ms"] > BUDGET_MS]
    print(f"soak: RSS {base['rss_mb']} MB at {base['t_s']} s -> {last['rss_mb']} MB at {last['t_s']} s "
          f"({growth:+.1f}%, peak {max(r['rss_mb'] for r in after)} MB); PSS {base['pss_mb']} -> "
          f"{last['pss_mb']} MB ({pss:+.1f}%); fds {base['fds']} -> {last['fds']} (min "
          f"{min(r['fds'] for r in after)}, max {max(r['fds'] for r in after)}); windows with p95 over "
          f"{BUDGET_MS:g} ms: {len(over)} of {len(windows)} (at t = {[r['t_s'] for r in over]}); "
          f"{kills} decode workers killed; received {sum(sub.received.values())} frames, seq gaps "
          f"{dict(sub.gaps)}; password in stderr: {leaked}; exit code {code}")


class _Nothing:
    """Stands in for the RTSP server when the soak runs no camera."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
