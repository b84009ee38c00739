"""Faults injected into the runtime of a running `streamlens run`: a sink stuck for ever (a pipe nobody
reads) and a second Ctrl-C, SIGTERM while the run is still starting, and a second pipeline asking
for a port the first one holds. Real processes, real sockets on 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..conftest import REPO
from ..test_pipeline_run import read_jsonl, write_pipeline

SAMPLE = REPO / "samples" / "traffic.mp4"


def _run(path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(path), *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _fifo_reader(path: Path) -> int:
    os.mkfifo(path)
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a reader that never reads


def test_a_second_ctrl_c_ends_a_run_whose_sink_is_stuck(tmp_path):
    """The JSONL sink writes into a pipe nobody reads: its write blocks for ever. Ctrl-C once
    cannot finish; Ctrl-C twice ends the process with 130 all the same."""
    fifo = tmp_path / "stuck.jsonl"
    reader = _fifo_reader(fifo)
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}, loop: true}}]
detector: {{backend: motion}}
tracker: none
runtime: {{http: {{port: 0}}}}
sinks: [{{type: jsonl, path: {fifo}}}]
""")
    try:
        proc = _run(path)
        try:
            # the pipe's buffer fills, and then the sink is stuck: wait until nothing more goes in
            size = -1
            while True:
                time.sleep(1.0)
                now = _pipe_fill(reader)
                assert proc.poll() is None, proc.communicate()
                if now == size and now > 0:
                    break
                size = now
            proc.send_signal(signal.SIGINT)
            time.sleep(0.5)
            assert proc.poll() is None  # the first Ctrl-C waits for the stuck sink
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, stderr
        assert "Traceback" not in stderr
    finally:
        os.close(reader)


def _pipe_fill(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD)."""
    import array
    import fcntl
    import termios

    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]


def test_sigterm_during_start_up_ends_cleanly(tmp_path):
    """SIGTERM while the run waits at start (a ZeroMQ sink waiting for its subscriber): exit 130,
    one line, no traceback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        zport = s.getsockname()[1]
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}}}]
detector: {{backend: motion}}
runtime: {{http: {{port: 0}}}}
sinks: [{{type: zmq, endpoint: "tcp://127.0.0.1:{zport}", wait_subscribers: 1, wait_timeout_s: 600}}]
""")
    proc = _run(path, "--debug")
    _wait_listening(zport, proc)  # the ZeroMQ socket is bound: the run waits inside its start
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr


def _wait_listening(port: int, proc: subprocess.Popen) -> None:
    while True:
        assert proc.poll() is None, proc.communicate()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)




def test_a_second_pipeline_on_a_taken_port_fails_at_start_and_the_first_goes_on(tmp_path):
    """Two pipelines ask for the same ZeroMQ port: the second ends at once with one line naming
    the port (exit 2), before it truncates anything; the first never notices."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    first_out, second_out = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    second_out.write_text('{"kept": true}\n')
    body = f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true}}]
detector: {{backend: motion}}
tracker: none
sinks: [{{type: zmq, endpoint: "tcp://127.0.0.1:{port}"}}, {{type: jsonl, path: %s}}]
"""
    first = _run(write_pipeline(tmp_path, body % first_out))
    try:
        _wait_listening(port, first)
        (tmp_path / "second").mkdir()
        second = subprocess.run([sys.executable, "-m", "streamlens", "run", str(write_pipeline(
            tmp_path / "second", body % second_out))], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert first.poll() is None, "the first pipeline ended"
        _, stderr = first.communicate(timeout=120)  # the clip is 10 s long: it ends by itself
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "sinks[0].endpoint" in lines[0] and str(port) in lines[0], second.stderr
    assert second_out.read_text() == '{"kept": true}\n'
    assert first.returncode == 0, stderr
    done = read_jsonl(first_out)
    # every frame of the clip is a message or counted by its cause (a live stream on a loaded
    # machine may shed or drop some for the budget: that is not the second pipeline's doing)
    eos = done[-1]
    assert eos["type"] == "eos" and eos["reason"] == "end" and eos["expected"] == 300
    assert eos["frames"] + sum(eos["lost"].values()) == 300 and len(done) - 1 == eos["frames"]
