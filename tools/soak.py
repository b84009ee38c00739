"""Soak test: live 720p streams (paced copies of the highway clip and RTSP cameras serving it),
YOLOX-Nano on keyframes, the `mv` tracker, a ZeroMQ publisher with a subscriber in this process,
through `streamlens run` for a long time, with processes killed on a schedule. Not part of CI.

Two modes:

- One engine (the default, `--workers 1`): six streams, two of them cameras; every `--kill-every`
  seconds one camera's decode worker is killed (SIGKILL, round robin over the cameras). Samples go
  to `--out` (default tools/results/soak.csv); tools/results/soak.md is written by hand from them.

      python tools/soak.py --minutes 30 --kill-every 300

- Several engines (`--workers 2`, issue 23's target: "A 30-minute soak at a load that fits
  (cameras and files, an engine and a decode worker killed every 5 minutes): RSS flat (< 5% after
  the first minute), no file descriptor or /dev/shm growth, no `seq` gap outside the kills"):
  `runtime.workers: 2` with four streams by default, cameras first (cam1 cam2 file1 file2: the
  supervisor deals them round robin, so each engine has a camera and a file). Every
  `--kill-every` seconds one kill event: one engine process is killed (SIGKILL; engine 0, then 1,
  ...) and, at the same moment, the decode worker of a camera of another engine (SIGKILL; decode
  workers are the children of each engine's multiprocessing forkserver). Writes
  tools/results/soak_workers.csv (samples) and tools/results/soak_workers.md (the report: command,
  machine, date, load, figures, verdicts) by itself.

      python tools/soak.py --workers 2 --minutes 30 --kill-every 300

Sampled every `--every` seconds over the run's whole process tree (the supervisor or the one
engine, engines, their forkservers and decode workers, resource trackers): resident memory
(`rss_mb`, summed; `pss_mb`, shared pages split among their sharers: the machine's real cost),
open file descriptors, the processes by role, and the `/dev/shm/streamlens-*` entries (count,
bytes, and `shm_orphans`: entries whose owner process, named in the entry, is gone). From
`/metrics`: the share of frames published within the 33 ms budget since the last sample
(`within_budget`) and a p95 estimated inside the histogram's buckets (`p95_ms`; empty for a window
in which a restarted engine reset its counters), and engine restarts. From the subscriber (a SUB
socket that never drops: `rcvhwm` 0): frames received, its own p95 latency per window (receipt
minus the message's `ts`, `sub_p95_ms`), the frames kept per window (received over the span of each
stream's `frame` index: shed frames take their numbers), how far each camera's decoding fell
behind the camera's own clock (`cam_behind_p95_ms`: `ts - pts` over its smallest value in the
connection; latency from `ts` cannot show a backlog before the decoder), every `seq` gap with its
time and stream, and, computed after the run, F1 per window of the received boxes against the detector on
every frame of the clip (`streamlens.bench.reference`, `streamlens.bench.accuracy.match_frame`:
IoU 0.5, class-aware; files' clip frames from their `pts`, cameras' from `pts` modulo the clip and
an offset fitted on their boxes, as tools/bench_cameras.py does).

Judged after the first minute, leaving out the `--settle` seconds (default 30) after each kill event
(an engine restart waits 1-2 s, then reconnects and warms its detector): resident memory and PSS
(the median of the first five minutes against the last five, and a straight-line slope), file
descriptors and /dev/shm entries (no growth). A `seq` gap is explained when it falls within
`--settle` s after a kill event and hits a stream of the killed engine; any other gap fails.
Without ../shared/data the streams are samples/traffic.mp4 and the weight-free motion detector.

Example (a short run):
    $ python tools/soak.py --workers 2 --minutes 3 --kill-every 60 --trial
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from streamlens.bench.harness import REPO, RESULTS, VIDEOS, YOLOX_NANO, command_line, machine_line
from streamlens.testing.rtsp_server import GstRtspServer, free_port, gst_missing

SAMPLE = REPO / "samples" / "traffic.mp4"
HIGHWAY = VIDEOS / "highway_720p30.mp4"
YOLOX = YOLOX_NANO
SHM = Path("/dev/shm")
BUDGET_MS = 33.0
#: a camera decoded further behind its own clock than this (p95 of a window) is not keeping up
BEHIND_MS = 100.0


# ------------------------------------------------------------------------------ the process tree

def _parents() -> dict[int, int]:
    """{pid: parent pid} of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                out[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


def process_tree(pid: int, parents: dict[int, int] | None = None) -> list[int]:
    """`pid` and all its descendants."""
    children: dict[int, list[int]] = {}
    for child, parent in (parents or _parents()).items():
        children.setdefault(parent, []).append(child)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _command(pid: int) -> str:
    return _cmdline(pid).replace(b"\0", b" ").decode(errors="replace").strip()[:120]


def roles(root: int) -> dict[str, list[int]]:
    """The run's processes by role: `main` (the run itself), `engines` (its engine processes, under
    `runtime.workers`), `forkservers`, `decode` (decode workers: a forkserver's children),
    `trackers` (multiprocessing resource trackers), `other`."""
    parents = _parents()
    pids = process_tree(root, parents)
    out: dict[str, list[int]] = {"main": [root], "engines": [], "forkservers": [], "decode": [], "trackers": [],
                                 "other": []}
    for pid in pids[1:]:
        cmd, parent_cmd = _cmdline(pid), _cmdline(parents.get(pid, 0))
        if b"resource_tracker" in cmd:
            out["trackers"].append(pid)
        elif b"forkserver" in cmd:
            out["decode" if b"forkserver" in parent_cmd else "forkservers"].append(pid)
        elif parents.get(pid) == root and b"spawn_main" in cmd:
            out["engines"].append(pid)
        else:
            out["other"].append(pid)
    return {k: sorted(v) for k, v in out.items()}


def engine_index(pid: int) -> int | None:
    """Which engine the process `pid` is: its ZeroMQ sink socket is bound at `ipc://<folder>/<engine>-<sink>`
    (streamlens/scale/supervisor.py), None if that cannot be read."""
    try:
        import psutil

        for conn in psutil.Process(pid).net_connections(kind="unix"):
            m = re.search(r"/(\d+)-\d+$", conn.laddr or "")
            if m:
                return int(m.group(1))
    except Exception:  # noqa: BLE001 - psutil missing, the process gone, no permission: unknown
        pass
    return None


def status_kb(pid: int, path: str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def shm_entries(owners: set[int] | None = None) -> tuple[int, int, int]:
    """/dev/shm/streamlens-<owner pid>-* now, of the processes `owners` only (None: everyone's;
    other runs on the machine have rings of their own): (entries, bytes, entries whose owner is gone)."""
    count = size = orphans = 0
    for path in SHM.glob("streamlens-*") if SHM.is_dir() else ():
        owner = path.name.split("-")[1] if path.name.count("-") >= 2 else ""
        if owners is not None and not (owner.isdigit() and int(owner) in owners):
            continue
        try:
            size += path.stat().st_size
        except OSError:
            continue
        count += 1
        orphans += owner.isdigit() and not Path(f"/proc/{owner}").exists()
    return count, size, orphans


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), to tell it from a later one with its pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _decode_workers(pid: int) -> list[int]:
    """The run's camera decode workers (children of a forkserver)."""
    return roles(pid)["decode"]


# ------------------------------------------------------------------------------ /metrics

_BUCKET = re.compile(r'^streamlens_latency_seconds_bucket\{le="([^"]+)",stream="[^"]+"\} (\S+)$', re.M)
_RESTARTS = re.compile(r'^streamlens_engine_restarts_total\{engine="(\d+)"\} (\S+)$', re.M)


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _latency_buckets(text: str) -> dict[float, float]:
    """The latency histogram summed over streams: {upper bound in ms: cumulative count}."""
    out: dict[float, float] = {}
    for le, count in _BUCKET.findall(text):
        bound = float("inf") if le == "+Inf" else float(le) * 1000
        out[bound] = out.get(bound, 0.0) + float(count)
    return out


def window_figures(before: dict[float, float], now: dict[float, float]) -> tuple[float | None, float | None]:
    """(share of the window's frames within the budget, p95 estimated by linear interpolation
    inside its bucket) between two scrapes of the cumulative histogram; (None, None) when a count
    went down (a restarted engine's counters start again from zero)."""
    bounds = sorted(now)
    delta = [now[b] - before.get(b, 0.0) for b in bounds]
    total = delta[-1] if delta else 0.0
    if total <= 0 or min(delta) < 0:
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


# ------------------------------------------------------------------------------ the subscriber

class Subscriber(threading.Thread):
    """A SUB socket on the pipeline's publisher that drops nothing itself (`rcvhwm` 0): per stream
    every frame message's receipt time, `ts`, `seq`, `frame`, `pts`, `detected_frame` and boxes
    (`[x1, y1, x2, y2, cls]` rows), every `seq` gap `(receipt time, stream, last seq, new seq)`,
    and each stream's engine (from its `stats` messages)."""

    def __init__(self, endpoint: str):
        super().__init__(name="subscriber", daemon=True)
        import zmq

        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.rcvhwm = 0
        self.socket.setsockopt(zmq.SUBSCRIBE, b"frame.")
        self.socket.setsockopt(zmq.SUBSCRIBE, b"stats.")
        self.socket.setsockopt(zmq.RCVTIMEO, 500)
        self.socket.connect(endpoint)
        self.records: dict[str, dict[str, list]] = {}
        self.gaps: list[tuple[float, str, int, int]] = []
        self.engine_of: dict[str, int] = {}
        self.last_stats: dict[str, dict] = {}
        self.window_latency: list[float] = []  # ms, since the sampler last took them
        self.stop = threading.Event()

    @property
    def received(self) -> dict[str, int]:
        return {name: len(r["recv"]) for name, r in list(self.records.items())}

    def take_window(self) -> list[float]:
        taken, self.window_latency = self.window_latency, []
        return taken

    def run(self) -> None:
        import zmq

        while not self.stop.is_set():
            try:
                _, payload = self.socket.recv_multipart()
            except zmq.Again:
                continue
            received = time.time()
            m = json.loads(payload)
            name = m.get("stream")
            if m.get("type") == "stats":
                self.last_stats[name] = m
                if isinstance(m.get("engine"), int):
                    self.engine_of[name] = m["engine"]
                continue
            r = self.records.setdefault(name, {k: [] for k in ("recv", "ts", "seq", "frame", "pts", "det", "boxes")})
            if r["seq"] and m["seq"] != r["seq"][-1] + 1:
                self.gaps.append((received, name, r["seq"][-1], m["seq"]))
            r["recv"].append(received)
            r["ts"].append(m["ts"])
            r["seq"].append(m["seq"])
            r["frame"].append(m["frame"])
            r["pts"].append(m.get("pts"))
            r["det"].append(m.get("detected_frame"))
            r["boxes"].append(np.asarray([o["box"] + [o.get("cls", -1)] for o in m.get("objects") or ()],
                                         np.float32).reshape(-1, 5))
            self.window_latency.append((received - m["ts"]) * 1000.0)
        self.socket.close(0)


# ------------------------------------------------------------------------------ the pipeline

def source_names(streams: int, cameras: int) -> list[str]:
    """The streams in the pipeline file's order: the cameras first, then the files (round robin over
    the engines, each engine gets cameras and files alike)."""
    return [f"cam{i + 1}" for i in range(cameras)] + [f"file{i + 1}" for i in range(streams - cameras)]


def pipeline_yaml(files: int, camera_urls: list[str], http_port: int, zmq_port: int, workers: int = 1) -> str:
    clip = HIGHWAY if HIGHWAY.is_file() else SAMPLE
    sources = [f"  - {{name: cam{i + 1}, uri: '{url}', timeout_s: 2}}" for i, url in enumerate(camera_urls)]
    sources += [f"  - {{name: file{i + 1}, uri: '{clip}', live: true, loop: true}}" for i in range(files)]
    if workers == 1:  # the one-engine soak's order, as soak.md ran it
        sources = sources[len(camera_urls):] + sources[:len(camera_urls)]
    if (YOLOX / "yolox_nano.onnx").is_file():
        detector = (f"detector: {{backend: onnx, model: '{YOLOX / 'yolox_nano.onnx'}', "
                    f"names: '{YOLOX / 'coco_classes.txt'}', conf: 0.3, resize: bucket, threads: 1, "
                    "classes: [car, truck, bus, motorbike]}\n"
                    "keyframes: {interval: 5, adaptive: true, max_interval: 15}\ntracker: {motion: mv}\n")
    else:
        detector = "detector: {backend: motion}\nkeyframes: {interval: 5}\ntracker: {motion: mv}\n"
    runtime = f"runtime: {{http: {{port: {http_port}}}" + (f", workers: {workers}" if workers > 1 else "") + "}\n"
    return ("sources:\n" + "\n".join(sources) + "\n" + detector + runtime
            + f'sinks:\n  - {{type: zmq, endpoint: "tcp://127.0.0.1:{zmq_port}"}}\n')


class _Nothing:
    """Stands in for the RTSP server when the soak runs no camera."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def kill_event(proc_pid: int, number: int, workers: int, engine_streams: dict[int, list[str]]) -> dict:
    """One kill event under `runtime.workers`: engine `number % workers` (SIGKILL) and the decode
    worker of a camera of the next engine (SIGKILL), at the same moment. What was killed, as a dict."""
    found = roles(proc_pid)
    by_index, unknown = {}, []
    for pid in found["engines"]:
        index = engine_index(pid)
        if index is None:
            unknown.append(pid)
        else:
            by_index[index] = pid
    for index in range(workers):  # an engine whose socket cannot be read: the index left over
        if index not in by_index and unknown:
            by_index[index] = unknown.pop(0)
    parents = _parents()
    target = number % workers
    event: dict = {"t_wall": time.time(), "engine": target, "engine_pid": by_index.get(target),
                   "engines_found": {str(k): v for k, v in by_index.items()},
                   "engine_streams": engine_streams.get(target, []), "worker_pid": None, "worker_camera": None}
    # the decode worker: a child of the forkserver of another engine, preferring the next one
    for offset in range(1, workers):
        other = (target + offset) % workers
        pid = by_index.get(other)
        if pid is None:
            continue
        tree = set(process_tree(pid, parents))
        mine = [w for w in found["decode"] if w in tree]
        if mine:
            cameras = [s for s in engine_streams.get(other, []) if s.startswith("cam")]
            event.update(worker_pid=mine[0], worker_engine=other,
                         worker_camera=cameras[0] if len(cameras) == 1 else ", ".join(cameras) or None)
            break
    if event["engine_pid"] is not None:
        event["engine_killed"] = _kill(event["engine_pid"])
    if event["worker_pid"] is not None:
        event["worker_killed"] = _kill(event["worker_pid"])
    return event


# ------------------------------------------------------------------------------ accuracy, after the run

def reference_of(pipeline: Path):
    """The detector of the run's pipeline on every frame of the clip (cached as `streamlens bench`
    caches it), and the clip's frame rate."""
    from streamlens.bench.probe import video_info
    from streamlens.bench.reference import reference_for
    from streamlens.config import load_pipeline

    config = load_pipeline(pipeline, env={**os.environ, "SOAK_PASSWORD": "not-for-logs"})
    clip = HIGHWAY if HIGHWAY.is_file() else SAMPLE
    return reference_for(config.detector, str(clip)), (video_info(str(clip))["fps"] or 30.0)


