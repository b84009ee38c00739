"""What a foreign ZeroMQ peer flooding a zmq sink with subscriptions costs a run (issue 45): each
stream's frames a second before, during and after the flood, and the memory of the whole run
(supervisor and engines) before, at its peak, and 10 s after the peer has left.

The run: `streamlens run` with `runtime.workers: 2` and `--streams` copies of samples/traffic.mp4
paced as cameras (`live: true, loop: true`, 30 fps), the motion detector, keyframes every 3rd frame,
one zmq sink on 127.0.0.1, and one subscriber that behaves (all frames). The flood: a plain XSUB in a
process of its own sends `--subscriptions` distinct 200-byte subscriptions (`\\x01` + 6 digits +
193 bytes, the issue's 39 MB), stays connected `--flood-s` seconds, then leaves.

Arms, run in turns each round so that the machine's drift hits them alike:
- `plain`: no flood, this checkout;
- `flood`: the flood, this checkout;
- `flood-before` (with `--before DIR`, a checkout of the code to compare, e.g. a `git worktree` of
  the commit before the bound): the flood against that code.

Frames a second: the growth of the subscriber's count of each stream's frames over each phase
(before: the `--phase-s` seconds before the flood; during: while the peer is connected; after: the
`--phase-s` seconds from 10 s after it left). Memory: the resident set of the run's process tree.

Run: python tools/bench_zmq_flood.py [--rounds 2] [--streams 2] [--before DIR] [--out tools/results/zmq_flood.md]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

from streamlens.bench.harness import REPO, RESULTS, header, in_turns, now, write_page
from streamlens.testing.rtsp_server import free_port, tree_rss_mb

SAMPLE = REPO / "samples" / "traffic.mp4"

_FLOOD = """
import sys, time, zmq
sock = zmq.Context().socket(zmq.XSUB)
sock.connect(sys.argv[1])
for i in range(int(sys.argv[2])):
    sock.send(b"\\x01" + b"%06d" % i + b"z" * 193)
time.sleep(float(sys.argv[3]))
sock.close(linger=0)
"""


class Counter(threading.Thread):
    """The subscriber that behaves: frames received per stream."""

    def __init__(self, endpoint: str):
        super().__init__(daemon=True)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.subscribe(b"frame.")
        self.sock.connect(endpoint)
        self.frames: dict[str, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            if self.sock.poll(200):
                topic = self.sock.recv_multipart()[0].decode()
                stream = topic.split(".")[1]
                self.frames[stream] = self.frames.get(stream, 0) + 1

    def close(self) -> None:
        self.done.set()
        self.join(5)
        self.sock.close(linger=0)
        self.ctx.term()


def pipeline(folder: Path, streams: int, zport: int) -> Path:
    path = folder / "p.yaml"
    sources = "\n".join(f"  - {{name: cam{i + 1}, uri: {SAMPLE}, live: true, loop: true}}" for i in range(streams))
    path.write_text(f"""sources:
{sources}
detector: {{backend: motion}}
keyframes: {{interval: 3}}
runtime: {{workers: 2}}
sinks:
  - {{type: zmq, endpoint: "tcp://127.0.0.1:{zport}"}}
