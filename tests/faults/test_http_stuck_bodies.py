"""The scrape always gets in (issue 45): 300 connections that each send a `POST /api/streams` head
saying `Content-Length: 100` and then one byte of body, against a real `streamlens run` over real
sockets. A request whose body has not come whole is not being answered, so the server closes the
stalest of them to make room: `/metrics` and `/healthz` answer 200 while they are held, and each
body still held is answered 408 once its deadline has passed.

Every wait is bounded; nothing compares times (the client's timeouts are generous)."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ..conftest import REPO
from ..rtsp_server import free_port

SAMPLE = REPO / "samples" / "traffic.mp4"
#: the stuck bodies, more than the server's 256 connections
STUCK = 300
HEAD = (b"POST /api/streams HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{")


def get(port: int, path: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
        answer.read()
        return answer.status


def closed_by_server(s: socket.socket) -> bool:
    """Whether the server has closed `s` (or answered on it); False while it waits (`s` non-blocking)."""
    try:
        return s.recv(1, socket.MSG_PEEK) is not None
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_stuck_request_bodies_never_keep_the_scrape_out(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < STUCK + 200:
        pytest.skip(f"this test opens {STUCK} sockets; the hard limit on descriptors is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, STUCK + 200), hard))
    port = free_port()
    (tmp_path / "p.yaml").write_text(f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true, loop: true, max_fps: 10}}]
detector: {{backend: motion}}
tracker: none
runtime: {{workers: 1, http: {{port: {port}}}}}
""")
    err = (tmp_path / "stderr.txt").open("wb")
    run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", "p.yaml"], cwd=tmp_path,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def wait_for(check, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert run.poll() is None, (tmp_path / "stderr.txt").read_text()[-3000:]
            try:
                if check():
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
            time.sleep(0.2)

    stuck: list[socket.socket] = []
    try:
        wait_for(lambda: get(port, "/healthz") == 200, "the run to be up")
        for _ in range(STUCK):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(HEAD)
            s.setblocking(False)
            stuck.append(s)
        # the server has taken every one: it holds its 256 and has closed the others to make room
        wait_for(lambda: sum(map(closed_by_server, stuck)) >= STUCK - 256, "the server to take every body")
        held = [s for s in stuck if not closed_by_server(s)]
        assert len(held) <= 256
        for _ in range(5):
            assert get(port, "/metrics") == 200
            assert get(port, "/healthz") == 200
        # a body held past its deadline is answered (408), not kept
        late = held[-1]
        late.settimeout(60)  # blocking again
        assert late.recv(64).startswith(b"HTTP/1.1 408")
        run.send_signal(signal.SIGINT)
        run.wait(60)
    finally:
        for s in stuck:
            s.close()
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        err.close()
    assert run.returncode == 130, (tmp_path / "stderr.txt").read_text()[-3000:]