def score_messages(sub: Subscriber, ref, fps: float) -> dict[str, dict[str, np.ndarray]]:
    """Per stream and received message: true positives, boxes delivered and reference boxes (see
    `streamlens.bench.accuracy`), -1 where the clip frame is unknown; and the clip-frame fit of
    each camera."""
    from bench_cameras import clip_frames_of_camera

    from streamlens.bench.accuracy import clip_frames, match_frame

    out = {}
    for name, r in sub.records.items():
        if name.startswith("cam"):
            clips, fit = clip_frames_of_camera(r["pts"], r["det"], r["frame"], r["boxes"], ref, fps)
        else:
            clips, fit = clip_frames(r["pts"], ref.pts), None
        tp, shown, wanted = (np.full(len(clips), -1, np.int64) for _ in range(3))
        for i, (c, rows) in enumerate(zip(clips, r["boxes"])):
            if c < 0:
                continue
            tp[i] = len(match_frame(rows[:, :4], rows[:, 4].astype(np.int64), ref.boxes(c), ref.classes(c)))
            shown[i], wanted[i] = len(rows), len(ref.boxes(c))
        out[name] = {"tp": tp, "shown": shown, "wanted": wanted, "fit": fit}
    return out


def f1_of(scores: dict, sub: Subscriber, start: float, end: float, names=None) -> float | None:
    """F1 of the messages received in [start, end) (wall clock), pooled over `names` (all streams)."""
    tp = shown = wanted = 0
    for name, s in scores.items():
        if names is not None and name not in names:
            continue
        recv = np.asarray(sub.records[name]["recv"])
        inside = (recv >= start) & (recv < end) & (s["tp"] >= 0)
        tp += int(s["tp"][inside].sum())
        shown += int(s["shown"][inside].sum())
        wanted += int(s["wanted"][inside].sum())
    return round(2 * tp / (shown + wanted), 4) if shown + wanted else None