""")
    return path


def fps_over(counter: Counter, seconds: float) -> list[float]:
    start = dict(counter.frames)
    time.sleep(seconds)
    return [(counter.frames.get(s, 0) - n) / seconds for s, n in sorted(start.items())]


def trial(arm: str, args, code: Path) -> dict:
    zport = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        path = pipeline(Path(tmp), args.streams, zport)
        env = {**os.environ, "PYTHONPATH": str(code)}
        # from the code's own folder: `-m` puts the working folder first on the path
        run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(path), "--quiet"], env=env, cwd=code,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        counter = Counter(f"tcp://127.0.0.1:{zport}")
        counter.start()
        try:
            deadline = time.monotonic() + 120
            while len(counter.frames) < args.streams or min(counter.frames.values()) < 60:
                if time.monotonic() > deadline or run.poll() is not None:
                    raise SystemExit(f"{arm}: the run published no frames ({run.stderr.read()[-500:]})")
                time.sleep(0.2)
            time.sleep(3)
            before_mb = tree_rss_mb(run.pid)
            before = fps_over(counter, args.phase_s)
            flood = None
            if arm.startswith("flood"):
                flood = subprocess.Popen([sys.executable, "-c", _FLOOD, f"tcp://127.0.0.1:{zport}",
                                          str(args.subscriptions), str(args.flood_s)])
            peak = [before_mb]
            sampling = threading.Event()

            def sample() -> None:
                while not sampling.wait(0.5):
                    peak.append(tree_rss_mb(run.pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            during = fps_over(counter, args.flood_s)
            if flood is not None:
                flood.wait(60)
            time.sleep(10)
            after_mb = tree_rss_mb(run.pid)
            after = fps_over(counter, args.phase_s)
            sampling.set()
            sampler.join()
        finally:
            counter.close()
            run.send_signal(signal.SIGINT)
            try:
                _, err = run.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                run.kill()
                _, err = run.communicate()
    refused = next((line.split("refused or closed (", 1)[1].rstrip(")") for line in err.splitlines()
                    if "refused or closed (" in line), "")
    return {"arm": arm, "fps_before": before, "fps_during": during, "fps_after": after,
            "rss_before_mb": round(before_mb), "rss_peak_mb": round(max(peak)), "rss_after_mb": round(after_mb),
            "refused": refused}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--streams", type=int, default=2)
    p.add_argument("--subscriptions", type=int, default=200_000)
    p.add_argument("--flood-s", type=float, default=20.0, help="how long the peer stays connected")
    p.add_argument("--phase-s", type=float, default=10.0)
    p.add_argument("--before", type=Path, help="a checkout of the code to compare (the flood-before arm)")
    p.add_argument("--out", type=Path, default=RESULTS / "zmq_flood.md")
    args = p.parse_args()
    arms = [("plain", REPO), ("flood", REPO)] + ([("flood-before", args.before)] if args.before else [])
    rows = []

    def one(arm: tuple[str, Path], r: int) -> dict:
        row = trial(arm[0], args, arm[1])
        row["round"] = r + 1
        print(json.dumps(row), flush=True)
        rows.append(row)
        return row

    in_turns(arms, args.rounds, one)  # the order reversed every other round
    write(args, rows)


def write(args, rows: list[dict]) -> None:
    lines = [header(f"A subscription flood against a run of two engines ({now()[:10]})"),
             "Each round runs the arms in turns (reversed every other round).", "",
             "| round | arm | fps before (per stream) | during | after | MiB before | peak | 10 s after | refused |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        f = lambda v: " / ".join(f"{x:.1f}" for x in v)  # noqa: E731
        lines.append(f"| {row['round']} | {row['arm']} | {f(row['fps_before'])} | {f(row['fps_during'])} | "
                     f"{f(row['fps_after'])} | {row['rss_before_mb']} | {row['rss_peak_mb']} | {row['rss_after_mb']} | "
                     f"{row['refused'] or '-'} |")
    plain = [r for r in rows if r["arm"] == "plain"]
    flood = [r for r in rows if r["arm"] == "flood"]
    if plain and flood:
        med = lambda rs, k: statistics.median(x for r in rs for x in r[k])  # noqa: E731
        lines += ["", "Medians over rounds and streams, the flood arm against the plain arm:",
                  f"- fps during the flood: {med(flood, 'fps_during'):.1f} against {med(plain, 'fps_during'):.1f} "
                  f"({med(flood, 'fps_during') / med(plain, 'fps_during'):.2f}x)",
                  f"- fps after it: {med(flood, 'fps_after'):.1f} against {med(plain, 'fps_after'):.1f} "
                  f"({med(flood, 'fps_after') / med(plain, 'fps_after'):.2f}x)",
                  "- memory 10 s after the peer left, against before it came: "
                  + ", ".join(f"{r['rss_after_mb'] / r['rss_before_mb']:.2f}x" for r in flood)]
    write_page(args.out, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
