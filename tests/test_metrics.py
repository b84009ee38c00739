"""`/metrics` and `/healthz` on a running pipeline, read over real HTTP."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request

import streamlens
from streamlens.sinks.base import Sink

from .conftest import REPO

SAMPLE = REPO / "samples" / "traffic.mp4"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@contextlib.contextmanager
def running(tmp_path, sources: str, http: str = "port: 0", sinks: list | None = None):
    """A pipeline with these sources and the HTTP server on a free port (`http`: the keys of
    `runtime.http`), running on a thread."""
    path = tmp_path / "p.yaml"
    path.write_text(f"sources:\n{sources}\ndetector: {{backend: motion}}\ntracker: none\n"
                    f"runtime: {{http: {{{http}}}}}\n")
    pipeline = streamlens.Pipeline.from_yaml(path, sinks=sinks)
    runner = threading.Thread(target=pipeline.run)
    runner.start()
    try:
        yield pipeline
    finally:
        pipeline.stop()
        runner.join(10)
    assert not runner.is_alive()


class HeldClose(Sink):
    """A sink whose `close()` waits until `release` is set: the run stays `stopping` until then."""

    name = "held"

    def __init__(self):
        self.release = threading.Event()

    def write(self, item, message, payload) -> None:
        pass

    def close(self) -> None:
        self.release.wait(30)


def test_metrics_and_health_while_a_live_stream_runs(tmp_path):
    held = HeldClose()
    with running(tmp_path, f"  - {{name: cam1, uri: {SAMPLE}, live: true}}", sinks=[held]) as pipeline:
        deadline = time.monotonic() + 10
        while (pipeline.http_port is None or pipeline.stats["cam1"].frames < 30) and time.monotonic() < deadline:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{pipeline.http_port}"
        code, body = get(base + "/healthz")
        assert code == 200 and json.loads(body) == {"state": "running", "streams": {"cam1": "running"}}
        code, text = get(base + "/metrics")
        assert code == 200
        frames = next(float(line.split()[-1]) for line in text.splitlines()
                      if line.startswith('streamlens_frames_total{stream="cam1"}'))
        assert frames >= 30
        assert 'streamlens_latency_seconds_bucket{le="0.033",stream="cam1"}' in text
        assert 'streamlens_queue_depth{stream="cam1"}' in text
        assert 'streamlens_displaced_keyframes_total{stream="cam1"} 0.0' in text  # one stream: no place to give
        # the server's own figures: this scrape's connection is open (an earlier one may not be closed yet)
        assert float(text.split("\nstreamlens_http_connections ")[1].split()[0]) >= 1
        assert 'streamlens_http_connections_closed_total{why="late"} 0.0' in text
        assert float(text.split("\nstreamlens_http_cpu_seconds_total ")[1].split()[0]) >= 0  # in 10 ms ticks
        assert get(base + "/nope")[0] == 404
        pipeline.stop()
        try:  # the run cannot end before `held` closes: the server still answers
            code, body = get(base + "/healthz")
        finally:
            held.release.set()
        assert code == 503 and json.loads(body)["state"] == "stopping"


def test_a_camera_that_refuses_shows_in_health_and_stats(tmp_path):
    """The camera's own state (backing off between refused attempts) reaches /healthz: degraded."""
    import socket

    with socket.socket() as s:  # a port nothing listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sources = (f"  - {{name: door, uri: 'rtsp://admin:pw@127.0.0.1:{port}/x', backoff_initial_s: 0.2, "
               f"backoff_max_s: 0.5}}\n  - {{name: cam1, uri: {SAMPLE}, live: true}}")
    with running(tmp_path, sources) as pipeline:
        deadline = time.monotonic() + 15
        seen = set()
        while time.monotonic() < deadline and ("backing_off" not in seen  # a refusal is instant
                                               or pipeline.stats["cam1"].state != "running"):
            seen.add(pipeline.stats["door"].state)
            time.sleep(0.01)
        assert "backing_off" in seen, seen
        code, body = get(f"http://127.0.0.1:{pipeline.http_port}/healthz")
        health = json.loads(body)
        assert code == 200 and health["state"] == "degraded" and health["streams"]["cam1"] == "running"
        assert "pw" not in body
