"""Foreign ZeroMQ peers against a zmq sink and the supervisor's relay, on real loopback sockets and
in processes of their own: a subscription flood is cut off and counted, the publisher's memory
stays where it was, the subscribers that behave get every message, only the contract's topics go
upstream (each once), connections past `peers.max_peers` and unknown CurveZMQ keys are refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import zmq

from streamlens import Subscriber
from streamlens.config.sinks import ZmqSinkConfig
from streamlens.frame import StatsReport
from streamlens.sinks.zmq import ZmqSink
from streamlens.wire.peers import TopicTable, topic_allowed

from .test_zmq_sink import result, send

ENDPOINT = "tcp://127.0.0.1:*"

#: a foreign XSUB that sends N distinct 200-byte subscriptions (the issue's flood), then stays
#: connected until told on stdin, then prints whether it was disconnected
_FLOOD = """
import os, sys, zmq
from zmq.utils.monitor import recv_monitor_message
ctx = zmq.Context()
sock = ctx.socket(zmq.XSUB)
monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
sock.connect(sys.argv[1])
for i in range(int(sys.argv[2])):
    sock.send(b"\\x01" + b"%06d" % i + b"z" * 193)
print("sent", flush=True)
sys.stdin.readline()
said = "kept"
while monitor.poll(0):
    if recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED:
        said = "disconnected"
