"""The MQTT sink against a real Mosquitto broker (tests/mosquitto.py starts it): a pipeline's events,
counts, states and availability as a subscriber sees them, during the run and after it (retained);
a broker that is down at the start, restarts mid-run, or never answers; the last will of a killed
process; user name and password from the environment; TLS; the short form in a pipeline file."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import numpy as np

from streamlens.errors import SinkError
from streamlens.frame import Event, Frame, FrameResult, Snapshot, empty_detections
from streamlens.sinks.mqtt import MqttSink
from streamlens.wire.schema import dumps

from . import mosquitto
from .conftest import REPO, sample_pipeline
from .mosquitto import Broker, Subscriber, free_port, have, wait_for

broker = mosquitto.broker  # the fixture: a running broker

LOGGER = "streamlens.sinks.mqtt"


def pipeline_file(tmp_path, sinks: str) -> str:
    """The shipped sample through the motion detector, a line across the road and a zone, with `sinks`."""
    return str(sample_pipeline(tmp_path, sinks))


def count_topics(counts: dict, base: str = "streamlens/cam1/") -> dict[str, bytes]:
    """What a frame's `counts` publish: line totals and per class, zone occupancy."""
    out = {}
    for rule, value in counts.items():
        if isinstance(value, dict):
            out[f"{base}{rule}/in"], out[f"{base}{rule}/out"] = str(value["in"]).encode(), str(value["out"]).encode()
            for label, per in value["classes"].items():
                out[f"{base}{rule}/{label}/in"] = str(per["in"]).encode()
                out[f"{base}{rule}/{label}/out"] = str(per["out"]).encode()
        else:
            out[f"{base}{rule}/count"] = str(value).encode()
    return out


def event(seq: int, label: str = "car", stream: str = "cam1") -> dict:
    return {"v": 1, "type": "event", "stream": stream, "seq": seq, "event": "line_cross", "line": "gate",
            "direction": "in", "object": {"id": seq, "label": label, "score": 0.9, "box": [0, 0, 1, 1]},
            "frame": seq, "pts": seq / 30, "ts": 1.0 + seq}


def frame(seq: int, crossed: int, stream: str = "cam1") -> dict:
    return {"v": 1, "type": "frame", "stream": stream, "seq": seq, "frame": seq, "objects": [],
            "counts": {"gate": {"in": crossed, "out": 0, "classes": {"car": {"in": crossed, "out": 0}}}, "bay": 1}}


def write(sink: MqttSink, message: dict, item=None) -> None:
    sink.write(item, message, dumps(message))


def events_seen(sub: Subscriber, stream: str = "cam1") -> list[int]:
    return [json.loads(p)["seq"] for p in sub.on(f"streamlens/{stream}/events")]


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


