"""`runtime.cluster`: the engines as Ray actors on a two-node Ray cluster of this machine (Ray's
own test helper starts it, and ends it after the test). Subscribers keep one endpoint; an actor starts its
streams' decode worker processes; an actor's sockets towards the supervisor speak CurveZMQ with the run's keys
(on loopback here, the supervisor's node), so a foreign SUB or PULL there gets nothing; an actor's process
killed is restarted by Ray, and its streams deliver again past the seq they had reached."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

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


def zmtp_mechanism(host: str, port: int) -> str | None:
    """The security mechanism a ZeroMQ peer listening on `host:port` speaks ("CURVE", "NULL", ...), read
    from its ZMTP 3 greeting, or None when what listens there is not ZeroMQ. A peer ends the greeting
    early when the other side announces another mechanism, so each is announced in turn."""
    for mechanism in (b"NULL", b"CURVE", b"PLAIN"):
        greeting = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + mechanism.ljust(20, b"\0") + bytes(32)
        got = b""
        try:
            with socket.create_connection((host, port), timeout=5) as s:
                s.sendall(greeting)
                while len(got) < 64:
                    part = s.recv(64 - len(got))
                    if not part:
                        break
                    got += part
        except OSError:
            pass
        if len(got) >= 32 and got[0] == 0xFF and got[9] == 0x7F:
            return got[12:32].rstrip(b"\0").decode("ascii", "replace")
    return None  # not ZeroMQ, or a mechanism not tried


def engine_wire(actors: list[psutil.Process]) -> dict[tuple[str, int], str]:
    """Every ZeroMQ socket the actors listen on, with the mechanism it announces."""
    found = {}
    for actor in actors:
        for c in actor.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN:
                mechanism = zmtp_mechanism(c.laddr.ip, c.laddr.port)
                if mechanism is not None:
                    found[(c.laddr.ip, c.laddr.port)] = mechanism
    return found


def foreign_peers_get_nothing(ctx: zmq.Context, wire, drain, seconds: float) -> int:
    """Connect a plain SUB (every topic) and a plain PULL to each of `wire`'s sockets; for `seconds`
    count what they receive while `drain()` takes what the real subscriber has (and says how many).
    Returns what the foreign peers received (the real subscriber must have received frames
    meanwhile: asserted here)."""
    peers = []
    for host, port in wire:
        foreign_sub = ctx.socket(zmq.SUB)
        foreign_sub.setsockopt(zmq.SUBSCRIBE, b"")
        foreign_pull = ctx.socket(zmq.PULL)
        for s in (foreign_sub, foreign_pull):
            s.connect(f"tcp://{host}:{port}")
            peers.append(s)
    poller = zmq.Poller()
    for s in peers:
        poller.register(s, zmq.POLLIN)
    stolen = real = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for s, _ in poller.poll(100):
            s.recv_multipart()
            stolen += 1
        real += drain()
    for s in peers:
        s.close(0)
    assert real > 0, "the pipeline's own subscriber received nothing meanwhile"
    return stolen


def preview_seq(page: int, stream: str) -> int | None:
    """The `seq` of the newest frame the live page has of `stream` (asked of its actor), or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{page}/api/streams/{stream}/preview.jpg", timeout=30) as r:
            body = r.read()
            return int(r.headers["X-Streamlens-Seq"]) if r.status == 200 and body[:2] == b"\xff\xd8" else None
    except OSError:
        return None


def newer_on_page(page: int, after: dict[str, int], seconds: float = 120) -> dict[str, int]:
    """Wait until the live page has a frame of every stream newer than `after`'s `seq`; those seqs."""
    found: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    while len(found) < len(after) and time.monotonic() < deadline:
        for name in after.keys() - found.keys():
            seq = preview_seq(page, name)
            if seq is not None and seq > after[name]:
                found[name] = seq
        time.sleep(0.2)
    assert len(found) == len(after), (after, found)
    return found


def test_six_streams_over_three_actors_survive_a_killed_actor(cluster, tmp_path):
    port, page = free_port(), free_port()
    # s0 and s1 (on actors 0 and 1) decode in worker processes, as cameras do: an actor starts its own
    sources = "\n".join(f"  - {{uri: {SAMPLE}, name: {name}, live: true, loop: true"
                        f"{', decode: process' if name in ('s0', 's1') else ''}}}" for name in STREAMS)
    path = write_pipeline(tmp_path, f"""
sources:
{sources}
detector: {{backend: motion}}
keyframes: {{interval: 3}}
runtime: {{workers: 3, cluster: {{cpus: 1}}, http: {{port: {page}}}}}
sinks:
  - {{type: zmq, endpoint: 'tcp://127.0.0.1:{port}', hwm: 100000}}
  - {{type: jsonl, path: {tmp_path / 'out.jsonl'}}}
""")
    ctx = zmq.Context()
    sub = frame_subscriber(ctx, port)
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", "--cluster", cluster.address, str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seqs: dict[str, list[tuple[float, int]]] = {name: [] for name in STREAMS}

    def drain() -> int:
        n = 0
        while sub.poll(0):
            m = json.loads(sub.recv_multipart()[1])
            seqs[m["stream"]].append((time.monotonic(), m["seq"]))
            n += 1
        return n

    def receive_until(condition, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not condition() and time.monotonic() < deadline and proc.poll() is None:
            if sub.poll(500):
                drain()
        assert condition(), ({k: len(v) for k, v in seqs.items()}, proc.poll())

    try:
        receive_until(lambda: all(len(v) >= 30 for v in seqs.values()), 180)
        actors = actor_processes()
        assert len(actors) == 3
        # each actor's three sockets towards the supervisor (the pub share, the jsonl push and its answers
        # to the live page), CurveZMQ on loopback (this is the supervisor's node): a foreign SUB or PULL
        # there receives nothing
        wire = engine_wire(actors)
        assert len(wire) == 9 and set(wire.values()) == {"CURVE"}, wire
        assert {host for host, _ in wire} == {"127.0.0.1"}, wire
        assert foreign_peers_get_nothing(ctx, wire, drain, 5.0) == 0
        shown = newer_on_page(page, {name: -1 for name in STREAMS})  # the page: every actor's frames
        counts = {name: len(v) for name, v in seqs.items()}
        killed_at = time.monotonic()
        actors[0].kill()
        # every stream receives 60 more frames: the killed actor's ones after Ray restarted it
        receive_until(lambda: all(len(v) >= counts[name] + 60 for name, v in seqs.items()), 180)
        newer_on_page(page, shown)  # and the restarted actor's, past what the page showed before
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
