"""The zmq sink and `Subscriber` on real loopback sockets, without a pipeline: formats, frames,
waiting for subscribers, late joiners, stats, the reliable push mode and bind errors."""

from __future__ import annotations

import logging
import threading
import time

import cv2
import numpy as np
import pytest
import supervision as sv
import zmq

from streamlens import Subscriber
from streamlens.errors import SinkError
from streamlens.frame import Frame, FrameResult, StatsReport, StreamEnd, empty_detections
from streamlens.sinks.zmq import DEFAULT_SEND_TIMEOUT_S, ZmqSink
from streamlens.wire.codec import decode
from streamlens.wire.schema import dumps, message_for

ENDPOINT = "tcp://127.0.0.1:*"  # any free port; the sink's `endpoint` then says which


def result(seq: int, stream: str = "cam1", detections=None, size=(160, 120)) -> FrameResult:
    image = np.full((size[1], size[0], 3), 90, np.uint8)
    frame = Frame(stream, seq, seq / 25, time.time(), image, timings={"decode": 1.0, "total": 2.0})
    return FrameResult(frame, seq, seq % 5 == 0, detections if detections is not None else empty_detections())


def send(sink: ZmqSink, item) -> None:
    """Hand an item to the sink as the runtime does: message built and serialised once."""
    message = message_for(item)
    sink.write(item, message, dumps(message))


def a_car() -> sv.Detections:
    det = sv.Detections(xyxy=np.array([[20, 20, 100, 80]], np.float32), confidence=np.array([0.9], np.float32),
                        class_id=np.array([2]), tracker_id=np.array([7]))
    det.data["class_name"] = np.array(["car"], dtype=object)
    return det


@pytest.fixture
def sink_factory():
    made: list[ZmqSink] = []

    def make(**options) -> ZmqSink:
        sink = ZmqSink(options.pop("endpoint", ENDPOINT), **options)
        sink.open()
        made.append(sink)
        return sink

    yield make
    for sink in made:
        sink.close()


def test_msgpack_payload_carries_the_same_message_as_json(sink_factory):
    sink = sink_factory(format="msgpack")
    with Subscriber(sink.endpoint) as sub:
        assert sink.wait_for(1, timeout_s=5)
        item = result(0, detections=a_car())
        send(sink, item)
        msg = sub.recv(timeout=5)
    assert msg.topic == "frame.cam1."
    assert msg.data == decode(dumps(message_for(item)))
    assert msg.data["objects"][0]["label"] == "car" and msg.jpeg is None


def test_jpeg_frame_is_a_third_part_annotated_unless_asked_not_to(sink_factory):
    drawn, plain = sink_factory(frames="jpeg"), sink_factory(frames="jpeg", annotate=False)
    images = []
    for sink in (drawn, plain):
        with Subscriber(sink.endpoint, ["frame."]) as sub:
            assert sink.wait_for(1, timeout_s=5)
            send(sink, result(0, detections=a_car()))
            send(sink, StreamEnd("cam1", 1, 1))  # no image on an eos (and not subscribed here)
            msg = sub.recv(timeout=5)
            assert msg.type == "frame" and msg.jpeg[:2] == b"\xff\xd8"
            images.append(cv2.imdecode(np.frombuffer(msg.jpeg, np.uint8), cv2.IMREAD_COLOR))
    assert images[0].shape == images[1].shape == (120, 160, 3)
    assert np.abs(images[1].astype(int) - 90).max() < 10  # the frame as it was
    assert np.abs(images[0].astype(int) - images[1]).max() > 100  # with a box drawn


def test_open_waits_for_the_subscribers_then_starts(sink_factory):
    opened = []
    sink = ZmqSink("tcp://127.0.0.1:*", wait_subscribers=2, wait_timeout_s=20)
    # bind first on a known port, so that subscribers can be started before open() returns
    with zmq.Context() as probe_ctx:
        probe = probe_ctx.socket(zmq.PUB)
        port = probe.bind_to_random_port("tcp://127.0.0.1")
        probe.close()
    sink.endpoint = f"tcp://127.0.0.1:{port}"
    opener = threading.Thread(target=lambda: (sink.open(), opened.append(time.monotonic())))
    opener.start()
    try:
        first = Subscriber(sink.endpoint, ["frame.cam1"])
        time.sleep(0.3)
        assert not opened, "open() returned with one subscriber of two"
        second = Subscriber(sink.endpoint, ["eos."])
        opener.join(timeout=10)
        assert opened and sink.peers == 2
        send(sink, result(0))
        send(sink, StreamEnd("cam1", 1, 1))
        assert first.recv(timeout=5).seq == 0  # nothing lost to the slow-joiner effect
        assert second.recv(timeout=5).type == "eos"
        first.close()
        second.close()
    finally:
        opener.join(timeout=10)
        sink.close()


