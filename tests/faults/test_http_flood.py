"""Slow HTTP clients against a real `streamlens run` (issue 25): 2,000 connections that each send half a
request and then a byte every few seconds, opening again whenever the server closes them, while the
run, limited to 1,024 file descriptors as a default systemd service is, carries a camera from GStreamer's
RTSP server and a paced file, and the camera's decode worker is killed. Every stream goes on, the
worker comes back, `/metrics` answers, and the run's threads and descriptors stay bounded.

Every wait is bounded; nothing compares times.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ..conftest import REPO
from ..http_flood import Flood
from ..rtsp_server import free_port
from . import test_camera_faults
from .test_camera_faults import decode_workers

SAMPLE = REPO / "samples" / "traffic.mp4"
#: the slow clients
FLOOD = 2000
#: what the run may open, as a service's default limit
RUN_NOFILE = 1024
#: GStreamer's RTSP server with the sample as `cam1` (the camera fault tests' fixture)
camera = test_camera_faults.camera


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (RUN_NOFILE, RUN_NOFILE))


def scrape(port: int) -> str:
    """`/metrics`, asked until it answers: a scrape accepted in the middle of a burst of new slow
    clients may be closed with them (at most three tries, 20 s each)."""
    for attempt in range(3):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as r:
                assert r.status == 200
                return r.read().decode()
        except (ConnectionError, urllib.error.URLError):
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def figures(pid: int) -> tuple[int, int]:
    """(threads, open file descriptors) of process `pid` now."""
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def test_slow_clients_cost_no_thread_and_the_run_survives_a_decode_worker_restart(tmp_path, camera):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FLOOD + 200:
        pytest.skip(f"this test opens {FLOOD} sockets; the hard limit on descriptors is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FLOOD + 200), hard))
    port = free_port()
    (tmp_path / "pipeline.yaml").write_text(f"""
sources:
  - {{name: cam1, uri: '{camera.url("cam1")}', transport: tcp, timeout_s: 2, stall_s: 3}}
  - {{name: cam2, uri: {SAMPLE}, live: true, loop: true, max_fps: 10}}
detector: {{backend: motion}}
keyframes: {{interval: 10}}
tracker: none
sinks: [{{type: jsonl, path: out/results.jsonl}}]
runtime: {{http: {{port: {port}}}, workers: 1}}  # one engine: the camera's decode worker is the run's child
""")
    results, stderr = tmp_path / "out" / "results.jsonl", tmp_path / "stderr.txt"
    with open(stderr, "wb") as err:
        run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "pipeline.yaml"], cwd=tmp_path,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                               start_new_session=True, preexec_fn=_limit_descriptors)

    def frames(stream: str, after: float = 0.0) -> int:
        if not results.exists():
            return 0
        text = results.read_text()
        return sum(1 for line in text[:text.rfind("\n") + 1].splitlines()
                   if (m := json.loads(line))["type"] == "frame" and m["stream"] == stream and m["ts"] > after)

    def wait_for(check, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert run.poll() is None, f"the run ended ({run.returncode}) waiting for {what}:\n{stderr.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}:\n" \
                                                f"{stderr.read_text()[-3000:]}"
            time.sleep(0.2)

    try:
        wait_for(lambda: frames("cam1") >= 30 and frames("cam2") >= 10, 60, "frames of both streams")
        assert "streamlens_frames_total" in scrape(port)
        threads_before, _ = figures(run.pid)
        with Flood(port, FLOOD) as flood:
            wait_for(lambda: flood.ticks >= 3 and flood.opened >= FLOOD, 90, "the flood's connections")
            (worker,) = decode_workers(run.pid)
            killed = time.time()
            os.kill(worker, signal.SIGKILL)
            wait_for(lambda: frames("cam1", killed + 0.5) >= 30 and frames("cam2", killed + 0.5) >= 10, 60,
                     "frames of both streams after the camera's worker was killed")
            (replacement,) = decode_workers(run.pid)
            text = scrape(port)
            threads, descriptors = figures(run.pid)
            ticks, closed = flood.ticks, flood.closed_by_server
        assert replacement != worker
        assert 'streamlens_stream_up{stream="cam1"} 1.0' in text and 'streamlens_stream_up{stream="cam2"} 1.0' in text
        assert threads <= threads_before + 16, (threads_before, threads)  # no thread per client
        assert descriptors < RUN_NOFILE - 200, descriptors  # the server's share is bounded
        assert closed > 0, ticks  # the slow clients were closed, not kept
        # and /metrics says so: connections open within the bound, those closed to keep it counted
        server = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                  if line.startswith("streamlens_http_connections")}
        assert 0 < server["streamlens_http_connections"] <= 256, server
        assert server['streamlens_http_connections_closed_total{why="over_limit"}'] > 0, server
        run.send_signal(signal.SIGINT)
        run.wait(30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    err = stderr.read_text()
    assert "cam1: stream lost (decode worker ended (killed by SIGKILL))" in err, err[-3000:]
    assert "cam1: streaming again" in err
    assert "Too many open files" not in err
    assert run.returncode == 130, err[-3000:]
