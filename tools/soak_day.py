"""An hour of real cameras on the default workers, with everything a user's day brings (issue 49,
point 6). Not part of CI.

    python tools/soak_day.py --minutes 60

What runs: `streamlens run` with `--cameras` (6) RTSP cameras from GStreamer's RTSP server, each
serving the shared highway clip (720p H.264, 30 fps) in a loop; the first cameras share one server,
the last two have one each, so that one camera at a time can be cut. `runtime.workers` is left
unset (auto: one engine per usable core). YOLOX-Nano on adaptive keyframes, the `mv` tracker, a
counting line with clips of its crossings, the history file, a ZeroMQ publisher with a subscriber in
this process (it drops nothing: `rcvhwm` 0), and the live page open in Debian's headless Chromium all
along. Without ../shared/data it is one line saying what is missing.

The day, in cycles of 10 minutes (`--cycle-s`; the times below scale with it) from minute 5, the
last 5 minutes left quiet:
- +0: a stream added over HTTP (`POST /api/streams`, a seventh camera from the first server);
  +2: removed (`DELETE`);
- +4: one cut camera's server killed (SIGKILL, its publisher goes on, as a camera's encoder would),
  started again 15 s later; the camera must be back within 2 s of the server's return (the time
  from the server serving again to the subscriber's first frame of that camera decoded after it);
- +7, every other cycle: one engine killed (SIGKILL); the supervisor starts it again.

Sampled every `--every` s (30) over the run's process tree (the supervisor, engines, forkservers,
decode workers, resource trackers): resident memory (RSS; USS, the pages no other process maps;
PSS, shared pages split among every process that maps them, so it moves when other programs that
map the same libraries start or end: shown, not judged), open file descriptors, processes,
`/dev/shm/streamlens-*` entries. Judged: memory at the end (median of the last 5 minutes, when
nothing happens) against memory after the warm-up (median of minutes 3 to 5, before the first
stream is added), both with the same six cameras: at most 5% more (RSS and USS);
descriptors and segments the same; every camera back within 2 s of its return; every camera
delivering at the end. Writes `--out` (tools/results/soak_day.csv) and its page
(tools/results/soak_day.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from page_screenshot import browser_missing, open_browser
from soak import open_fds, status_kb, process_tree, engine_index, roles, shm_entries

from streamlens.bench.harness import RESULTS, VIDEOS, YOLOX_NANO, command_line, header, need
from streamlens.testing.rtsp_server import GstRtspServer, free_port, gst_missing

HIGHWAY = VIDEOS / "highway_720p30.mp4"
CUT_S = 15.0
RETURN_S = 2.0
CYCLE_S = 600.0


class Subscriber(threading.Thread):
    """Counts every frame message per stream, notes `seq` gaps, the `eos` messages, and, for a
    camera whose server came back at `t`, the receipt of its first frame decoded after `t`."""

    def __init__(self, endpoint: str):
        super().__init__(name="subscriber", daemon=True)
        import zmq

        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.rcvhwm = 0
        for topic in (b"frame.", b"eos."):
            self.socket.setsockopt(zmq.SUBSCRIBE, topic)
        self.socket.setsockopt(zmq.RCVTIMEO, 500)
        self.socket.connect(endpoint)
        self.frames: dict[str, int] = {}
        self.last_seq: dict[str, int] = {}
        self.last_recv: dict[str, float] = {}
        self.gaps: list[tuple[float, str, int, int]] = []
        self.eos: dict[str, str] = {}
        self.waiting: dict[str, float] = {}
        self.returns: list[tuple[str, float, float]] = []  # (camera, server back at, seconds to its frame)
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def wait_for(self, camera: str, since: float) -> None:
        with self.lock:
            self.waiting[camera] = since

    def run(self) -> None:
        import zmq

        while not self.stop.is_set():
            try:
                topic, payload = self.socket.recv_multipart()
            except zmq.Again:
                continue
            received = time.time()
            m = json.loads(payload)
            name = m.get("stream")
            if m.get("type") == "eos":
                self.eos[name] = m.get("reason", "")
                continue
            last = self.last_seq.get(name)
            if last is not None and m["seq"] != last + 1:
                self.gaps.append((received, name, last, m["seq"]))
            self.last_seq[name] = m["seq"]
            self.frames[name] = self.frames.get(name, 0) + 1
            self.last_recv[name] = received
            with self.lock:
                since = self.waiting.get(name)
                if since is not None and m["ts"] > since:
                    self.returns.append((name, since, received - since))
                    del self.waiting[name]
        self.socket.close(0)


def pipeline_yaml(urls: dict[str, str], http_port: int, zmq_port: int) -> str:
    model = YOLOX_NANO / "yolox_nano.onnx"
    sources = "\n".join(f"  - {{name: {name}, uri: '{url}'}}" for name, url in urls.items())
    return f"""sources:
{sources}
detector: {{backend: onnx, model: '{model}', names: '{YOLOX_NANO / "coco_classes.txt"}', conf: 0.3,
           resize: bucket, threads: 1, classes: [car, truck, bus, motorbike]}}