# -- a pipeline run ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    """The sample's run with an mqtt sink (the short form) and a jsonl sink, watched by a subscriber
    from before the start; then a second subscriber that connects after the run."""
    import streamlens

    tmp = tmp_path_factory.mktemp("mqtt-run")
    b = Broker(tmp).start()
    live = Subscriber(b.port)
    try:
        live.wait_subscribed()
        path = pipeline_file(tmp, f"  - {{type: mqtt, host: 127.0.0.1, port: {b.port}}}\n"
                                  "  - {type: jsonl, path: out.jsonl}")
        report = streamlens.Pipeline.from_yaml(path).run()
        assert report.exit_code == 0, report.error
        assert wait_for(lambda: live.on("streamlens/available")[-1:] == [b"offline"]), live.messages[-5:]
        late = Subscriber(b.port)
        late.wait_subscribed()
        assert wait_for(lambda: "streamlens/available" in late.last())
        lines = [json.loads(line) for line in (tmp / "out.jsonl").read_text().splitlines()]
        yield lines, live, late
        late.close()
    finally:
        live.close()
        b.stop()


def test_a_subscriber_gets_exactly_the_events_of_the_run_and_its_last_counts(pipeline_run):
    lines, live, _ = pipeline_run
    written = [m for m in lines if m["type"] == "event"]
    frames = [m for m in lines if m["type"] == "frame"]
    received = [json.loads(p) for p in live.on("streamlens/cam1/events")]
    assert written and received == written  # same seq, same bodies, in order, none twice
    last = live.last()
    expected = count_topics(frames[-1]["counts"])
    assert {t: last.get(t) for t in expected} == expected
    assert "streamlens/cam1/across/motion/in" in expected  # per class, as the motion detector labels
    for name in expected:  # published when the value changed, never every frame
        series = [count_topics(f["counts"]).get(name) for f in frames]
        changes = sum(1 for i, v in enumerate(series) if v is not None and (i == 0 or v != series[i - 1]))
        assert 1 <= len(live.on(name)) <= changes < len(frames)


def test_availability_state_eos_and_stats_tell_the_run_from_start_to_end(pipeline_run):
    lines, live, _ = pipeline_run
    topics = [t for t, _, _ in live.messages]
    assert live.messages[0][:2] == ("streamlens/available", b"online")  # before anything else
    assert live.on("streamlens/available") == [b"online", b"offline"]
    assert live.on("streamlens/cam1/state")[-1] == b"end"
    eos = [json.loads(p) for p in live.on("streamlens/cam1/eos")]
    assert eos == [m for m in lines if m["type"] == "eos"]
    assert topics.index("streamlens/cam1/eos") > max(i for i, t in enumerate(topics) if t.endswith("/events"))
    stats = [json.loads(p) for p in live.on("streamlens/cam1/stats")]
    assert stats and stats[-1]["type"] == "stats" and stats[-1]["publisher"]["connected"] is True
    assert "streamlens/cam1/frame" not in topics  # frames: false


def test_a_subscriber_that_connects_after_the_run_finds_the_counts_and_availability_retained(pipeline_run):
    lines, _, late = pipeline_run
    frames = [m for m in lines if m["type"] == "frame"]
    expected = count_topics(frames[-1]["counts"])
    assert wait_for(lambda: {*expected, "streamlens/cam1/state"} <= {t for t, _, kept in late.messages if kept})
    retained = {t: p for t, p, kept in late.messages if kept}
    assert retained["streamlens/available"] == b"offline"
    assert retained["streamlens/cam1/state"] == b"end"
    assert {t: retained.get(t) for t in expected} == expected
    assert not any(t.endswith("/events") or t.endswith("/stats") for t in retained)  # not retained


# -- the broker away -----------------------------------------------------------------------------

def test_a_broker_down_at_the_start_neither_fails_nor_holds_up_the_run(tmp_path, caplog):
    """Nothing listens on the sink's port for the whole run: the run ends as usual, one line says the
    broker cannot be reached, and every message the sink could not deliver is counted."""
    import streamlens

    port = free_port()
    sink = MqttSink("127.0.0.1", port, queue_size=5)
    path = pipeline_file(tmp_path, "  - {type: jsonl, path: out.jsonl}")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        report = streamlens.Pipeline.from_yaml(path, sinks=[sink]).run()
    assert report.exit_code == 0, report.error
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len([m for m in lines if m["type"] == "frame"]) == 300
    queued = [m for m in lines if m["type"] in ("event", "eos")]  # what the queue holds; latest values are kept apart
    assert sink.drops() == {"cam1": len(queued)} and sink.attempts >= 1
    said = warnings(caplog)
    assert len(said) == 2, said
    assert "cannot connect (Connection refused); retrying in the background" in said[0]
    assert f"{len(queued)} message(s) dropped (cam1: {len(queued)})" in said[1]


def test_messages_held_while_the_broker_is_down_go_out_once_it_is_up_and_overflow_is_counted(tmp_path, caplog):
    """The broker is down when the sink opens: the newest `queue_size` events wait, the older ones
    are dropped and counted; once the broker is up they arrive (to a persistent session that waited
    on the broker for them), and so do events written after."""
    b = Broker(tmp_path, persistent=True).start()
    sub = Subscriber(b.port, session="waiting-for-cam1")  # known to the broker, then away
    sub.wait_subscribed()
    sub.close()
    b.stop()
    sink = MqttSink("127.0.0.1", b.port, queue_size=5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        sink.open()
        try:
            assert wait_for(lambda: warnings(caplog))  # the first attempt has failed
            for seq in range(20):
                write(sink, event(seq))
            assert sink.drops() == {"cam1": 15}
            b.start()
            assert wait_for(lambda: sink.connected)
            write(sink, event(20))
            assert wait_for(lambda: sink.pending() == 0)
            sub = Subscriber(b.port, session="waiting-for-cam1")
            assert wait_for(lambda: 20 in events_seen(sub)), events_seen(sub)
            assert events_seen(sub) == list(range(15, 21))
            assert sink.drops() == {"cam1": 15} and sink.sent["cam1"] == 6
        finally:
            sink.close()
            sub.close()
            b.stop()
    said = warnings(caplog)
    assert "cannot connect" in said[0]
    assert "connected after" in said[1] and "(15 message(s) dropped meanwhile)" in said[1]


def test_a_broker_restart_mid_run_loses_nothing_queued_and_sends_nothing_twice(tmp_path, caplog):
    """Events flow (a writer thread, about one a millisecond, and frames with their counts) while the
    broker is stopped and started again on the same port. The sink reconnects; every event written
    from the moment it knew the broker was gone arrives, none twice, and no write ever waited. (What
    was on its way into the dying broker may be lost: QoS 0.)"""
    b = Broker(tmp_path, persistent=True).start()
    sub = Subscriber(b.port, session="restart-watcher")
    sub.wait_subscribed()
    sink = MqttSink("127.0.0.1", b.port, queue_size=100_000)
    written = [0]
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            seq = written[0]
            write(sink, frame(seq, crossed=seq))
            write(sink, event(seq))
            written[0] = seq + 1
            time.sleep(0.001)

    with caplog.at_level(logging.INFO, logger=LOGGER):
        sink.open()
        thread = threading.Thread(target=writer, daemon=True)
        try:
            assert wait_for(lambda: sink.connected)
            thread.start()
            assert wait_for(lambda: len(sub.on("streamlens/cam1/events")) >= 50)
            b.stop()
            assert wait_for(lambda: not sink.connected)
            noticed = written[0]
            b.start()
            assert wait_for(lambda: sink.connected)
            resumed = written[0]
            assert wait_for(lambda: written[0] >= resumed + 50)
            stop.set()
            thread.join(30)
            assert not thread.is_alive()
            last = written[0] - 1
            assert wait_for(lambda: sink.pending() == 0)
            assert wait_for(lambda: last in events_seen(sub)), (last, events_seen(sub)[-3:])
            assert wait_for(lambda: sub.last().get("streamlens/cam1/gate/in") == str(last).encode())
        finally:
            stop.set()
            sink.close()
            sub.close()
            b.stop()
    seen = events_seen(sub)
    assert len(seen) == len(set(seen))
    assert set(range(noticed, last + 1)) <= set(seen)
    assert sink.drops() == {}
    said = warnings(caplog)
    assert len(said) == 2 and "lost the broker" in said[0] and "connected after" in said[1], said


def test_retained_values_are_published_again_after_a_broker_restart_without_persistence(tmp_path):
    """A broker that restarts without persistence forgets retained messages: the sink publishes its
    counts, states and availability again when it reconnects."""
    b = Broker(tmp_path).start()
    sink = MqttSink("127.0.0.1", b.port)
    sink.open()
    try:
        write(sink, frame(0, crossed=7))
        assert wait_for(lambda: sink.connected and sink.pending() == 0)
        sessions = sink.attempts
        b.restart()
        assert wait_for(lambda: sink.attempts > sessions and sink.connected and sink.pending() == 0)
        for _ in range(2):  # the first sees them come (live or retained); the second, retained on the broker
            late = Subscriber(b.port)
            assert wait_for(lambda: {"streamlens/cam1/gate/car/in", "streamlens/available"} <= set(late.last()))
            late.close()
        got = {t: p for t, p, kept in late.messages if kept}
        assert got["streamlens/cam1/gate/in"] == b"7" and got["streamlens/cam1/gate/car/in"] == b"7"
        assert got["streamlens/available"] == b"online" and got["streamlens/cam1/state"] == b"streaming"
    finally:
        sink.close()
        b.stop()


def test_the_last_will_says_offline_when_the_process_is_killed(broker):
    sub = Subscriber(broker.port, "streamlens/available")
    sub.wait_subscribed()
    script = (f"import sys, time; sys.path.insert(0, {str(REPO)!r})\n"
              "from streamlens.sinks.mqtt import MqttSink\n"
              f"sink = MqttSink('127.0.0.1', {broker.port}); sink.open()\n"
              "while not sink.connected: time.sleep(0.01)\n"
              "print('connected', flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "connected"
        assert wait_for(lambda: sub.on("streamlens/available") == [b"online"])
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert wait_for(lambda: sub.on("streamlens/available") == [b"online", b"offline"])
    finally:
        proc.kill()
        sub.close()
    late = Subscriber(broker.port, "streamlens/available")
    assert wait_for(lambda: late.messages)
    assert late.messages == [("streamlens/available", b"offline", True)]
    late.close()


def test_a_broker_that_never_answers_blocks_neither_writes_nor_close():
    """A server that accepts TCP, reads and never replies: every write returns, the overflow is
    counted, and close() returns."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []

    def read_forever(conn):
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass

    def accept():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            threading.Thread(target=read_forever, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    sink = MqttSink("127.0.0.1", server.getsockname()[1], queue_size=50)
    sink.open()
    try:
        assert wait_for(lambda: held)
        writes = threading.Thread(target=lambda: [write(sink, event(seq)) for seq in range(2000)])
        writes.start()
        writes.join(30)
        assert not writes.is_alive()
        assert sink.drops() == {"cam1": 1950} and not sink.connected
    finally:
        closing = threading.Thread(target=sink.close)
        closing.start()
        closing.join(30)
        server.close()
        for conn in held:
            conn.close()
    assert not closing.is_alive()
    assert sink.drops() == {"cam1": 2000}


def test_a_stuck_broker_blocks_neither_writes_nor_close(broker):
    """The broker stops reading mid-run (SIGSTOP): the socket fills, writes still return at once
    (what does not fit is dropped and counted), close() gives up flushing and returns; interrupt()
    makes a second sink's close() skip the flush."""
    stuck = [MqttSink("127.0.0.1", broker.port, queue_size=100) for _ in range(2)]
    for sink in stuck:
        sink.open()
    try:
        assert wait_for(lambda: all(s.connected for s in stuck))
        os.kill(broker.proc.pid, signal.SIGSTOP)
        big = b"x" * 20_000
        for sink in stuck:
            writes = threading.Thread(target=lambda s=sink: [s.write(None, event(seq), big) for seq in range(3000)])
            writes.start()
            writes.join(60)
            assert not writes.is_alive()
            assert sink.dropped_total > 0
        stuck[1].interrupt()
        for sink in stuck:
            closing = threading.Thread(target=sink.close)
            closing.start()
            closing.join(30)
            assert not closing.is_alive()
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    assert sum(stuck[0].drops().values()) + stuck[0].sent["cam1"] == 3000


# -- credentials and TLS -------------------------------------------------------------------------

def test_user_name_and_password_come_from_the_environment(tmp_path, monkeypatch, caplog):
    if not have("mosquitto_passwd"):
        pytest.skip("mosquitto_passwd is not installed (Debian package `mosquitto`)")
    passwords = tmp_path / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(passwords), "cam", "s3cret-pw"], check=True,
                   capture_output=True)
    b = Broker(tmp_path, extra=f"allow_anonymous false\npassword_file {passwords}").start()
    try:
        sub = Subscriber(b.port, username="cam", password="s3cret-pw")
        sub.wait_subscribed()
        monkeypatch.setenv("STREAMLENS_MQTT_USERNAME", "cam")
        monkeypatch.setenv("STREAMLENS_MQTT_PASSWORD", "s3cret-pw")
        good = MqttSink("127.0.0.1", b.port)
        good.open()
        assert wait_for(lambda: good.connected)
        write(good, event(0))
        assert wait_for(lambda: events_seen(sub) == [0])
        good.close()
        sub.close()

        monkeypatch.setenv("STREAMLENS_MQTT_PASSWORD", "wrong-pw")
        refused = MqttSink("127.0.0.1", b.port)
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            refused.open()
            assert wait_for(lambda: refused.attempts >= 3)
            assert not refused.connected
            refused.close()
        said = warnings(caplog)
        assert len(said) == 1 and "the broker refused the connection: Not authorized" in said[0], said
        assert "$STREAMLENS_MQTT_USERNAME, $STREAMLENS_MQTT_PASSWORD" in said[0]
        assert "wrong-pw" not in caplog.text

        monkeypatch.delenv("STREAMLENS_MQTT_USERNAME")
        alone = MqttSink("127.0.0.1", b.port)
        alone.where = "sinks[0]"
        with pytest.raises(SinkError, match=r"^sinks\[0\]\.password_env: STREAMLENS_MQTT_PASSWORD is set but "
                                            r"STREAMLENS_MQTT_USERNAME is not"):
            alone.open()
    finally:
        b.stop()


