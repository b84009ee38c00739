"""`runtime.cluster`: the engines as Ray actors on a two-node Ray cluster of this machine (Ray's
own test helper starts it, and ends it after the test). Subscribers keep one endpoint; an actor starts its
streams' decode worker processes; an actor's process killed is restarted by Ray, and its streams deliver again
past the seq they had reached."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest
import zmq

from .conftest import REPO
from .test_pipeline_run import write_pipeline
from .test_workers import frame_subscriber, free_port

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'streamlens[cluster]')")

SAMPLE = REPO / "samples" / "traffic.mp4"
STREAMS = [f"s{i}" for i in range(6)]


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    # both nodes on this machine, at its own address (a driver reaches a cluster there, not on 127.0.0.1)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False})
    c.add_node(num_cpus=3)
    try:
        yield c
    finally:
        c.shutdown()


def actor_processes() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if "ray::EngineActor" in " ".join(p.info["cmdline"] or [])]


def test_six_streams_over_three_actors_survive_a_killed_actor(cluster, tmp_path):
    port = free_port()
    # s0 and s1 (on actors 0 and 1) decode in worker processes, as cameras do: an actor starts its own
    sources = "\n".join(f"  - {{uri: {SAMPLE}, name: {name}, live: true, loop: true"
                        f"{', decode: process' if name in ('s0', 's1') else ''}}}" for name in STREAMS)
    path = write_pipeline(tmp_path, f"""
sources:
{sources}
detector: {{backend: motion}}
keyframes: {{interval: 3}}
runtime: {{workers: 3, cluster: {{cpus: 1}}}}
sinks: [{{type: zmq, endpoint: 'tcp://127.0.0.1:{port}', hwm: 100000}}]
""")
    ctx = zmq.Context()
    sub = frame_subscriber(ctx, port)
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", "--cluster", cluster.address, str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seqs: dict[str, list[tuple[float, int]]] = {name: [] for name in STREAMS}

    def receive_until(condition, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not condition() and time.monotonic() < deadline and proc.poll() is None:
            if sub.poll(500):
                m = json.loads(sub.recv_multipart()[1])
                seqs[m["stream"]].append((time.monotonic(), m["seq"]))
        assert condition(), ({k: len(v) for k, v in seqs.items()}, proc.poll())

    try:
        receive_until(lambda: all(len(v) >= 30 for v in seqs.values()), 180)
        actors = actor_processes()
        assert len(actors) == 3
        counts = {name: len(v) for name, v in seqs.items()}
        killed_at = time.monotonic()
        actors[0].kill()
        # every stream receives 60 more frames: the killed actor's ones after Ray restarted it
        receive_until(lambda: all(len(v) >= counts[name] + 60 for name, v in seqs.items()), 180)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
        stderr = proc.stderr.read()
    finally:
        proc.kill()
        sub.close(0)
        ctx.term()
    gaps = {}
    for name, got in seqs.items():
        numbers = [seq for _, seq in got]
        assert all(b > a for a, b in zip(numbers, numbers[1:])), name  # never a repeat
        gaps[name] = [(t, b - a) for (_, a), (t, b) in zip(got, got[1:]) if b - a > 1]
    hit = sorted(name for name, g in gaps.items() if g)
    assert len(hit) == 2, gaps  # the killed actor's two streams, and only they, show the death
    assert "died" in stderr and "restarting it" in stderr, stderr
    # the record for tools/results: how long the killed actor's streams were silent
    silent = max(t for name in hit for t, _ in gaps[name]) - killed_at
    print(f"streams {hit} delivered again {silent:.1f} s after the kill")
