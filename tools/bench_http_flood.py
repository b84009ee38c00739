"""What a flood of slow HTTP clients costs a run (issue 25): `/metrics` latency (the median of 10 probes,
each on a new connection), the engine's frames per second and the CPU the run's HTTP threads take,
without and with `--clients` slow clients (streamlens/testing/http_flood.py: half a request, then a byte every 3 s,
reconnecting when closed), side by side in alternating phases of one run, so that the machine's drift
hits both alike.

The flood runs in a process of its own at nice 19 (`--flood-nice`): an attacker is on another machine,
and its own CPU is not what the run pays for; the page gives the connections it opened per phase, to
show it kept its pace. The HTTP server's CPU (`streamlens_http_cpu_seconds_total`: its event loop and
its worker threads) is what the server itself spends.

The run: `streamlens run` held to 1,024 file descriptors, `--streams` copies of samples/traffic.mp4
read unpaced and looped (`live: false, loop: true`: the engine goes as fast as the machine lets it, so
anything the server takes from it shows as fewer frames a second), the motion detector, the Kalman
tracker, no sink. Frames a second: the growth of `streamlens_frames_total` (all streams) between the
phase's first and last scrape.

With `--stuck`, each client sends a POST head with `Content-Length: 100` and one byte of its body,
then nothing (issue 45): the scrape must still get in.

Run: python tools/bench_http_flood.py [--clients 2000] [--streams 2] [--phase-s 20] [--rounds 2] [--stuck]
     [--out tools/results/http_flood.md]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from streamlens.bench.harness import REPO, header, write_page
from streamlens.testing.http_flood import HALF_REQUEST, STUCK_BODY, Flood
from streamlens.testing.rtsp_server import free_port

SAMPLE = REPO / "samples" / "traffic.mp4"
RUN_NOFILE = 1024


def scrape(port: int) -> tuple[float, float, float]:
    """(seconds the answer took, frames published so far over every stream, CPU seconds of the HTTP server)."""
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        text = r.read().decode()
    took = time.monotonic() - started
    lines = text.splitlines()
    frames = sum(float(line.split()[-1]) for line in lines if line.startswith("streamlens_frames_total{"))
    cpu = next(float(line.split()[-1]) for line in lines if line.startswith("streamlens_http_cpu_seconds_total "))
    return took, frames, cpu


def wait_until_published(run: subprocess.Popen, port: int, least: float, timeout_s: float, tool: str) -> None:
    """Until the run on `port` has published more than `least` frames (its model loaded, its streams
    flowing); exits naming `tool` with the end of the run's stderr if it ended or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if scrape(port)[1] > least:
                return
        except OSError:
            pass
        if run.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{tool}: the run did not start: {run.stderr.read().decode()[-2000:]}")
        time.sleep(0.5)


def phase(port: int, seconds: float, probes: int = 10) -> dict:
    """`probes` scrapes spread over `seconds`: their median latency, and frames a second between
    the first and the last."""
    took, marks, failed = [], [], 0
    for i in range(probes):
        try:
            t, frames, cpu = scrape(port)
        except OSError:  # refused, closed unanswered, or no answer within 60 s: counted, as 60 s
            failed += 1
            took.append(60.0)
        else:
            took.append(t)
            marks.append((time.monotonic(), frames, cpu))
        if i < probes - 1:
            time.sleep(seconds / (probes - 1))
    (t0, f0, c0), (t1, f1, c1) = (marks[0], marks[-1]) if len(marks) > 1 else ((0, 0, 0), (1, *[float("nan")] * 2))
    return {"metrics_ms": statistics.median(took) * 1000, "metrics_max_ms": max(took) * 1000,
            "fps": (f1 - f0) / (t1 - t0), "http_cpu": (c1 - c0) / (t1 - t0), "failed": failed}


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (RUN_NOFILE, RUN_NOFILE))


#: `--pin`: the run on every core but the last; the flood and the probes (this process) on the last
CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
RUN_CORES, OUTSIDE_CORES = set(CORES[:-1]), set(CORES[-1:])


def _limit_pinned() -> None:
    _limit()
    os.sched_setaffinity(0, RUN_CORES)


