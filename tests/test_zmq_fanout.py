"""ZeroMQ fan-out of a real pipeline to real subscriber processes on loopback.

One pipeline run on the real 320x240 highway clip publishes, with JPEG frames, to three
subscriber processes started before it (`wait_subscribers: 3`): a fast one (`streamlens
subscribe`), one that sleeps 50 ms per message, and one that leaves halfway. The fast one gets
every message in order; the slow one loses messages (its queue fills) without slowing anyone.

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

CLIP = "highway_320x240.avi"
CLIP_FRAMES = 748
SLOW_SLEEP_S = 0.05


# ------------------------------------------------------------------- the subscriber processes


def _subscriber_main(role: str, endpoint: str, out: str) -> int:
    """`slow`: sleep 50 ms per frame message until SIGTERM (the pipeline has ended), then take
    what is left without sleeping; `leaver`: leave after half the frames. Both write
    {"seqs": [...], "gaps": [...]} to `out` as they end."""
    from streamlens import Subscriber

    seqs: list[int] = []
    ended = []
    signal.signal(signal.SIGTERM, lambda *_: ended.append(1))
    with Subscriber(endpoint, ["frame."], hwm=20) as sub:
        try:
            while True:
                msg = sub.recv(timeout=0.2)
                if msg is None:
                    if ended:
                        break
                    continue
                seqs.append(msg.seq)
                if role == "slow" and not ended:
                    time.sleep(SLOW_SLEEP_S)
                elif role == "leaver" and msg.seq >= CLIP_FRAMES // 2:
                    break
        finally:
            Path(out).write_text(json.dumps({"seqs": seqs, "gaps": [g.missing for g in sub.gaps]}))
    return 0


if __name__ == "__main__":
    sys.exit(_subscriber_main(*sys.argv[1:4]))


# ------------------------------------------------------------------------------------ the test


import streamlens  # noqa: E402
from streamlens.sinks.base import Sink  # noqa: E402

from .conftest import REPO, need_video  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clock(Sink):
    """An extra sink that notes when the pipeline starts, that is once every sink is open (the
    zmq sink, opened first, has its subscribers by then), and when the engine hands out the eos.

    A zmq sink that waited on a subscriber would fill its queue and hold up the engine, so the
    eos would come late here too."""

    name = "clock"

    def open(self) -> None:
        self.started = time.monotonic()

    def write(self, item, message, payload) -> None:
        if message["type"] == "eos":
            self.ended = time.monotonic()


def pipeline_file(tmp_path: Path, clip: Path, endpoint: str, subscribers: int) -> Path:
    path = tmp_path / f"zmq-{subscribers}.yaml"
    path.write_text(f"""
sources: [{{name: highway, uri: {clip}}}]
detector: {{backend: motion}}
keyframes: {{interval: 5}}
tracker: none
sinks:
  - {{type: zmq, endpoint: "{endpoint}", wait_subscribers: {subscribers}, wait_timeout_s: 30,
     hwm: 20, frames: jpeg}}