print(said, flush=True)
os._exit(0)
"""


def rss_mb(pid: int | None = None) -> float:
    with open(f"/proc/{pid or os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Flood:
    """The flooding peer, in a process of its own."""

    def __init__(self, endpoint: str, count: int = 200_000):
        self.proc = subprocess.Popen([sys.executable, "-c", _FLOOD, endpoint, str(count)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "sent"  # handed to its libzmq: on the wire from now

    def leave(self) -> str:
        """Close it; whether it had been disconnected."""
        said, _ = self.proc.communicate("\n", timeout=60)
        return said.strip()


def stats(seq: int) -> StatsReport:
    return StatsReport("cam1", {"seq": seq})


def wait_until(check, timeout_s: float = 60.0, step_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step_s)
    return check()


def test_the_contract_topics_are_the_only_subscriptions_that_count():
    assert all(topic_allowed(t) for t in (b"", b"f", b"frame", b"frame.", b"frame.cam1", b"frame.cam1.",
                                         b"event.door-2_b.", b"stats.", b"eos.x"))
    assert not any(topic_allowed(t) for t in (b"frame.cam1.x", b"frame..", b"video.", b"frame.c am",
                                             b"frame." + b"a" * 65, b"\x00\x01", b"x" * 200))


def test_a_table_of_topics_passes_each_once_and_refuses_past_its_bound():
    table = TopicTable(max_topics=2)
    assert table.subscribe(b"frame.cam1.") and not table.subscribe(b"frame.cam1.")
    assert not table.subscribe(b"junk") and table.refused == 1
    assert table.subscribe(b"event.") and not table.subscribe(b"eos.") and table.refused == 2
    assert not table.unsubscribe(b"eos.")  # never passed: nothing to take back
    assert table.unsubscribe(b"event.") and table.subscribe(b"eos.")


def test_a_subscription_flood_is_cut_off_counted_and_costs_the_publisher_no_memory():
    sink = ZmqSink(ENDPOINT)
    sink.open()
    try:
        with Subscriber(sink.endpoint, ["frame."]) as good:
            assert sink.wait_for(1, timeout_s=10)
            before = rss_mb()
            flood = Flood(sink.endpoint)
            seq = 0

            def flooder_gone() -> bool:
                nonlocal seq
                send(sink, result(seq))  # the publisher goes on meanwhile, reading its peers on stats
                send(sink, stats(seq))  # the runtime's once a second: the sink reads its peers
                seq += 1
                return sink.refusals().get("flood", 0) >= 1

            assert wait_until(flooder_gone, step_s=0.02), sink.refusals()
            grown = rss_mb() - before
            assert flood.leave() == "disconnected"
            got = [good.recv(timeout=10).seq for _ in range(seq)]
        assert got == list(range(seq))  # the subscriber that behaves lost nothing
        # 200,000 subscriptions kept by libzmq took 1.8 GB; cut off, at most its allowance is kept
        assert grown < 200, f"the publisher grew by {grown:.0f} MiB"
        assert sink.peers <= 1  # not one junk topic counted as a subscriber
    finally:
        sink.close()


def test_the_stats_say_what_was_refused_and_a_flooder_is_refused_again_for_its_cool_down():
    sink = ZmqSink(ENDPOINT, peers={"subscriptions": 16, "cooldown_s": 60})
    sink.open()
    try:
        with Subscriber(sink.endpoint, ["stats."]) as watcher:  # connected before: it stays
            assert sink.wait_for(1, timeout_s=10)
            flood = Flood(sink.endpoint, 2000)
            assert wait_until(lambda: sink.refusals().get("flood", 0) >= 1)
            assert flood.leave() == "disconnected"
            with Subscriber(sink.endpoint) as late:  # from the same address
                assert wait_until(lambda: sink.refusals().get("cooldown", 0) >= 1), sink.refusals()
                send(sink, stats(0))
                assert late.recv(timeout=1.5) is None  # refused while its address cools down
            message = watcher.recv(timeout=10)
        assert message.data["publisher"]["refused"]["flood"] == 1
        assert message.data["publisher"]["refused"]["cooldown"] >= 1
        assert message.data["publisher"]["subscriptions"] == 1
    finally:
        sink.close()


def test_connections_past_max_peers_are_refused_and_counted():
    sink = ZmqSink(ENDPOINT, peers={"max_peers": 2})
    sink.open()
    ctx = zmq.Context()
    subs = []
    try:
        for _ in range(4):
            s = ctx.socket(zmq.SUB)
            s.subscribe(b"frame.")
            s.connect(sink.endpoint)
            subs.append(s)
        assert wait_until(lambda: sink.refusals().get("peers", 0) >= 2), sink.refusals()
        assert sink.wait_for(2, timeout_s=30)  # the two admitted have subscribed
        send(sink, result(0))
        delivered = sum(1 for s in subs if s.poll(2000))
        assert delivered == 2
    finally:
        for s in subs:
            s.close(linger=0)
        ctx.term()
        sink.close()


def test_a_peer_without_an_authorized_key_is_refused_and_counted(tmp_path):
    from streamlens.wire.keys import make_client, make_keys

    make_keys(tmp_path, ["server", "known", "stranger"], authorize=("known",))
    server = (tmp_path / "server.key", tmp_path / "server.key_secret")
    known = (tmp_path / "known.key", tmp_path / "known.key_secret")
    stranger = (tmp_path / "stranger.key", tmp_path / "stranger.key_secret")
    sink = ZmqSink(ENDPOINT, curve={"server_secret": str(server[1]), "authorized": str(tmp_path / "authorized")})
    sink.open()
    ctx = zmq.Context()
    try:
        good, bad = ctx.socket(zmq.SUB), ctx.socket(zmq.SUB)
        make_client(good, server[0], known[1])
        make_client(bad, server[0], stranger[1])
        for s in (good, bad):
            s.subscribe(b"")
            s.connect(sink.endpoint)
        assert wait_until(lambda: sink.refusals().get("key", 0) >= 1 and sink.wait_for(1, 0.05))
        send(sink, result(0))
        assert good.poll(5000) and not bad.poll(500)
        good.close(linger=0)
        bad.close(linger=0)
    finally:
        ctx.term()
        sink.close()


def test_a_relay_passes_each_contract_topic_once_and_nothing_else(tmp_path):
    from streamlens.scale.forwarder import Forwarder

    ctx = zmq.Context()
    engine = ctx.socket(zmq.XPUB)  # an engine's share, as the supervisor joins it
    engine.setsockopt(zmq.XPUB_VERBOSER, 1)
    engine.bind(f"ipc://{tmp_path}/engine-0")
    relay = Forwarder(ZmqSinkConfig(type="zmq", endpoint=ENDPOINT, peers={"topics": 3}), "sinks[0]")
    subs = []
    try:
        relay.start()
        relay.join(0, f"ipc://{tmp_path}/engine-0")
        endpoint = relay.back.getsockopt_string(zmq.LAST_ENDPOINT)
        # one subscriber at a time: the relay hears each connection's subscriptions in order
        for topics, passed in (([b"frame.cam1.", b"junk-topic"], b"\x01frame.cam1."),
                               ([b"frame.cam1.", b"event."], b"\x01event."),
                               ([b"eos.", b"stats.", b"frame."], b"\x01eos.")):
            s = ctx.socket(zmq.SUB)
            for t in topics:
                s.subscribe(t)
            s.connect(endpoint)
            subs.append(s)
            assert engine.poll(10_000) and engine.recv() == passed
        assert not engine.poll(1000)  # the second frame.cam1., the junk, stats. and frame. never came
        assert wait_until(lambda: relay.refusals().get("topics", 0) == 3), relay.refusals()
    finally:
        for s in subs:
            s.close(linger=0)
        relay.finish()
        engine.close(linger=0)
        ctx.term()
