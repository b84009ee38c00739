"""Slow HTTP clients against a real `streamlens run` (issue 25): 2,000 connections that each send half a
request and then a byte every few seconds, opening again whenever the server closes them, while the
run, limited to 1,024 file descriptors as a default systemd service is, carries a camera from GStreamer's
RTSP server and a paced file, and the camera's decode worker is killed. Every stream goes on, the
worker comes back, `/metrics` answers, and the run's threads and descriptors stay bounded.

Every wait is bounded; nothing compares times.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ..conftest import REPO
from ..rtsp_server import free_port
from . import test_camera_faults
from .test_camera_faults import decode_workers

SAMPLE = REPO / "samples" / "traffic.mp4"
#: the slow clients, and how often each sends its next byte
FLOOD, TICK_S = 2000, 3.0
#: what the run may open, as a service's default limit
RUN_NOFILE = 1024
HALF_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
#: GStreamer's RTSP server with the sample as `cam1` (the camera fault tests' fixture)
camera = test_camera_faults.camera


class Flood:
    """`n` slow clients of 127.0.0.1:`port` on a thread: each connects, sends `HALF_REQUEST`, then one
    byte every `TICK_S`; one the server closed connects again at its next turn."""

    def __init__(self, port: int, n: int):
        self.address, self.n = ("127.0.0.1", port), n
        self.opened = self.closed_by_server = self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flood", daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        sockets: list[socket.socket | None] = [None] * self.n
        started = [False] * self.n
        try:
            while not self._stop.is_set():
                for i in range(self.n):
                    s = sockets[i]
                    if s is None:
                        s = sockets[i] = socket.socket()
                        s.setblocking(False)
                        s.connect_ex(self.address)
                        started[i] = False
                        self.opened += 1
                        continue
                    try:
                        s.send(b"a" if started[i] else HALF_REQUEST)
                        started[i] = True
                    except BlockingIOError:
                        pass  # still connecting, or its buffer is full
                    except OSError as error:
                        if error.errno in (errno.ENOTCONN, errno.EINPROGRESS, errno.EALREADY):
                            continue
                        s.close()
                        sockets[i] = None
                        self.closed_by_server += 1
                self.ticks += 1
                self._stop.wait(TICK_S)
        finally:
            for s in sockets:
                if s is not None:
                    s.close()


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
runtime: {{http: {{port: {port}}}}}
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