def test_waiting_times_out_with_a_warning_and_starts_anyway(sink_factory, caplog):
    with caplog.at_level(logging.WARNING, logger="streamlens"):
        started = time.monotonic()
        sink = sink_factory(wait_subscribers=1, wait_timeout_s=0.3)
        assert time.monotonic() - started >= 0.25  # it waited its timeout (how much longer is the machine's)
    assert f"zmq sink {sink.endpoint}: 0 of 1 subscriptions after 0.3 s; starting anyway" in caplog.text
    send(sink, result(0))  # and it publishes


def test_a_late_subscriber_gets_messages_from_then_on_without_a_gap(sink_factory):
    sink = sink_factory()
    with Subscriber(sink.endpoint) as early:
        assert sink.wait_for(1, timeout_s=5)
        for seq in range(5):
            send(sink, result(seq))
        with Subscriber(sink.endpoint) as late:
            assert sink.wait_for(2, timeout_s=5)
            for seq in range(5, 10):
                send(sink, result(seq))
            send(sink, StreamEnd("cam1", 10, 10))
            got_late = [late.recv(timeout=5) for _ in range(6)]
        got_early = [early.recv(timeout=5) for _ in range(11)]
    assert [m.seq for m in got_late] == list(range(5, 11)) and not late.gaps
    assert [m.seq for m in got_early] == list(range(11)) and not early.gaps


def test_stats_messages_carry_the_publishers_counters(sink_factory):
    sink = sink_factory()
    with Subscriber(sink.endpoint, ["stats."]) as sub:
        assert sink.wait_for(1, timeout_s=5)
        for seq in range(3):
            send(sink, result(seq))
        report = StatsReport("cam1", {"fps": 25.0, "dropped": 0, "queue_depth": 1})
        send(sink, report)
        msg = sub.recv(timeout=5)
    assert msg.topic == "stats.cam1." and msg.data["fps"] == 25.0
    assert msg.data["publisher"] == {"mode": "pub", "sent": 3, "dropped": 0, "subscriptions": 1}


def test_push_mode_waits_for_the_consumer_and_loses_nothing(sink_factory):
    sink = sink_factory(mode="push", hwm=2)
    big = b"{" + b" " * 200_000 + b"}"  # payloads bigger than the kernel's socket buffers
    total = 60
    pulled = zmq.Context.instance().socket(zmq.PULL)
    pulled.rcvhwm = 2
    pulled.connect(sink.endpoint)
    assert sink.wait_for(1, timeout_s=5) and sink.peers == 1

    def produce():
        for seq in range(total):
            sink.write(result(seq), {"type": "frame", "stream": "cam1"}, big)
        send(sink, StreamEnd("cam1", total, total))

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    time.sleep(0.5)
    stuck_at = sink.sent["cam1"]
    assert producer.is_alive() and stuck_at < total  # waiting on the consumer: back-pressure
    topics = [pulled.recv_multipart()[0] for _ in range(total + 1)]  # now consume
    producer.join(timeout=10)
    pulled.close()
    assert topics == [b"frame.cam1."] * total + [b"eos.cam1."]
    assert sink.sent["cam1"] == total + 1 and sink.dropped["cam1"] == 0 and sink.waited_s > 0


def test_push_mode_never_waits_for_ever_it_drops_and_counts(sink_factory, caplog):
    """No consumer: the first send waits `send_timeout_s`, then every message is dropped at once
    (counted) until a consumer takes one; from then on nothing is lost again."""
    assert ZmqSink("tcp://127.0.0.1:*", mode="push").send_timeout_s == DEFAULT_SEND_TIMEOUT_S
    with pytest.raises(ValueError, match=r"^zmq sink: send_timeout_s: must be > 0, got 0$"):  # as in a file
        ZmqSink("tcp://127.0.0.1:*", mode="push", send_timeout_s=0)
    sink = sink_factory(mode="push", send_timeout_s=0.3)  # nobody connects yet
    with caplog.at_level(logging.WARNING, logger="streamlens"):
        for seq in range(5):
            send(sink, result(seq))
        assert sink.dropped["cam1"] == 5 and sink.sent["cam1"] == 0 and sink.dropping
        assert sink.drops() == {"cam1": 5}
        with Subscriber(sink.endpoint, pull=True) as consumer:
            assert sink.wait_for(1, timeout_s=5)
            for seq in range(5, 10):
                send(sink, result(seq))
            send(sink, StreamEnd("cam1", 10, 10))
            got = [consumer.recv(timeout=5) for _ in range(6)]
            send(sink, StatsReport("cam1", {"fps": 25.0}))
            stats = consumer.recv(timeout=5).data["publisher"]
    assert [m.seq for m in got] == list(range(5, 11)) and sink.dropped["cam1"] == 5 and not sink.dropping
    assert {k: v for k, v in stats.items() if k != "waited_ms"} == {
        "mode": "push", "sent": 6, "dropped": 5, "consumers": 1, "dropping": False}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"zmq sink {sink.endpoint}: no consumer took a message for 0.3 s (mode push, send_timeout_s); "
        "dropping messages until one does",  # once: the four after it did not wait
        f"zmq sink {sink.endpoint}: a consumer takes messages again (5 dropped meanwhile)"]