def kept_of(sub: Subscriber, start: float, end: float) -> float | None:
    """Frames received in [start, end) over the span of each stream's `frame` index there, pooled
    (an index that goes back, a restarted engine's stream, starts a new span)."""
    got = span = 0
    for r in sub.records.values():
        recv = np.asarray(r["recv"])
        frames = np.asarray(r["frame"])[(recv >= start) & (recv < end)]
        if not len(frames):
            continue
        pieces = np.split(frames, np.flatnonzero(np.diff(frames) <= 0) + 1)
        got += len(frames)
        span += sum(int(p[-1] - p[0] + 1) for p in pieces)
    return round(got / span, 4) if span else None


def behind_camera(sub: Subscriber, fps: float) -> dict[str, np.ndarray]:
    """Per camera and message, ms by which decoding was behind the camera's own clock: `ts - pts`
    over its smallest value in the connection (tools/bench_cameras.py: latency counts from `ts`, the
    decode, so it cannot show a backlog in front of the decoder)."""
    from bench_cameras import connections

    out = {}
    for name, r in sub.records.items():
        if not name.startswith("cam"):
            continue
        values = np.full(len(r["ts"]), np.nan)
        for first, stop in connections(r["pts"], r["frame"], fps):
            lag = np.asarray([np.nan if p is None else t - p for t, p in zip(r["ts"][first:stop], r["pts"][first:stop])])
            if np.isfinite(lag).any():
                values[first:stop] = (lag - np.nanmin(lag)) * 1000.0
        out[name] = values
    return out


