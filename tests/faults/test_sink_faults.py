"""Sinks under faults, as a user meets them: `streamlens run` in a subprocess (always with a time
limit: a hang fails the test), real subscriber processes on 127.0.0.1, a real full disk.

- a JSONL file on a disk that fills: the run ends with one line naming the path, exit 1, and the
  file holds whole JSON lines only;
- a consumer that connects and never reads, one killed mid-stream (SIGKILL), none at all: the
  pipeline goes on and ends, and what a push sink could not deliver is counted and said. (A pub
  subscriber that never reads: tests/test_zmq_fanout.py; ZeroMQ drops for it alone without telling
  the publisher, so the count is the subscriber's, from gaps in `seq`.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, streamlens, tmpfs

SAMPLE = REPO / "samples" / "traffic.mp4"
SAMPLE_FRAMES = 300
#: ZeroMQ-level waits in these pipelines, kept short so that the tests are (see the zmq sink)
SHORT = "send_timeout_s: 1, linger_ms: 500"


def free_endpoint() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def pipeline(tmp_path: Path, sink: str, source: str = "") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources: [{{name: cam1, uri: {SAMPLE}{source}}}]
detector: {{backend: motion}}
keyframes: {{interval: 1}}
tracker: none
sinks:
  - {sink}
""")
    return path


def subscriber(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streamlens", "subscribe", *args], cwd=REPO, text=True,
                            **popen)


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("WARNING")]


def dropped_line(stderr: str) -> int:
    """The count in the zmq sink's closing warning `... N message(s) dropped (cam1: N)`."""
    [count] = [int(m.group(1)) for line in warnings(stderr) if (m := re.search(r"(\d+) message\(s\) dropped", line))]
    return count


# ---------------------------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path):
    """A 200 KiB disk to fill, at tmp_path/disk."""
    with tmpfs(tmp_path / "disk", "200k") as disk:
        yield disk


def test_a_full_disk_ends_the_run_with_one_line_and_leaves_whole_lines(tmp_path, small_disk):
    out = small_disk / "results.jsonl"
    path = pipeline(tmp_path, f"{{type: jsonl, path: {out}}}", ", loop: true")  # never ends by itself
    run = streamlens("run", "-q", str(path), timeout=120)
    assert run.returncode == 1, run.stderr
    [line] = run.stderr.splitlines()  # nothing else: no traceback, no second error
    assert line.startswith("streamlens: error: ") and line.endswith(f"cannot write {out}: No space left on device")
    raw = out.read_bytes()
    assert len(raw) > 100_000 and raw.endswith(b"\n")  # it filled the disk, and the last line is whole
    lines = [json.loads(text) for text in raw.splitlines()]
    assert [m["seq"] for m in lines] == list(range(len(lines)))


# ------------------------------------------------------------------------ subscribers that fail


def stuck_consumer(endpoint: str, pull: bool) -> subprocess.Popen:
    """A process that connects (SUB or PULL), never reads, and holds little: one message queued,
    a small fixed kernel buffer."""
    code = f"""
import signal, time, zmq
signal.signal(signal.SIGTERM, lambda *_: exit(0))
sock = zmq.Context().socket(zmq.{"PULL" if pull else "SUB"})
sock.rcvhwm = 1
sock.setsockopt(zmq.RCVBUF, 65536)
{"" if pull else 'sock.subscribe(b"")'}
sock.connect("{endpoint}")
while True:
    time.sleep(1)
"""
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_push_consumer_that_never_reads_never_holds_up_the_pipeline(tmp_path):
    endpoint = free_endpoint()
    consumer = stuck_consumer(endpoint, pull=True)
    try:
        path = pipeline(tmp_path, f'{{type: zmq, endpoint: "{endpoint}", mode: push, hwm: 5, frames: jpeg, '
                                  f'wait_subscribers: 1, {SHORT}}}')
        run = streamlens("run", "-q", str(path), timeout=120)
    finally:
        consumer.terminate()
        consumer.wait(timeout=10)
    assert run.returncode == 0, run.stderr
    assert any(w.endswith(f"zmq sink {endpoint}: no consumer took a message for 1 s (mode push, send_timeout_s); "
                          "dropping messages until one does") for w in warnings(run.stderr)), run.stderr
    assert SAMPLE_FRAMES // 2 < dropped_line(run.stderr) <= SAMPLE_FRAMES + 1 + 20  # frames, eos, a few stats


@pytest.mark.parametrize("mode", ["pub", "push"])
def test_a_subscriber_killed_mid_stream_does_not_disturb_the_pipeline(tmp_path, mode):
    """SIGKILL a subscriber after it got 30 frames of a stream paced as a camera's; the pipeline
    plays to the end. pub: the other subscriber gets every frame, and the publisher's stats say one
    subscriber is left; push: with its only consumer gone the sink drops (counted) and goes on."""
    endpoint = free_endpoint()
    pull = ["--pull"] if mode == "push" else []
    victim = subscriber(endpoint, *pull, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    survivor = None if mode == "push" else subscriber(endpoint, "--until-eos", "--timeout", "60",
                                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    path = pipeline(tmp_path, f'{{type: zmq, endpoint: "{endpoint}", mode: {mode}, wait_subscribers: '
                              f'{1 if mode == "push" else 2}{", " + SHORT if mode == "push" else ""}}}',
                    ", live: true")
    run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)], cwd=REPO, text=True,
                           stderr=subprocess.PIPE)
    try:
        frames = 0
        while frames < 30:
            line = victim.stdout.readline()
            assert line, "the victim got no messages"
            frames += '"type":"frame"' in line
        victim.kill()
        victim.wait()
        _, run_err = run.communicate(timeout=120)
        if survivor is not None:
            out, err = survivor.communicate(timeout=60)
    finally:
        for proc in (run, victim, survivor):
            if proc is not None:
                proc.kill()
                proc.wait()
    assert run.returncode == 0, run_err
    if mode == "push":
        assert any("no consumer took a message for 1 s" in w for w in warnings(run_err)), run_err
        assert dropped_line(run_err) > 0
        return
    lines = [json.loads(line) for line in out.splitlines()]
    frames_seen = [m["seq"] for m in lines if m["type"] == "frame"]
    assert frames_seen == list(range(len(frames_seen))) and lines[-1]["type"] == "eos"
    assert lines[-1]["frames"] == len(frames_seen) and err.endswith("0 lost in 0 gap(s)\n"), err
    last_stats = [m for m in lines if m["type"] == "stats"][-1]
    assert last_stats["publisher"]["subscriptions"] == 1  # the publisher saw the victim go


def test_a_push_sink_without_any_consumer_ends_the_run(tmp_path):
    """No consumer ever connects and nothing is set but the endpoint: the first message waits
    `send_timeout_s` (its default), then the sink drops what it cannot deliver and the run ends."""
    endpoint = free_endpoint()
    path = pipeline(tmp_path, f'{{type: zmq, endpoint: "{endpoint}", mode: push}}')
    run = streamlens("run", "-q", str(path), timeout=120)
    assert run.returncode == 0, run.stderr
    assert any(w.endswith(f"zmq sink {endpoint}: no consumer took a message for 10 s (mode push, send_timeout_s); "
                          "dropping messages until one does") for w in warnings(run.stderr)), run.stderr
    assert dropped_line(run.stderr) >= SAMPLE_FRAMES + 1  # every frame and the eos