def test_interrupt_ends_a_waiting_push_send_and_the_close_at_once(sink_factory):
    """A second Ctrl-C: the runtime calls `interrupt()` from another thread; a send that waits for
    a consumer (here for up to an hour) gives up, and `close()` does not linger."""
    sink = sink_factory(mode="push", hwm=2, send_timeout_s=3600, linger_ms=3_600_000)
    consumer = zmq.Context.instance().socket(zmq.PULL)
    consumer.rcvhwm = 1
    consumer.connect(sink.endpoint)  # connected, but never reads: messages queue up for it
    assert sink.wait_for(1, timeout_s=5)
    big = b"{" + b" " * 200_000 + b"}"

    def produce():
        for seq in range(500):  # far more than the socket buffers of both ends hold
            sink.write(result(seq), {"type": "frame", "stream": "cam1"}, big)
        sink.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    producer.join(timeout=0.5)
    assert producer.is_alive()  # waiting on the consumer
    sink.interrupt()
    producer.join(timeout=30)
    consumer.close(linger=0)
    assert not producer.is_alive(), "interrupt() did not end the wait"
    assert sink.sent["cam1"] + sink.dropped["cam1"] == 500 and sink.dropped["cam1"] > 0


def test_subscriber_reads_a_push_sink_with_pull(sink_factory):
    sink = sink_factory(mode="push")
    with Subscriber(sink.endpoint, ["eos."], pull=True) as sub:  # topics filtered on this side
        send(sink, result(0))
        send(sink, StreamEnd("cam1", 1, 1))
        msg = sub.recv(timeout=5)
    assert msg.type == "eos" and msg.seq == 1


def test_an_endpoint_in_use_is_one_line_naming_it(sink_factory):
    sink = sink_factory()
    with pytest.raises(SinkError) as info:
        sink_factory(endpoint=sink.endpoint)
    assert str(info.value) == f"zmq sink: cannot bind {sink.endpoint}: Address already in use"


# -- what a publisher or relay takes from its subscribers (issue 25, point 3) ---------------------

_PEER = """
import os, sys, zmq
from zmq.utils.monitor import recv_monitor_message
ctx = zmq.Context()
sock = ctx.socket(zmq.XSUB)  # may send any message upstream, as a raw ZMTP peer can
monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
sock.connect(sys.argv[1])
for line in sys.stdin.read().split():
    sock.send(bytes.fromhex(line))
said = "kept"
if monitor.poll(int(os.environ.get("WAIT_MS", "0"))) and recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED:
    said = "disconnected"
print(said, flush=True)
os._exit(0)  # libzmq 4.3.5 may crash ending a context whose peer dropped a large message
"""


def peer(endpoint: str, *messages: bytes, wait_ms: int = 0) -> str:
    """A foreign peer in a process of its own: it connects to `endpoint`, sends `messages`, and says
    whether the other side closed its connection within `wait_ms`."""
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PEER, endpoint], input="\n".join(m.hex() for m in messages),
                          capture_output=True, text=True, timeout=60, env={**os.environ, "WAIT_MS": str(wait_ms)})
    return done.stdout.strip()


def test_a_publisher_drops_a_peer_that_sends_a_megabyte_and_goes_on(sink_factory):
    sink = sink_factory()
    assert peer(sink.endpoint, b"\x01" + b"x" * (1 << 20), wait_ms=10_000) == "disconnected"
    with Subscriber(sink.endpoint) as good:
        assert sink.wait_for(1, timeout_s=5)
        for seq in range(5):
            send(sink, result(seq))
        assert [good.recv(timeout=5).seq for _ in range(5)] == list(range(5))
    assert sink.peers <= 1  # the megabyte never counted as a subscriber


def test_a_relay_passes_only_subscriptions_upstream_and_none_over_the_limit(tmp_path):
    from streamlens.config.sinks import ZmqSinkConfig
    from streamlens.scale.forwarder import Forwarder

    ctx = zmq.Context()
    engine = ctx.socket(zmq.XPUB)  # an engine's share, as the supervisor joins it
    engine.setsockopt(zmq.XPUB_VERBOSER, 1)
    engine.bind(f"ipc://{tmp_path}/engine-0")
    relay = Forwarder(ZmqSinkConfig(type="zmq", endpoint="tcp://127.0.0.1:*"), "sinks[0]")
    try:
        relay.start()
        relay.join(0, f"ipc://{tmp_path}/engine-0")
        endpoint = relay.back.getsockopt_string(zmq.LAST_ENDPOINT)
        assert peer(endpoint, b"\x01" + b"y" * 4096, wait_ms=10_000) == "disconnected"
        # on one connection, in order: what came before the subscription was handled before it
        peer(endpoint, b"\x02not a subscription", b"\x03", b"\x01frame.cam1.", wait_ms=2000)  # sent, then held
        got = []
        while b"\x01frame.cam1." not in got:
            assert engine.poll(10_000), got
            got.append(engine.recv())
        assert got == [b"\x01frame.cam1."]
    finally:
        relay.finish()
        engine.close(linger=0)
        ctx.term()