def behind_of(sub: Subscriber, behind: dict[str, np.ndarray], start: float, end: float) -> float | None:
    """p95 (nearest rank) of the cameras' decoding behind their clock, messages received in [start, end)."""
    values = []
    for name, v in behind.items():
        recv = np.asarray(sub.records[name]["recv"])
        values += [x for x in v[(recv >= start) & (recv < end)] if np.isfinite(x)]
    if not values:
        return None
    values.sort()
    return round(float(values[min(len(values) - 1, int(0.95 * len(values)))]), 1)


# ------------------------------------------------------------------------------ the run

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--workers", type=int, default=1,
                        help="runtime.workers (1: one engine, decode workers killed; 2 or more: engines and "
                             "decode workers killed)")
    parser.add_argument("--streams", type=int, default=None, help="streams in all (default 6; with --workers: 4)")
    parser.add_argument("--cameras", type=int, default=2, help="how many of the streams are RTSP cameras")
    parser.add_argument("--kill-every", type=float, default=300.0,
                        help="seconds between kill events (0: never)")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="seconds after a kill event in which a seq gap of the killed engine's streams is "
                             "expected, and which the steady-state figures leave out (default 30)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the samples (CSV; default tools/results/soak.csv, with --workers soak_workers.csv)")
    parser.add_argument("--md", type=Path, default=None,
                        help="the report (markdown; default with --workers: beside --out, soak_workers.md; "
                             "without: none, soak.md is written by hand)")
    parser.add_argument("--trial", action="store_true",
                        help="label the report a trial run (a short run that shows the tool works)")
    args = parser.parse_args()
    if args.streams is None:
        args.streams = 6 if args.workers == 1 else 4
    if args.out is None:
        args.out = RESULTS / ("soak.csv" if args.workers == 1 else "soak_workers.csv")
    if args.md is None and args.workers > 1:
        args.md = args.out.with_suffix(".md")
    reason = gst_missing() if args.cameras else None
    if reason:
        print(f"soak: {reason}", file=sys.stderr)
        return 2
    began = datetime.now(timezone.utc)
    uptime_start = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="streamlens-soak-"))
    clip = HIGHWAY if HIGHWAY.is_file() else SAMPLE
    names = source_names(args.streams, args.cameras)
    media = {name: clip for name in names if name.startswith("cam")}
    http_port, zmq_port = free_port(), free_port()
    engine_streams = {e: [n for j, n in enumerate(names) if j % args.workers == e] for e in range(args.workers)}
    with GstRtspServer(media, work) if media else _Nothing() as server:
        urls = [server.url(name, "soak:${SOAK_PASSWORD}") for name in media]
        pipeline = work / "pipeline.yaml"
        pipeline.write_text(pipeline_yaml(args.streams - args.cameras, urls, http_port, zmq_port, args.workers))
        stderr = work / "stderr.txt"
        proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(pipeline)], cwd=work,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(stderr, "wb"),
                                env={**os.environ, "SOAK_PASSWORD": "not-for-logs"})
        sub = Subscriber(f"tcp://127.0.0.1:{zmq_port}")
        sub.start()
        rows: list[dict] = []
        events: list[dict] = []
        started = time.monotonic()
        started_wall = time.time()
        next_kill = args.kill_every or float("inf")
        kills, before = 0, {}
        seen: dict[int, str | None] = {}  # every process of the run seen, with its start time
        print(f"soak: {work}, pipeline pid {proc.pid}, {args.workers} engine(s), streams {names}, "
              f"{args.minutes} min", flush=True)
        print(f"{'t_s':>6} {'rss_mb':>8} {'pss_mb':>8} {'fds':>5} {'procs':>5} {'shm':>4} {'within':>7} "
              f"{'p95_ms':>7} {'sub_p95':>7} {'kills':>5}  received", flush=True)
        try:
            while (elapsed := time.monotonic() - started) < args.minutes * 60:
                if proc.poll() is not None:
                    print(f"soak: the pipeline exited ({proc.returncode})", file=sys.stderr)
                    break
                killed = ""
                if elapsed >= next_kill and (media or args.workers > 1):
                    if args.workers > 1:
                        event = kill_event(proc.pid, kills, args.workers, engine_streams)
                        event["t_s"] = round(elapsed, 1)
                        events.append(event)
                        kills += 1
                        killed = (f"engine {event['engine']} pid {event['engine_pid']}; decode worker pid "
                                  f"{event['worker_pid']} ({event['worker_camera']})")
                    else:
                        workers = _decode_workers(proc.pid)
                        if workers:
                            victim = workers[kills % len(workers)]
                            os.kill(victim, signal.SIGKILL)
                            events.append({"t_s": round(elapsed, 1), "t_wall": time.time(), "engine": None,
                                           "engine_pid": None, "engine_streams": [], "worker_pid": victim,
                                           "worker_camera": None})
                            kills += 1
                            killed = f"decode worker pid {victim}"
                    next_kill += args.kill_every
                found = roles(proc.pid)
                pids = [p for group in found.values() for p in group]
                for p in pids:
                    seen.setdefault(p, _start_time(p))
                try:
                    text = _scrape(http_port)
                except OSError:
                    text = ""
                now = _latency_buckets(text) if text else before
                within, p95 = window_figures(before, now) if before else (None, None)
                before = now
                latency = sorted(sub.take_window())
                count, size, orphans = shm_entries(set(seen))
                row = {"t_s": round(elapsed, 1),
                       "rss_mb": round(sum(status_kb(p, "status", "VmRSS:") for p in pids) / 1024, 1),
                       "pss_mb": round(sum(status_kb(p, "smaps_rollup", "Pss:") for p in pids) / 1024, 1),
                       "main_mb": round(status_kb(proc.pid, "status", "VmRSS:") / 1024, 1),
                       "procs": len(pids), "engines": len(found["engines"]), "forkservers": len(found["forkservers"]),
                       "decode_workers": len(found["decode"]), "trackers": len(found["trackers"]),
                       "fds": sum(map(open_fds, pids)), "shm_entries": count, "shm_mb": round(size / 2**20, 2),
                       "shm_orphans": orphans,
                       "within_budget": None if within is None else round(within, 4),
                       "p95_ms": None if p95 is None else round(p95, 1),
                       "sub_p95_ms": round(latency[min(len(latency) - 1, int(0.95 * len(latency)))], 1)
                       if latency else None,
                       "kept": None, "cam_behind_p95_ms": None, "f1": None,
                       "engine_restarts": int(sum(float(v) for _, v in _RESTARTS.findall(text))) if text else None,
                       "kills": kills, "killed": killed,
                       "received": sum(sub.received.values()), "seq_gaps": len(sub.gaps),
                       "wall": time.time()}
                rows.append(row)
                print(f"{row['t_s']:>6} {row['rss_mb']:>8} {row['pss_mb']:>8} {row['fds']:>5} {row['procs']:>5} "
                      f"{count:>4} {'' if within is None else f'{within:.3f}':>7} "
                      f"{'' if p95 is None else f'{p95:.1f}':>7} {_cell(row['sub_p95_ms']):>7} "
                      f"{kills:>5}  {row['received']}{' killed ' + killed if killed else ''}", flush=True)
                time.sleep(max(0.0, args.every - (time.monotonic() - started - elapsed)))
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            sub.stop.set()
            sub.join(5)
    leftover: list = []
    for _ in range(10):  # the resource trackers of killed engines end once their last holder has
        time.sleep(0.5)
        leftover = [p for p, born in seen.items() if born is not None and _start_time(p) == born]
        if not leftover:
            break
    leftover = [f"{p}: {_command(p)}" for p in leftover]
    shm_after = shm_entries(set(seen))
    err = stderr.read_text(errors="replace")
    clip_fps = 30.0
    try:
        from streamlens.bench.probe import video_info

        clip_fps = video_info(str(clip))["fps"] or clip_fps
    except Exception:  # noqa: BLE001 - the clip's rate unreadable: 30 fps, the shared clip's
        pass
    behind = behind_camera(sub, clip_fps)
    for i, row in enumerate(rows):  # kept, decode lag and F1 per window, now that the run is over
        start = rows[i - 1]["wall"] if i else started_wall
        row["kept"] = kept_of(sub, start, row["wall"])
        row["cam_behind_p95_ms"] = behind_of(sub, behind, start, row["wall"])
    scores, fits = {}, {}
    try:
        ref, fps = reference_of(pipeline)
        scores = score_messages(sub, ref, fps)
        fits = {name: s["fit"] for name, s in scores.items() if s["fit"] is not None}
        for i, row in enumerate(rows):
            row["f1"] = f1_of(scores, sub, rows[i - 1]["wall"] if i else started_wall, row["wall"])
    except Exception as e:  # noqa: BLE001 - no reference, no F1: the soak's other figures stand
        print(f"soak: no F1: {type(e).__name__}: {e}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        fields = [k for k in rows[0] if k != "wall"] if rows else ["t_s"]
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    attribute(events, err)
    summary = judge(rows, events, sub, scores, args, started_wall)
    summary.update(exit_code=proc.returncode, password_in_stderr="not-for-logs" in err,
                   traceback_in_stderr="Traceback" in err, shm_after=shm_after,
                   python_warnings=[ln.strip() for ln in err.splitlines() if "Warning:" in ln],
                   leftover_processes=leftover, restart_lines=[ln for ln in err.splitlines() if "restarting it in" in ln],
                   clip_fits=fits, names=names, engine_streams=engine_streams, engine_of=sub.engine_of)
    print_summary(summary)
    if args.md is not None:
        write_report(args, summary, rows, events, began, uptime_start, pipeline)
        print(f"soak: report in {args.md}")
    print(f"soak: samples in {args.out}; the run's stderr in {stderr}")
    return 0


def _cell(value, spec: str = ".1f") -> str:
    return "" if value is None else format(value, spec)


# ------------------------------------------------------------------------------ judging and reporting

_DIED = re.compile(r"engine (\d+) \(([^)]*)\) died \(killed by signal 9\)")
_WORKER_KILLED = re.compile(r"streamlens\.sources(?: \[engine (\d+)\])?: (\w+): [^\n]*"
                            r"\(decode worker ended \(killed by SIGKILL\)\)")


def attribute(events: list[dict], err: str) -> None:
    """What the run itself said each kill hit, from its log, in order: the k-th engine that "died
    (killed by signal 9)" is the k-th engine killed, the k-th camera whose "decode worker ended
    (killed by SIGKILL)" the k-th decode worker killed (`logged_*`); the streams a kill hit
    (`engine_streams`, `worker_camera`) are taken from there where the log names them."""
    died = _DIED.findall(err)
    lost = _WORKER_KILLED.findall(err)
    engines = [e for e in events if e.get("engine_killed")]
    workers = [e for e in events if e.get("worker_killed") or (e.get("engine") is None and e.get("worker_pid"))]
    for e, (index, streams) in zip(engines, died):
        e["logged_engine"] = int(index)
        e["logged_engine_streams"] = [n.strip() for n in streams.split(",")]
        e["engine_streams"] = e["logged_engine_streams"]
    for e, (index, camera) in zip(workers, lost):
        e["logged_worker_camera"] = camera
    for e in events:
        intended, logged = e.get("worker_camera"), e.get("logged_worker_camera")
        engine_ok = e.get("engine") is None or e.get("logged_engine") == e.get("engine")
        camera_ok = e.get("worker_pid") is None or (logged is not None and intended in (None, logged))
        e["matches_log"] = engine_ok and camera_ok
        e["worker_camera"] = logged if logged is not None else intended


def _settled(row: dict, events: list[dict], settle: float) -> bool:
    """Whether the sample was taken outside the `settle` seconds after every kill event."""
    return not any(0 <= row["t_s"] - e["t_s"] < settle for e in events)


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def judge(rows: list[dict], events: list[dict], sub: Subscriber, scores: dict, args, started_wall: float) -> dict:
    """The soak's figures and verdicts (see the module docs)."""
    after = [r for r in rows if r["t_s"] >= 60]
    steady = [r for r in after if _settled(r, events, args.settle)]
    out: dict = {"samples": len(rows), "samples_after_first_minute": len(after), "steady_samples": len(steady),
                 "kills": len(events)}
    if steady:
        first5 = [r for r in steady if r["t_s"] < steady[0]["t_s"] + 300]
        last5 = [r for r in steady if r["t_s"] > steady[-1]["t_s"] - 300]
        for key in ("rss_mb", "pss_mb"):
            a, b = _median([r[key] for r in first5]), _median([r[key] for r in last5])
            t = np.asarray([r["t_s"] for r in steady], float)
            v = np.asarray([r[key] for r in steady], float)
            slope = float(np.polyfit(t, v, 1)[0]) * 3600 if len(steady) > 2 and np.ptp(t) > 0 else None
            out[key] = {"first": steady[0][key], "last": steady[-1][key], "first5_median": a, "last5_median": b,
                        "growth_pct": round(100 * (b - a) / a, 2) if a else None,
                        "slope_mb_per_hour": None if slope is None else round(slope, 1),
                        "peak": max(r[key] for r in after), "min": min(r[key] for r in after)}
        for key in ("fds", "procs", "shm_entries", "shm_mb", "shm_orphans", "decode_workers", "engines"):
            values = [r[key] for r in steady]
            out[key] = {"first": steady[0][key], "last": steady[-1][key], "min": min(values), "max": max(values),
                        "first5_median": _median([r[key] for r in first5]),
                        "last5_median": _median([r[key] for r in last5]),
                        "all_after_first_minute": [min(r[key] for r in after), max(r[key] for r in after)]}
        windows = [r for r in steady if r["sub_p95_ms"] is not None]
        out["latency"] = {"sub_p95_median": _median([r["sub_p95_ms"] for r in windows]),
                          "sub_p95_max": max((r["sub_p95_ms"] for r in windows), default=None),
                          "windows": len(windows),
                          "windows_over_budget": [r["t_s"] for r in windows if r["sub_p95_ms"] > BUDGET_MS],
                          "within_budget_median": _median([r["within_budget"] for r in steady])}
        out["kept"] = {"median": _median([r["kept"] for r in steady]), "min": min((r["kept"] for r in steady
                                                                                  if r["kept"] is not None), default=None)}
        out["behind"] = {"median": _median([r["cam_behind_p95_ms"] for r in steady]),
                         "max": max((r["cam_behind_p95_ms"] for r in steady if r["cam_behind_p95_ms"] is not None),
                                    default=None)}
        out["f1"] = {"median_window": _median([r["f1"] for r in steady]),
                     "min_window": min((r["f1"] for r in steady if r["f1"] is not None), default=None)}
    if scores:
        first_minute = started_wall + 60
        out["f1_per_stream"] = {name: f1_of(scores, sub, first_minute, float("inf"), [name]) for name in scores}
        out["f1_all"] = f1_of(scores, sub, first_minute, float("inf"))
    # seq gaps: each explained by a kill event of the engine that carries its stream, or not
    gaps = []
    for at, name, last, new in sub.gaps:
        since = [e for e in events if 0 <= at - e["t_wall"] < args.settle]
        hit = [e for e in since if name in e.get("engine_streams", []) or name == e.get("worker_camera")]
        gaps.append({"t_s": round(at - started_wall, 1), "stream": name, "last_seq": last, "seq": new,
                     "missing": new - last - 1, "after_kill_s": round(at - since[-1]["t_wall"], 1) if since else None,
                     "explained": bool(hit), "repeat": new <= last})
    out["seq_gaps"] = gaps
    # per event: the longest each stream went without a message in the `settle` s after it
    for e in events:
        pauses = {}
        for name, r in sub.records.items():
            recv = np.asarray(r["recv"])
            after_kill = recv[(recv > e["t_wall"]) & (recv <= e["t_wall"] + args.settle)]
            if not len(after_kill):
                pauses[name] = None  # none at all: longer than `settle`
            else:
                pauses[name] = round(float(np.diff(np.concatenate([[e["t_wall"]], after_kill])).max()), 2)
        e["longest_pause_s"] = pauses
    out["events"] = events
    out["received"] = sub.received
    out["gaps_unexplained"] = sum(not g["explained"] for g in gaps)
    return out


def print_summary(s: dict) -> None:
    print("soak: " + json.dumps({k: v for k, v in s.items() if k not in ("events", "clip_fits", "seq_gaps")},
                                default=str))
    for g in s["seq_gaps"]:
        print(f"soak: seq gap {g}")


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**pass**" if ok else "**FAIL**")


def write_report(args, s: dict, rows: list[dict], events: list[dict], began: datetime, uptime_start: str,
                 pipeline: Path) -> None:
    from streamlens.bench.harness import versions

    v = versions()
    command = command_line()
    uptime_end = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    model = "YOLOX-Nano (../shared/data)" if (YOLOX / "yolox_nano.onnx").is_file() else "the motion detector"
    clip = HIGHWAY if HIGHWAY.is_file() else SAMPLE
    victims = "an engine and a decode worker" if args.workers > 1 else "a camera's decode worker"
    lines = [f"# Soak: `runtime.workers: {args.workers}`, {args.cameras} RTSP cameras + {args.streams - args.cameras} "
             f"live files, {model}, {victims} killed every {args.kill_every:g} s", ""]
    if args.trial:
        lines += [f"**TRIAL RUN ({args.minutes:g} min, kills every {args.kill_every:g} s) to show that the tool works, "
                  "on a machine shared with another engineer's benchmarks (see the load): not the target's "
                  "30-minute measurement, which replaces it.**", ""]
    lines += [f"**Command**: `{command}`", "",
              f"**Date**: {began.strftime('%Y-%m-%d %H:%M')} to {datetime.now(timezone.utc).strftime('%H:%M')} UTC. "
              f"**Load** (`uptime`): at the start `{uptime_start}`; at the end `{uptime_end}`.", "",
              f"**Machine**: {machine_line()}, {platform.system()} {platform.release()}; Python {v.get('python')}, PyAV {v.get('av')}, numpy {v.get('numpy')}, onnxruntime "
              f"{v.get('onnxruntime')}.", "",
              f"**What ran**: `streamlens run` with `runtime.workers: {args.workers}`: "
              + "; ".join(f"engine {e}: {', '.join(n)}" for e, n in s["engine_streams"].items())
              + f" (the engines' own `stats` said {s['engine_of']}). Every stream plays `{clip.name}` (cameras from "
              "GStreamer's RTSP server on 127.0.0.1, each fed by an `ffmpeg -re -stream_loop -1` publisher; files "
              "`live: true, loop: true`); adaptive keyframes (interval 5, up to 15), the `mv` tracker, a ZeroMQ "
              f"publisher and a SUB subscriber in the soak's process. Samples every {args.every:g} s over the whole "
              "process tree. A kill event: "
              + ("one engine (SIGKILL, in turn) and, at the same moment, the decode worker of a camera of another "
                 "engine (SIGKILL)" if args.workers > 1 else "one camera's decode worker (SIGKILL, in turn)")
              + f". Steady-state figures leave out the first minute and the {args.settle:g} s after each kill event.",
              ""]
    rss, pss, fds, shm = s.get("rss_mb"), s.get("pss_mb"), s.get("fds"), s.get("shm_entries")
    ok_rss = None if not rss else abs(rss["growth_pct"] or 0) < 5 and abs(pss["growth_pct"] or 0) < 5
    ok_fds = None if not fds else fds["last5_median"] <= fds["first5_median"] and fds["last"] <= fds["max"]
    ok_shm = None if not shm else (shm["last5_median"] <= shm["first5_median"]
                                   and s["shm_mb"]["last5_median"] <= s["shm_mb"]["first5_median"]
                                   and s["shm_orphans"]["max"] == 0 and s["shm_after"][0] == 0)
    ok_gaps = s["gaps_unexplained"] == 0 and not any(g["repeat"] for g in s["seq_gaps"])
    lines += ["## Verdicts", "",
              "| target | figures | verdict |", "|---|---|---|"]
    if rss:
        lines.append(f"| RSS flat (< 5% after the first minute) | sum of RSS, median of the first 5 steady minutes "
                     f"{rss['first5_median']} MB, of the last 5 {rss['last5_median']} MB ({rss['growth_pct']:+.1f}%; "
                     f"slope {_cell(rss['slope_mb_per_hour'])} MB/h; range {rss['min']} to {rss['peak']} MB after the "
                     f"first minute, kills included); PSS {pss['first5_median']} -> {pss['last5_median']} MB "
                     f"({pss['growth_pct']:+.1f}%) | {_verdict(ok_rss)} |")
        lines.append(f"| no file descriptor growth | open descriptors of the whole tree, steady samples: median of the "
                     f"first 5 minutes {fds['first5_median']}, of the last 5 {fds['last5_median']} (range {fds['min']} "
                     f"to {fds['max']}; all samples after the first minute, kills included: "
                     f"{fds['all_after_first_minute'][0]} to {fds['all_after_first_minute'][1]}) | {_verdict(ok_fds)} |")
        lines.append(f"| no /dev/shm growth | the run's `streamlens-*` entries (owned by its processes), steady "
                     f"samples: median {shm['first5_median']} first 5 minutes, {shm['last5_median']} last 5 (range "
                     f"{shm['min']} to {shm['max']}); {s['shm_mb']['first5_median']} -> {s['shm_mb']['last5_median']} "
                     f"MB; entries of a dead owner at most {s['shm_orphans']['max']} in steady samples "
                     f"(kills included: up to {s['shm_orphans']['all_after_first_minute'][1]}); left after the run "
                     f"{s['shm_after'][0]} | {_verdict(ok_shm)} |")
    lat0, kept0, behind0 = s.get("latency") or {}, s.get("kept") or {}, s.get("behind") or {}
    if lat0:
        fits = (kept0.get("min") is not None and kept0["min"] >= 0.99 and lat0["sub_p95_median"] is not None
                and lat0["sub_p95_median"] <= BUDGET_MS and (behind0.get("max") or 0.0) <= BEHIND_MS)
        lines.append(f"| the load fits (in steady windows: every frame kept, p95 within {BUDGET_MS:g} ms, cameras "
                     f"decoded within {BEHIND_MS:g} ms of their clock) | frames kept per window: median "
                     f"{_cell(kept0['median'], '.2%')}, lowest {_cell(kept0['min'], '.2%')}; p95 per window: median "
                     f"{_cell(lat0['sub_p95_median'])} ms; cameras' decoding behind their clock, p95 per window: "
                     f"median {_cell(behind0.get('median'))} ms, worst {_cell(behind0.get('max'))} ms "
                     f"| {_verdict(fits)} |")
    lines.append(f"| no `seq` gap outside the kills | {len(s['seq_gaps'])} gaps, {s['gaps_unexplained']} not within "
                 f"{args.settle:g} s after a kill of the engine carrying the stream; repeats: "
                 f"{sum(g['repeat'] for g in s['seq_gaps'])} | {_verdict(ok_gaps)} |")
    lines += ["", f"Exit code {s['exit_code']} after Ctrl-C (130 expected); traceback in stderr: "
              f"{s['traceback_in_stderr']}; Python warnings in stderr: {len(s['python_warnings'])}"
              + (f" (the first: `{s['python_warnings'][0][:200]}`)" if s["python_warnings"] else "")
              + "; the camera password (given through `${SOAK_PASSWORD}`) in stderr: "
              f"{s['password_in_stderr']}; processes of the run left 5 s after it: {len(s['leftover_processes'])}"
              + (f" ({'; '.join(s['leftover_processes'])})" if s["leftover_processes"] else "") + ".", ""]
    lat, kept, f1 = s.get("latency") or {}, s.get("kept") or {}, s.get("f1") or {}
    if lat:
        lines += ["## Delivery, speed and accuracy (steady windows)", "",
                  f"- Latency to the subscriber (receipt minus `ts`), p95 per {args.every:g} s window: median "
                  f"{_cell(lat['sub_p95_median'])} ms, worst {_cell(lat['sub_p95_max'])} ms; over {BUDGET_MS:g} ms in "
                  f"{len(lat['windows_over_budget'])} of {lat['windows']} windows"
                  + (f" (t = {lat['windows_over_budget'][:20]})" if lat["windows_over_budget"] else "")
                  + f"; share within the budget from /metrics, median {_cell(lat['within_budget_median'], '.3f')}.",
                  f"- Frames kept per window (received over the span of `frame`: shed frames take their numbers): "
                  f"median {_cell(kept['median'], '.2%')}, lowest {_cell(kept['min'], '.2%')}.",
                  f"- F1 of the received boxes against YOLOX-Nano on every frame (IoU 0.5, class-aware), per window: "
                  f"median {_cell(f1['median_window'], '.3f')}, lowest {_cell(f1['min_window'], '.3f')}; after the "
                  f"first minute, all windows: {_cell(s.get('f1_all'), '.3f')}, per stream "
                  + ", ".join(f"{k} {_cell(x, '.3f')}" for k, x in sorted((s.get('f1_per_stream') or {}).items()))
                  + ".",
                  "- Received: " + ", ".join(f"{k} {n}" for k, n in sorted(s["received"].items())) + " frame messages.",
                  ""]
    lines += ["## Kill events", "",
              "| t (s) | engine killed (pid: streams) | decode worker killed (pid: camera) | as the run logged it | "
              f"longest wait for a message per stream in the {args.settle:g} s after it (s) |", "|---|---|---|---|---|"]
    for e in events:
        pauses = ", ".join(f"{k} {'> ' + format(args.settle, 'g') if x is None else format(x, '.2f')}"
                           for k, x in sorted(e["longest_pause_s"].items()))
        lines.append(f"| {e['t_s']} | {e['engine']} ({e['engine_pid']}: {', '.join(e['engine_streams'])}) | "
                     f"{e['worker_pid']}: {e['worker_camera']} | {'yes' if e.get('matches_log') else '**no**'} | "
                     f"{pauses} |")
    lines += ["", "The supervisor's restart lines:", ""] + [f"    {ln}" for ln in s["restart_lines"]] + [""]
    lines += ["## `seq` gaps", "", "| t (s) | stream | last seq, next seq (missing) | after a kill (s) | explained (its engine or its "
              "decode worker killed) |",
              "|---|---|---|---|---|"]
    for g in s["seq_gaps"]:
        lines.append(f"| {g['t_s']} | {g['stream']} | {g['last_seq']}, {g['seq']} ({g['missing']}) | "
                     f"{_cell(g['after_kill_s'])} | {'yes' if g['explained'] else '**no**'} |")
    if not s["seq_gaps"]:
        lines.append("| - | none | | | |")
    lines += ["", "## Samples", "",
              "| t (s) | RSS MB | PSS MB | fds | processes (engines, forkservers, decode, trackers) | /dev/shm entries, MB "
              "| sub p95 ms | cameras behind, p95 ms | kept | F1 | restarts | killed |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    step = max(1, len(rows) // 40)
    for i, r in enumerate(rows):
        if i % step and not r["killed"] and i != len(rows) - 1:
            continue
        lines.append(f"| {r['t_s']} | {r['rss_mb']} | {r['pss_mb']} | {r['fds']} | {r['procs']} ({r['engines']}, "
                     f"{r['forkservers']}, {r['decode_workers']}, {r['trackers']}) | {r['shm_entries']}, {r['shm_mb']} | "
                     f"{_cell(r['sub_p95_ms'])} | {_cell(r['cam_behind_p95_ms'], '.0f')} | {_cell(r['kept'], '.3f')} | {_cell(r['f1'], '.3f')} | "
                     f"{_cell(r['engine_restarts'], 'g')} | {r['killed']} |")
    cams = s.get("clip_fits") or {}
    if cams:
        lines += ["", "Cameras' clip frames (for F1): connections found, their fitted offsets and agreement "
                  "(tools/bench_cameras.py): " + "; ".join(
                      f"{name}: " + ", ".join(f"{c['offset']} ({_cell(c['agreement'], '.2f')})" for c in fit)
                      for name, fit in sorted(cams.items())) + "."]
    lines += ["", f"Every sample: `{args.out.name}`.", ""]
    args.md.parent.mkdir(parents=True, exist_ok=True)
    args.md.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
