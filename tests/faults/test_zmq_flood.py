"""A foreign ZeroMQ peer floods a running `streamlens run` of two engines and two live streams with
200,000 distinct subscriptions (39 MB, the flood that took every stream to 2 fps and the run to
5 GB): it is cut off and counted, the run's memory stays and comes back where it was, and the
streams go on reaching the subscriber that behaves, every frame of them."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from streamlens import Subscriber
from streamlens.testing.rtsp_server import free_port, tree_rss_mb

from ..conftest import REPO
from ..test_zmq_peers import Flood, wait_until


def metric(port: int, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Counting(threading.Thread):
    """A subscriber that behaves: counts each stream's frames and the gaps in their `seq`."""

    def __init__(self, endpoint: str):
        super().__init__(daemon=True)
        self.sub = Subscriber(endpoint, ["frame."])
        self.frames: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            message = self.sub.recv(timeout=0.2)
            if message is not None:
                self.frames[message.data["stream"]] = self.frames.get(message.data["stream"], 0) + 1

    def close(self) -> None:
        self.stop.set()
        self.join(5)
        self.sub.close()


def test_a_subscription_flood_costs_a_run_of_two_engines_neither_frames_nor_memory(tmp_path: Path):
    http, zport = free_port(), free_port()
    sample = REPO / "samples" / "traffic.mp4"
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"""
sources:
  - {{name: cam1, uri: {sample}, live: true, loop: true}}
  - {{name: cam2, uri: {sample}, live: true, loop: true}}
detector: {{backend: motion}}
keyframes: {{interval: 3}}
runtime: {{workers: 2, http: {{port: {http}}}}}
sinks:
  - {{type: zmq, endpoint: "tcp://127.0.0.1:{zport}"}}
""")
    run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(pipeline), "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    endpoint = f"tcp://127.0.0.1:{zport}"
    good = Counting(endpoint)
    good.start()
    try:
        assert wait_until(lambda: len(good.frames) == 2 and min(good.frames.values()) > 50, 120), good.frames
        time.sleep(3)  # past start-up: engines, decoders and the page's history in place
        before = tree_rss_mb(run.pid)
        flood = Flood(endpoint)
        assert wait_until(lambda: metric(http, "streamlens_zmq_refused_total", reason="flood") >= 1, 60)
        during = max(tree_rss_mb(run.pid) for _ in range(20) if time.sleep(0.1) is None)
        seen = dict(good.frames)
        assert flood.leave() == "disconnected"
        # the streams go on, each of them, once the peer has gone
        assert wait_until(lambda: all(good.frames[s] > seen[s] + 50 for s in seen), 60), (seen, good.frames)
        after = tree_rss_mb(run.pid)
        assert metric(http, "streamlens_dropped_frames") == 0
        assert good.sub.missing == 0  # nothing lost on the way to the subscriber that behaves
    finally:
        good.close()
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    # without the bound the run grew by gigabytes; cut off, a flood costs at most its allowance
    assert during < before + 200, (before, during)
    assert after < before * 1.1 + 20, (before, after)
    assert run.returncode in (0, 130), err[-2000:]
    assert re.search(r"refused or closed \(.*flood 1", err), err[-2000:]