""")
    return path


def run_timed(path: Path) -> tuple[streamlens.RunReport, float, float]:
    """Run a pipeline in-process. Seconds from its start (subscribers in) to the eos, and to the
    end of the run (sinks closed: the zmq sink lingers up to 200 ms for queued messages)."""
    clock = Clock()
    report = streamlens.Pipeline.from_yaml(path, sinks=[clock]).run()
    return report, clock.ended - clock.started, time.monotonic() - clock.started


def start_fast(endpoint: str, tmp_path: Path, tag: str) -> tuple[subprocess.Popen, Path, Path]:
    out, err = tmp_path / f"fast-{tag}.jsonl", tmp_path / f"fast-{tag}.err"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlens", "subscribe", endpoint, "--until-eos", "--timeout", "60",
         "--frames", str(tmp_path / f"frames-{tag}")],
        cwd=REPO, stdout=out.open("w"), stderr=err.open("w"))
    return proc, out, err


def start_role(role: str, endpoint: str, tmp_path: Path, tag: str) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"{role}-{tag}.json"
    proc = subprocess.Popen([sys.executable, __file__, role, endpoint, str(out)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    return proc, out


def test_fanout_to_fast_slow_and_leaving_subscribers(tmp_path):
    clip = need_video(CLIP)
    runs: dict[str, list[float]] = {"with slow": [], "without": []}
    # Six runs, the two kinds taking turns, so that the load of the shared machine weighs on both
    # alike. Both have the fast subscriber and the leaver; "with slow" adds the slow one. The
    # first run is the one whose messages are checked in detail.
    for i, kind in enumerate(["with slow", "without"] * 3):
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        fast, fast_out, fast_err = start_fast(endpoint, tmp_path, str(i))
        roles = ("leaver", "slow") if kind == "with slow" else ("leaver",)
        others = {role: start_role(role, endpoint, tmp_path, str(i)) for role in roles}
        try:
            report, seconds, whole = run_timed(pipeline_file(tmp_path, clip, endpoint, 1 + len(roles)))
            assert report.status == "done", report.error
            assert whole < seconds + 1.0  # closing is bounded: nobody waits for the slow one
            runs[kind].append(seconds)
            assert fast.wait(timeout=30) == 0, fast_err.read_text()
            assert others["leaver"][0].wait(timeout=10) == 0  # it left halfway, by itself
        finally:
            for proc, _ in others.values():
                proc.send_signal(signal.SIGTERM)  # the slow one: the pipeline is over
                proc.wait(timeout=10)
            fast.kill()
            fast.wait()
        if i == 0:
            check_first_run(tmp_path, fast_out, fast_err, slow=others["slow"][1], leaver=others["leaver"][1])

    # The slow subscriber costs the pipeline nothing: each kind's best run (the one least
    # disturbed by other work on the machine) within 10%. A sink that waited for the slow one
    # would take 50 ms a message, many times longer.
    best_slow, best_fast = min(runs["with slow"]), min(runs["without"])
    print(f"run seconds: {runs}")
    assert best_slow <= 1.10 * best_fast, runs
    # ...and the slow subscriber would have needed far longer to take every message itself
    assert CLIP_FRAMES * SLOW_SLEEP_S > 3 * best_slow, runs


def check_first_run(tmp_path: Path, fast_out: Path, fast_err: Path, slow: Path, leaver: Path) -> None:
    lines = [json.loads(line) for line in fast_out.read_text().splitlines()]
    frames = [m for m in lines if m["type"] == "frame"]
    eos = [m for m in lines if m["type"] == "eos"]
    stats = [m for m in lines if m["type"] == "stats"]
    # the fast one: every frame in order, seq without gaps, then the eos
    assert [m["seq"] for m in frames] == list(range(CLIP_FRAMES))
    assert [m["frame"] for m in frames] == list(range(CLIP_FRAMES))
    assert len(eos) == 1 and eos[0]["seq"] == CLIP_FRAMES and eos[0]["frames"] == CLIP_FRAMES
    assert [m["type"] for m in lines if m["type"] != "stats"][-1] == "eos"
    assert "0 lost in 0 gap(s)" in fast_err.read_text()
    # stats about once a second, with the publisher's counters
    assert stats, "no stats message arrived"
    for m in stats:
        assert m["stream"] == "highway" and m["fps"] >= 0 and "p95" in m["latency_ms"]
        assert {"queue_depth", "dropped", "keyframe_rate", "state"} <= set(m)
        assert m["publisher"]["subscriptions"] >= 2 and m["publisher"]["sent"] <= CLIP_FRAMES + 1
    # the JPEG frames: one per frame message, real 320x240 images
    jpegs = sorted((tmp_path / "frames-0").glob("highway-*.jpg"))
    assert len(jpegs) == CLIP_FRAMES
    image = cv2.imdecode(np.frombuffer(jpegs[100].read_bytes(), np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (240, 320, 3)
    # the slow one got messages in order but lost many, and knows how many from seq
    got = json.loads(slow.read_text())
    assert len(got["seqs"]) >= 10 and got["seqs"] == sorted(got["seqs"])
    assert sum(got["gaps"]) > 0 and len(got["seqs"]) + sum(got["gaps"]) == got["seqs"][-1] + 1
    # the leaver took the first half, in order, and left
    left = json.loads(leaver.read_text())
    assert left["seqs"][-1] == CLIP_FRAMES // 2 and left["seqs"] == sorted(left["seqs"])