def test_without_credentials_a_broker_that_wants_them_is_retried_and_said_once(tmp_path, monkeypatch, caplog):
    if not have("mosquitto_passwd"):
        pytest.skip("mosquitto_passwd is not installed (Debian package `mosquitto`)")
    passwords = tmp_path / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(passwords), "cam", "pw"], check=True, capture_output=True)
    monkeypatch.delenv("STREAMLENS_MQTT_USERNAME", raising=False)
    monkeypatch.delenv("STREAMLENS_MQTT_PASSWORD", raising=False)
    b = Broker(tmp_path, extra=f"allow_anonymous false\npassword_file {passwords}").start()
    sink = MqttSink("127.0.0.1", b.port)
    try:
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            sink.open()
            write(sink, event(0))
            assert wait_for(lambda: sink.attempts >= 3)
            assert not sink.connected
    finally:
        sink.close()
        b.stop()
    said = warnings(caplog)
    assert len(said) == 2 and "cannot connect (the broker refused the connection: Not authorized" in said[0]
    assert "1 message(s) dropped" in said[1]


def make_certificates(folder) -> tuple[str, str, str]:
    """A CA and a broker certificate for 127.0.0.1 signed by it (EC keys: fast)."""
    ca, ca_key, cert, key = (str(folder / n) for n in ("ca.pem", "ca.key", "server.pem", "server.key"))
    ext = folder / "san.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for args in (["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=streamlens test CA"],
                 ["req", *ec, "-keyout", key, "-out", str(folder / "server.csr"), "-subj", "/CN=127.0.0.1"],
                 ["x509", "-req", "-in", str(folder / "server.csr"), "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
                  "-out", cert, "-days", "2", "-extfile", str(ext)]):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    return ca, cert, key