keyframes: {{interval: 5, adaptive: true, max_interval: 15}}
tracker: {{motion: mv}}
analytics:
  lines:
    - {{name: gate, points: [[0.05, 0.6], [0.95, 0.6]], classes: [car, truck, bus]}}
  clips: {{events: [line_cross], pre_s: 2, post_s: 2, path: clips, retain: {{max_gb: 2}}}}
runtime:
  http: {{port: {http_port}}}
  history: {{path: history.db}}
sinks:
  - {{type: zmq, endpoint: "tcp://127.0.0.1:{zmq_port}"}}
"""


def api(port: int, method: str, path: str, body: dict | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:  # not listening (yet, or any more)
        return 0


def schedule(minutes: float, cycle_s: float = CYCLE_S) -> list[tuple[float, str, int]]:
    """(second, what, cycle number) of the day's events: cycles from minute 5 while the last 5
    minutes stay quiet; an engine killed in every other cycle (in the only one, if one)."""
    starts = []
    while 300.0 + (len(starts) + 1) * cycle_s <= minutes * 60 - 300.0:
        starts.append(300.0 + len(starts) * cycle_s)
    out = []
    for n, start in enumerate(starts):
        out += [(start, "add", n), (start + 0.2 * cycle_s, "remove", n), (start + 0.4 * cycle_s, "cut", n),
                (start + 0.4 * cycle_s + CUT_S, "restore", n)]
        if n % 2 == (1 if len(starts) > 1 else 0):
            out.append((start + 0.7 * cycle_s, "kill_engine", n))
    return sorted(out)


def sample(root: int) -> dict:
    found = roles(root)
    pids = [p for pids in found.values() for p in pids]

    def mb(which, key="VmRSS:", path="status"):
        return round(sum(status_kb(p, path, key) for p in which) / 1024, 1)

    count, size, orphans = shm_entries(set(process_tree(root)))
    return {"rss_mb": mb(pids), "pss_mb": mb(pids, "Pss:", "smaps_rollup"),
            "uss_mb": round(mb(pids, "Private_Clean:", "smaps_rollup") + mb(pids, "Private_Dirty:", "smaps_rollup"), 1),
            "main_mb": mb(found["main"]),
            "engines_mb": mb(found["engines"]), "forkservers_mb": mb(found["forkservers"]),
            "decode_mb": mb(found["decode"]), "procs": len(pids), "engines": len(found["engines"]),
            "decode_workers": len(found["decode"]), "fds": sum(map(open_fds, pids)), "shm_entries": count,
            "shm_mb": round(size / 2**20, 1), "shm_orphans": orphans}


def kill_engine(root: int, number: int) -> str:
    """SIGKILL engine `number % engines`; what was killed, in words."""
    engines = roles(root)["engines"]
    if not engines:
        return "no engine process (one engine: nothing to kill)"
    by_index = {engine_index(pid): pid for pid in engines}
    pid = by_index.get(number % len(engines)) or engines[number % len(engines)]
    try:
        os.kill(pid, signal.SIGKILL)
        return f"engine {number % len(engines)} (pid {pid})"
    except ProcessLookupError:
        return f"engine pid {pid} already gone"


def median(rows: list[dict], key: str, start: float, end: float) -> float | None:
    values = [r[key] for r in rows if start <= r["t_s"] < end and r[key] is not None]
    return round(statistics.median(values), 1) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--cameras", type=int, default=6)
    parser.add_argument("--cycle-s", type=float, default=CYCLE_S, help="seconds between the starts of two cycles")
    parser.add_argument("--no-browser", action="store_true", help="leave the live page closed")
    parser.add_argument("--out", type=Path, default=RESULTS / "soak_day.csv")
    parser.add_argument("--md", type=Path, default=RESULTS / "soak_day.md")
    args = parser.parse_args()
    need(HIGHWAY, YOLOX_NANO / "yolox_nano.onnx")
    missing = gst_missing() or (None if args.no_browser else browser_missing())
    if missing:
        print(f"soak_day: {missing}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="soak-day-"))
    cut = [f"cam{i}" for i in range(args.cameras - 1, args.cameras + 1)]
    shared = [f"cam{i}" for i in range(1, args.cameras - 1)]
    servers = {"shared": GstRtspServer({name: HIGHWAY for name in shared}, work / "server-shared")}
    servers.update({name: GstRtspServer({name: HIGHWAY}, work / f"server-{name}") for name in cut})
    for server in servers.values():
        server.folder.mkdir(parents=True)
        server.start()
    urls = {name: servers["shared"].url(name) for name in shared} | {name: servers[name].url(name) for name in cut}
    http_port, zmq_port = free_port(), free_port()
    (work / "pipeline.yaml").write_text(pipeline_yaml(urls, http_port, zmq_port))
    stderr = work / "stderr.log"
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(work / "pipeline.yaml")], cwd=work,
                            stdout=subprocess.DEVNULL, stderr=stderr.open("w"))
    sub = Subscriber(f"tcp://127.0.0.1:{zmq_port}")
    sub.start()
    events = schedule(args.minutes, args.cycle_s)
    halted = threading.Event()  # Ctrl-C or SIGTERM: the day ends early, its figures are still written
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: halted.set())
    log: list[dict] = []
    rows: list[dict] = []
    driver = None
    started = time.time()
    try:
        while api(http_port, "GET", "/api/streams") != 200:
            if proc.poll() is not None or time.time() - started > 120:
                raise RuntimeError(f"the run did not start: see {stderr}")
            time.sleep(1)
        if not args.no_browser:
            driver = open_browser()
            driver.get(f"http://127.0.0.1:{http_port}/")
        next_sample = started
        while time.time() - started < args.minutes * 60 and not halted.is_set():
            now = time.time() - started
            while events and events[0][0] <= now:
                t, what, n = events.pop(0)
                entry = {"t_s": round(now, 1), "what": what, "cycle": n}
                name = f"added{n}"
                camera = cut[n % len(cut)]
                if what == "add":
                    entry["status"] = api(http_port, "POST", "/api/streams", {"name": name, "uri": urls[shared[0]]})
                    entry["stream"] = name
                elif what == "remove":
                    entry["status"] = api(http_port, "DELETE", f"/api/streams/{name}")
                    entry["stream"] = name
                    entry["frames"] = sub.frames.get(name, 0)
                elif what == "cut":
                    servers[camera].kill()
                    entry["camera"] = camera
                elif what == "restore":
                    servers[camera].restart()
                    sub.wait_for(camera, servers[camera].ready_at)
                    entry["camera"] = camera
                    entry["silent_s"] = round(servers[camera].ready_at - sub.last_recv.get(camera, 0.0), 1)
                elif what == "kill_engine":
                    entry["killed"] = kill_engine(proc.pid, n // 2)
                log.append(entry)
                print(json.dumps(entry), flush=True)
            if time.time() >= next_sample:
                row = {"t_s": round(time.time() - started, 1), **sample(proc.pid),
                       "frames": sum(sub.frames.values()), "seq_gaps": len(sub.gaps),
                       "page": None if driver is None else bool(driver.execute_script(
                           "return !!(window.streamlens && window.streamlens.ready)"))}
                rows.append(row)
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                next_sample += args.every
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended by itself ({proc.returncode}): see {stderr}")
            time.sleep(0.5)
        ended = time.time()
        delivering = {name: round(ended - sub.last_recv.get(name, 0.0), 1) for name in urls}
    finally:
        if driver is not None:
            driver.quit()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        sub.stop.set()
        sub.join(5)
        for server in servers.values():
            server.close()
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    report(args, rows, log, sub, delivering, proc.returncode, stderr.read_text(errors="replace"), work)
    return 0


def report(args, rows, log, sub, delivering, code, err, work) -> None:
    end = args.minutes * 60
    keys = ("rss_mb", "uss_mb", "pss_mb", "engines_mb", "decode_mb", "main_mb", "fds", "shm_entries")
    warm = {k: median(rows, k, 180, 300) for k in keys if k in rows[0]}
    last = {k: median(rows, k, end - 300, end + 1) for k in warm}
    growth = {k: None if not warm[k] or last[k] is None else round(100 * (last[k] - warm[k]) / warm[k], 1) for k in warm}
    returns = [(name, round(s, 2)) for name, _, s in sub.returns]
    restores = [e for e in log if e["what"] == "restore"]
    verdicts = {
        "memory at the end at most 5% over memory after the warm-up (RSS, and USS where sampled)":
            growth["rss_mb"] is not None and growth["rss_mb"] <= 5 and (growth.get("uss_mb") or 0) <= 5,
        "descriptors flat": warm["fds"] is not None and last["fds"] is not None and last["fds"] <= warm["fds"],
        "/dev/shm segments flat": last["shm_entries"] is not None and last["shm_entries"] <= (warm["shm_entries"] or 0),
        "every camera back within 2 s of its return": len(returns) == len(restores)
            and all(s <= RETURN_S for _, s in returns),
        "every camera delivering at the end": all(v < 5 for v in delivering.values()),
    }
    lines = [header("A day on the final code: six RTSP cameras, the default workers, an hour of faults",
                    command=command_line()),
             "", f"Run folder: {work} (exit code {code} after SIGINT).", "",
             "## Verdicts", ""] + [f"- {'PASS' if ok else 'FAIL'}: {what}" for what, ok in verdicts.items()]
    lines += ["", "## Memory and descriptors: after the warm-up (median of minutes 3-5) and at the end "
              "(median of the last 5 minutes)", "",
              "| | after the warm-up | at the end | change |", "|---|---|---|---|"]
    lines += [f"| {k} | {warm[k]} | {last[k]} | {growth[k]}% |" for k in warm]
    lines += ["", "## What happened", "", "| t (s) | event | details |", "|---|---|---|"]
    lines += [f"| {e['t_s']} | {e['what']} | {', '.join(f'{k}: {v}' for k, v in e.items() if k not in ('t_s', 'what'))} |"
              for e in log]
    lines += ["", f"Cameras back after their server returned (s): {returns}", "",
              f"Seconds since each camera's last frame when the run ended: {delivering}", "",
              f"Frames received: {sum(sub.frames.values())}; `seq` gaps: {len(sub.gaps)} "
              f"(the first ten, as stream, last seq, next seq: {[(s, a, b) for _, s, a, b in sub.gaps[:10]]}); "
              f"eos: {sub.eos}", ""]
    warnings = [ln for ln in err.splitlines() if "Warning" in ln or "Traceback" in ln]
    lines += [f"Warnings or tracebacks in the run's stderr: {len(warnings)}"
              + (f" (first: `{warnings[0][:200]}`)" if warnings else ""), "",
              f"Samples: {args.out.name} ({len(rows)} rows, every {args.every:g} s).", ""]
    args.md.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
