"""ZeroMQ fan-out of a real pipeline to real subscriber processes on loopback.

`streamlens run` publishes the sample the repository ships (640x360), paced at its frame rate
as a camera would deliver it (`live: true`), with JPEG frames, to three subscriber processes
started before it (`wait_subscribers: 3`): a fast one (`streamlens subscribe`), a stuck one that
reads nothing until the pipeline has ended, and one that leaves after 100 frames. What a user
relies on, whatever the machine's speed or load:
- the pipeline ends although the stuck subscriber never read (the publisher never waits for it);
- the fast subscriber gets every message published, in order, and the stats before the eos;
- the stuck one, once it reads, finds it lost messages (its queue was full) and knows how many.
How much the stuck subscriber costs the pipeline in time is a benchmark's question
(tools/bench_zmq.py), not a test's.

This file is also the subscriber program of the test: `python test_zmq_fanout.py ROLE ENDPOINT OUT`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "traffic.mp4"
LEAVE_AT = 100
#: the stuck subscriber's kernel receive buffer: small and fixed (no autotuning), so that what it
#: can hold unread (this buffer, the publisher's send buffer, both queues) is far less than the
#: sample's JPEG frames
STUCK_RCVBUF = 64 * 1024


# ------------------------------------------------------------------- the subscriber processes


def _subscriber_main(role: str, endpoint: str, out: str) -> int:
    """`stuck`: a plain pyzmq SUB socket that reads nothing until SIGTERM (the pipeline has
    ended), then takes what reached it; `leaver`: leave after frame message `LEAVE_AT`. Both
    write {"seqs": [...], "gaps": [...]} to `out` as they end."""
    import zmq

    from streamlens import Subscriber
    from streamlens.wire.subscriber import SeqTracker

    seqs: list[int] = []
    if role == "leaver":
        with Subscriber(endpoint, ["frame."]) as sub:
            while (msg := sub.recv(timeout=60)) is not None:
                seqs.append(msg.seq)
                if msg.seq >= LEAVE_AT:
                    break
            gaps = [g.missing for g in sub.gaps]
    else:
        ended = []
        signal.signal(signal.SIGTERM, lambda *_: ended.append(1))
        ctx = zmq.Context()
        sock = ctx.socket(zmq.SUB)
        sock.rcvhwm = 1
        sock.setsockopt(zmq.RCVBUF, STUCK_RCVBUF)
        sock.subscribe(b"frame.")
        sock.connect(endpoint)
        while not ended:
            time.sleep(0.05)
        tracker, gaps = SeqTracker(), []
        while sock.poll(500):
            _, payload, *_ = sock.recv_multipart()
            seq = json.loads(payload)["seq"]
            seqs.append(seq)
            if (gap := tracker.check("cam1", seq)) is not None:
                gaps.append(gap.missing)
        sock.close(linger=0)
        ctx.term()
    Path(out).write_text(json.dumps({"seqs": seqs, "gaps": gaps}))
    return 0


if __name__ == "__main__":
    sys.exit(_subscriber_main(*sys.argv[1:4]))


# ------------------------------------------------------------------------------------ the test


from .conftest import REPO, streamlens  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_role(role: str, endpoint: str, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"{role}.json"
    proc = subprocess.Popen([sys.executable, __file__, role, endpoint, str(out)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    return proc, out


def test_fanout_to_fast_stuck_and_leaving_subscribers(tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    pipeline = tmp_path / "zmq.yaml"
    pipeline.write_text(f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true}}]
detector: {{backend: motion}}
keyframes: {{interval: 5}}
tracker: none
sinks:
  - {{type: zmq, endpoint: "{endpoint}", wait_subscribers: 3, wait_timeout_s: 60, hwm: 20, frames: jpeg}}
""")
    fast_out, fast_err = tmp_path / "fast.jsonl", tmp_path / "fast.err"
    fast = subprocess.Popen(
        [sys.executable, "-m", "streamlens", "subscribe", endpoint, "--until-eos", "--timeout", "60",
         "--frames", str(tmp_path / "frames")],
        cwd=REPO, stdout=fast_out.open("w"), stderr=fast_err.open("w"))
    (stuck, stuck_out), (leaver, leaver_out) = (start_role(r, endpoint, tmp_path) for r in ("stuck", "leaver"))
    try:
        # bounded: a publisher that waited for the stuck subscriber would never end
        run = streamlens("run", "-q", str(pipeline), timeout=180)
        assert run.returncode == 0, run.stderr
        assert fast.wait(timeout=60) == 0, fast_err.read_text()
        assert leaver.wait(timeout=60) == 0  # it left by itself
        stuck.send_signal(signal.SIGTERM)  # the pipeline is over: now read
        assert stuck.wait(timeout=60) == 0
    finally:
        for proc in (fast, stuck, leaver):
            proc.kill()
            proc.wait()

    lines = [json.loads(line) for line in fast_out.read_text().splitlines()]
    frames = [m for m in lines if m["type"] == "frame"]
    eos = [m for m in lines if m["type"] == "eos"]
    # the fast one: every frame published, in order, seq without gaps, then the eos
    assert len(eos) == 1 and lines[-1] == eos[0]
    total = eos[0]["frames"]
    assert total >= 200 and eos[0]["seq"] == total  # the sample's 300, less any a loaded machine shed
    assert [m["seq"] for m in frames] == list(range(total))
    assert all(a["frame"] < b["frame"] for a, b in zip(frames, frames[1:]))
    assert "0 lost in 0 gap(s)" in fast_err.read_text()
    # stats, with the publisher's counters, before the eos (the runtime reports about once a
    # second while the paced stream plays, and once more right before each stream's eos)
    stats = [m for m in lines[:lines.index(eos[0])] if m["type"] == "stats"]
    assert stats, "no stats message before the eos"
    for m in stats:
        assert m["stream"] == "cam1" and m["fps"] >= 0 and "p95" in m["latency_ms"]
        assert {"queue_depth", "dropped", "state"} <= set(m)
        assert m["publisher"]["subscriptions"] >= 2 and m["publisher"]["dropped"] == 0
        assert m["publisher"]["sent"] == lines.index(m)  # every message before it, as the fast one saw
    # the JPEG frames: one per frame message, real 640x360 images
    jpegs = sorted((tmp_path / "frames").glob("cam1-*.jpg"))
    assert len(jpegs) == total
    image = cv2.imdecode(np.frombuffer(jpegs[100].read_bytes(), np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (360, 640, 3)
    # the stuck one lost messages (far more than its buffers hold), got the rest in order, and
    # knows from seq how many it lost
    got = json.loads(stuck_out.read_text())
    assert 0 < len(got["seqs"]) < total and got["seqs"] == sorted(set(got["seqs"]))
    assert len(got["seqs"]) + sum(got["gaps"]) == got["seqs"][-1] + 1 - got["seqs"][0]
    # the leaver took the first frames in order, and left
    left = json.loads(leaver_out.read_text())
    assert left["seqs"][-1] >= LEAVE_AT and left["seqs"] == sorted(left["seqs"])
    assert len(left["seqs"]) + sum(left["gaps"]) == left["seqs"][-1] + 1 - left["seqs"][0]