def test_tls_with_the_brokers_ca_and_a_clear_line_without_it(tmp_path, caplog):
    if not have("openssl"):
        pytest.skip("openssl is not installed: no certificates for a TLS broker")
    ca, cert, key = make_certificates(tmp_path)
    b = Broker(tmp_path, extra=f"cafile {ca}\ncertfile {cert}\nkeyfile {key}").start()
    sub = Subscriber(b.port, tls_ca=ca)
    trusting = MqttSink("127.0.0.1", b.port, tls=True, ca_file=ca)
    doubting = MqttSink("127.0.0.1", b.port, tls=True)  # the system's CAs do not know this one
    try:
        sub.wait_subscribed()
        with caplog.at_level(logging.INFO, logger=LOGGER):
            trusting.open()
            doubting.open()
            write(trusting, event(0))
            assert wait_for(lambda: events_seen(sub) == [0])
            assert wait_for(lambda: doubting.attempts >= 2)
            assert not doubting.connected
    finally:
        trusting.close()
        doubting.close()
        sub.close()
        b.stop()
    said = warnings(caplog)
    assert len(said) == 1 and "cannot connect (TLS: certificate verify failed" in said[0], said


# -- the pipeline file ---------------------------------------------------------------------------

def test_the_short_form_builds_an_mqtt_sink_and_a_bad_qos_is_one_line(tmp_path):
    from streamlens.config import load_pipeline
    from streamlens.errors import ConfigError
    from streamlens.sinks import build_sink

    (tmp_path / "clip.mp4").write_bytes(b"")
    path = tmp_path / "p.yaml"
    head = "sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nsinks:\n"
    path.write_text(head + "  - {type: mqtt, host: 127.0.0.1, port: 1883}\n")
    sink = build_sink(load_pipeline(path).sinks[0], {}, where="sinks[0]")
    assert isinstance(sink, MqttSink)
    assert (sink.host, sink.port, sink.topic, sink.qos, sink.retain, sink.queue_size) == (
        "127.0.0.1", 1883, "streamlens", 0, True, 10_000)
    assert sink.inline and sink.wants_stats and sink.key("host") == "sinks[0].host"
    path.write_text(head + "  - {type: mqtt, host: 127.0.0.1, port: 1883, qos: 3}\n")
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert info.value.problems == [f"{path}: sinks[0].qos: unknown 3 (0, 1, 2)"]