def _flood(port: int, clients: int, nice: int, go, done, figures, pin: bool = False, stuck: bool = False) -> None:
    """The flood's process: `clients` slow clients from `go` to `done` (`stuck`: each a POST head and
    one byte of its body, then nothing); (opened, closed) put in `figures`."""
    os.nice(nice)
    if pin:
        os.sched_setaffinity(0, OUTSIDE_CORES)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, clients + 256)), hard))
    go.wait()
    with Flood(port, clients, first=STUCK_BODY if stuck else HALF_REQUEST, trickle=not stuck) as flood:
        while flood.ticks < 2:  # every client has connected and sent its half request
            time.sleep(0.2)
        figures.put(("ready", None))
        done.wait()
    figures.put(("done", (flood.opened, flood.closed_by_server)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=2000)
    p.add_argument("--streams", type=int, default=2)
    p.add_argument("--phase-s", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=2, help="pairs of phases (without, with)")
    p.add_argument("--flood-nice", type=int, default=19, help="the flood process's niceness")
    p.add_argument("--pin", action="store_true",
                   help="the run on every core but the last, the flood and the probes on the last: the "
                        "attacker's own CPU (on its own machine in the wild) then takes nothing from the run")
    p.add_argument("--stuck", action="store_true",
                   help="each client a POST /api/streams head (Content-Length: 100) and one byte of its body, then "
                        "nothing (issue 45's stuck bodies), instead of half a request and a byte every 3 s")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if args.pin and len(CORES) < 2:
        raise SystemExit("bench_http_flood: --pin needs at least 2 cores")
    if args.pin:
        os.sched_setaffinity(0, OUTSIDE_CORES)
    folder = Path(tempfile.mkdtemp(prefix="bench_http_flood-"))
    port = free_port()
    sources = "\n".join(f"  - {{name: s{i}, uri: {SAMPLE}, live: false, loop: true}}" for i in range(args.streams))
    (folder / "pipeline.yaml").write_text(f"sources:\n{sources}\ndetector: {{backend: motion}}\n"
                                          f"tracker: {{motion: kalman}}\nruntime: {{http: {{port: {port}}}}}\n")
    run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", "pipeline.yaml"], cwd=folder,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           start_new_session=True, preexec_fn=_limit_pinned if args.pin else _limit)
    rows = []
    try:
        wait_until_published(run, port, 100, 60, "bench_http_flood")
        for round_ in range(args.rounds):
            rows.append(("without", round_ + 1, phase(port, args.phase_s), None))
            go, done, said = multiprocessing.Event(), multiprocessing.Event(), multiprocessing.Queue()
            flood = multiprocessing.Process(target=_flood, args=(port, args.clients, args.flood_nice, go, done, said,
                                                                 args.pin, args.stuck))
            flood.start()
            go.set()
            assert said.get(timeout=120)[0] == "ready"
            figures = phase(port, args.phase_s)
            done.set()
            rows.append(("with", round_ + 1, figures, said.get(timeout=60)[1]))
            flood.join(30)
            time.sleep(5)  # the last slow clients' connections close
            print(rows[-2][:3], rows[-1][:3], file=sys.stderr)
    finally:
        os.killpg(run.pid, signal.SIGINT)
        run.wait(30)
    lines = [
        header("HTTP under stuck request bodies" if args.stuck else "HTTP under a flood of slow clients"),
        "Compare the phases of one run, not runs: on a machine shared with other work, runs differ.",
        "",
        f"A `streamlens run` held to {RUN_NOFILE} descriptors, {args.streams} copies of samples/traffic.mp4 "
        "(640x360) read unpaced and looped, motion detector, Kalman tracker; phases of "
        f"{args.phase_s:g} s without and with {args.clients} slow clients ("
        + ("a POST /api/streams head saying 100 bytes of body and one byte of it, then nothing"
           if args.stuck else "half a request, a byte every 3 s")
        + f", reconnecting when closed; a process of their own at nice {args.flood_nice}), alternating"
        + (f"; the run pinned to core(s) {sorted(RUN_CORES)}, the flood and the probes to core {sorted(OUTSIDE_CORES)}"
           if args.pin else "") + ". `/metrics`: "
        "the median (and the slowest) of 10 probes, each on a new connection (one unanswered counts as 60 s); "
        "frames a second: all streams, from `streamlens_frames_total`; HTTP CPU: the share of one core the "
        "HTTP server's threads used during the phase (`streamlens_http_cpu_seconds_total`).",
        "",
        "| phase | round | /metrics median ms | slowest ms | probes unanswered | frames a second | HTTP CPU | "
        "slow connections opened / closed by the server |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, round_, figures, flood in rows:
        lines.append(f"| {name} | {round_} | {figures['metrics_ms']:.1f} | {figures['metrics_max_ms']:.1f} | "
                     f"{figures['failed']} | {figures['fps']:.1f} | {100 * figures['http_cpu']:.1f}% | "
                     f"{'' if flood is None else f'{flood[0]} / {flood[1]}'} |")
    without = statistics.median(r[2]["fps"] for r in rows if r[0] == "without")
    with_ = statistics.median(r[2]["fps"] for r in rows if r[0] == "with")
    cpu = [statistics.median(r[2]["http_cpu"] for r in rows if r[0] == phase_) for phase_ in ("without", "with")]
    lines += ["", f"Frames a second, median of the phases: {without:.1f} without, {with_:.1f} with the flood "
              f"({with_ / without:.2f} of it). HTTP server: {100 * cpu[0]:.1f}% of a core without, "
              f"{100 * cpu[1]:.1f}% with."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_page(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