def test_an_events_snapshot_is_retained_under_its_label(broker):
    """Frigate's layout: `<topic>/<stream>/<label>/snapshot` holds the JPEG of the label's last event."""
    live = Subscriber(broker.port, "cams/#")
    live.wait_subscribed()
    sink = MqttSink("127.0.0.1", broker.port, topic="cams")
    sink.open()
    try:
        result = FrameResult(Frame("gate", 0, 0.0, 0.0, np.zeros((2, 2, 3), np.uint8)), 0, True, empty_detections())
        item = Event("gate", 0, {}, result, Snapshot(b"\xff\xd8jpeg\xff\xd9", "crop", 0))
        write(sink, event(0, label="person", stream="gate"), item)
        assert wait_for(lambda: live.on("cams/gate/person/snapshot"))
    finally:
        sink.close()
    assert wait_for(lambda: live.on("cams/available")[-1:] == [b"offline"])
    live.close()
    late = Subscriber(broker.port, "cams/#")
    assert wait_for(lambda: {"cams/gate/person/snapshot", "cams/available"} <= set(late.last()))
    retained = {t: p for t, p, kept in late.messages if kept}
    assert retained["cams/gate/person/snapshot"] == b"\xff\xd8jpeg\xff\xd9" and retained["cams/available"] == b"offline"
    assert json.loads(live.on("cams/gate/events")[0])["object"]["label"] == "person"
    late.close()


def test_frames_stats_and_retain_do_what_they_say(broker):
    """`frames: true` publishes every frame message; `stats: false` no stats; `retain: false` retains
    nothing, not even availability."""
    live = Subscriber(broker.port, "plain/#")
    live.wait_subscribed()
    sink = MqttSink("127.0.0.1", broker.port, topic="plain", frames=True, stats=False, retain=False)
    assert not sink.wants_stats
    sink.open()
    try:
        for seq in range(3):
            write(sink, frame(seq, crossed=1))
        write(sink, {"v": 1, "type": "eos", "stream": "cam1", "seq": 3, "frames": 3, "reason": "stopped"})
        assert wait_for(lambda: live.on("plain/cam1/eos"))
    finally:
        sink.close()
    assert wait_for(lambda: live.on("plain/available")[-1:] == [b"offline"])  # the sink's last message
    assert [json.loads(p)["seq"] for p in live.on("plain/cam1/frame")] == [0, 1, 2]
    assert live.on("plain/cam1/gate/in") == [b"1"] and live.on("plain/cam1/state")[-1] == b"stopped"
    live.close()
    late = Subscriber(broker.port, "plain/#")
    late.wait_subscribed()
    write_probe = MqttSink("127.0.0.1", broker.port, topic="probe")  # a message after the subscription:
    write_probe.open()  # once it arrives, any retained message of `plain/` would have come before it
    late.client.subscribe("probe/available", 1)
    assert wait_for(lambda: late.on("probe/available"))
    write_probe.close()
    assert [t for t, _, _ in late.messages if t.startswith("plain/")] == []
    late.close()


def test_a_ca_file_that_is_no_certificate_is_one_line_naming_the_key(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    sink = MqttSink("127.0.0.1", free_port(), tls=True, ca_file=bad)
    sink.where = "sinks[2]"
    with pytest.raises(SinkError, match=r"^sinks\[2\]\.ca_file: cannot read .*ca\.pem: "):
        sink.open()


@pytest.mark.parametrize("qos", [1, 2])
def test_qos_1_and_2_are_acknowledged_before_they_count_as_sent(broker, qos):
    sub = Subscriber(broker.port)
    sub.wait_subscribed()
    sink = MqttSink("127.0.0.1", broker.port, qos=qos)
    sink.open()
    try:
        for seq in range(307):  # many more than may be unacknowledged at a time (MAX_INFLIGHT_ACKED)
            write(sink, event(seq))
        assert wait_for(lambda: sink.pending() == 0)
        assert sink.sent["cam1"] == 307 and sink.drops() == {}
        assert wait_for(lambda: len(events_seen(sub)) == 307)
        assert events_seen(sub) == list(range(307))
    finally:
        sink.close()
        sub.close()


@pytest.mark.parametrize("host, tls, warned", [
    ("192.0.2.7", False, True),  # another machine, no TLS: the password in clear
    ("192.0.2.7", True, False),
    ("127.0.0.1", False, False),  # this machine
])
def test_a_password_without_tls_to_another_machine_is_warned_of(host, tls, warned, monkeypatch, caplog):
    monkeypatch.setenv("STREAMLENS_MQTT_USERNAME", "cam")
    monkeypatch.setenv("STREAMLENS_MQTT_PASSWORD", "s3cret-pw")
    sink = MqttSink(host, free_port(), tls=tls)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        sink.open()  # never waits for the broker
        sink.close()
    said = [r.getMessage() for r in caplog.records if "without TLS" in r.getMessage()]
    assert len(said) == int(warned), said
    assert "s3cret-pw" not in caplog.text
