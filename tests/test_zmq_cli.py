"""`streamlens subscribe` and `streamlens keygen` as a user runs them, against a real zmq sink on
loopback: JSON lines, gap reports, and CurveZMQ letting in the right key only."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import numpy as np
import zmq

from streamlens.frame import Frame, FrameResult, StatsReport, StreamEnd, empty_detections
from streamlens.sinks.zmq import ZmqSink
from streamlens.wire.schema import dumps, message_for

from .conftest import REPO, streamlens


def subscribe(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streamlens", "subscribe", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def send(sink: ZmqSink, item) -> None:
    message = message_for(item)
    sink.write(item, message, dumps(message))


def result(seq: int, stream: str = "cam1") -> FrameResult:
    frame = Frame(stream, seq, seq / 25, time.time(), np.zeros((48, 64, 3), np.uint8))
    return FrameResult(frame, seq, False, empty_detections())


def test_keygen_writes_key_pairs_and_never_overwrites(tmp_path):
    keys = tmp_path / "keys"
    made = streamlens("keygen", str(keys))
    assert made.returncode == 0, made.stderr
    names = sorted(p.relative_to(keys).as_posix() for p in keys.rglob("*") if p.is_file())
    assert names == ["authorized/client.key", "client.key", "client.key_secret", "server.key", "server.key_secret"]
    assert (keys / "server.key_secret").stat().st_mode & 0o077 == 0
    assert f"curve: {{server_secret: {keys}/server.key_secret, authorized: {keys}/authorized}}" in made.stdout
    again = streamlens("keygen", str(keys))
    assert again.returncode == 1
    assert again.stderr == f"streamlens: error: {keys}/server.key exists; not overwriting a key (remove it first)\n"
    added = streamlens("keygen", str(keys), "alice")  # one more subscriber for the same publisher
    assert added.returncode == 0 and (keys / "authorized" / "alice.key").is_file()


def test_subscribe_prints_json_lines_and_reports_gaps(tmp_path):
    sink = ZmqSink("tcp://127.0.0.1:*")
    sink.open()
    try:
        proc = subscribe(sink.endpoint, "--until-eos", "--timeout", "20")
        assert sink.wait_for(1, timeout_s=20)
        for seq in [0, 1, 2, 3, 6, 7, 8, 9]:  # 4 and 5 never sent: lost on the way
            send(sink, result(seq))
        send(sink, StreamEnd("cam1", 10, 10))
        out, err = proc.communicate(timeout=20)
    finally:
        sink.close()
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]  # every line is one JSON object
    assert [(m["type"], m["seq"]) for m in lines] == [("frame", s) for s in (0, 1, 2, 3, 6, 7, 8, 9)] + [("eos", 10)]
    assert err.splitlines() == [
        "streamlens subscribe: gap: cam1: 2 message(s) lost (seq 4 to 5)",
        "streamlens subscribe: 9 message(s), 2 lost in 1 gap(s)",
    ]


def test_a_stream_filter_is_exact_cam1_never_receives_cam10():
    """Topics end in a dot (`frame.cam1.`), so `--stream cam1`, `--topic frame.cam1` and a plain
    pyzmq SUB on `frame.cam1.` receive cam1 alone, while `frame.` still receives both streams."""
    sink = ZmqSink("tcp://127.0.0.1:*")
    sink.open()
    ctx = zmq.Context()
    plain, every_frame = ctx.socket(zmq.SUB), ctx.socket(zmq.SUB)
    try:
        by_stream = subscribe(sink.endpoint, "--stream", "cam1", "--until-eos", "--timeout", "20")
        by_topic = subscribe(sink.endpoint, "--topic", "frame.cam1", "--topic", "eos.cam1", "--until-eos",
                             "--timeout", "20")
        for sock, prefix in ((plain, b"frame.cam1."), (every_frame, b"frame.")):
            sock.subscribe(prefix)
            sock.connect(sink.endpoint)
        assert sink.wait_for(4 + 2 + 2, timeout_s=20)  # --stream subscribes to each type of cam1's
        for seq in range(3):
            for stream in ("cam10", "cam1"):
                send(sink, result(seq, stream))
        for stream in ("cam10", "cam1"):
            send(sink, StatsReport(stream, {"fps": 25.0}))
            send(sink, StreamEnd(stream, 3, 3))
        outputs = [p.communicate(timeout=20) for p in (by_stream, by_topic)]
        plain_got = [plain.recv_multipart()[0] for _ in range(3)]
        every_got = [every_frame.recv_multipart()[0] for _ in range(6)]
        assert not plain.poll(200) and not every_frame.poll(200)  # nothing else came
    finally:
        plain.close(linger=0)
        every_frame.close(linger=0)
        ctx.term()
        sink.close()
    (stream_out, stream_err), (topic_out, topic_err) = outputs
    assert by_stream.returncode == 0 and by_topic.returncode == 0, stream_err + topic_err
    assert [(m["type"], m["stream"], m.get("seq")) for m in map(json.loads, stream_out.splitlines())] == [
        ("frame", "cam1", 0), ("frame", "cam1", 1), ("frame", "cam1", 2), ("stats", "cam1", None), ("eos", "cam1", 3)]
    assert [(m["type"], m["stream"]) for m in map(json.loads, topic_out.splitlines())] == \
        [("frame", "cam1")] * 3 + [("eos", "cam1")]
    assert plain_got == [b"frame.cam1."] * 3
    assert sorted(set(every_got)) == [b"frame.cam1.", b"frame.cam10."] and len(every_got) == 6


def test_subscribe_prints_valid_json_even_when_a_payload_holds_nan():
    """MessagePack carries NaN; the JSON lines `streamlens subscribe` prints carry null instead."""
    sink = ZmqSink("tcp://127.0.0.1:*", format="msgpack")
    sink.open()
    try:
        proc = subscribe(sink.endpoint, "--until-eos", "--timeout", "20")
        assert sink.wait_for(1, timeout_s=20)
        send(sink, StatsReport("cam1", {"fps": float("nan"), "latency_ms": {"p95": float("inf")}}))
        send(sink, StreamEnd("cam1", 0, 0))
        out, err = proc.communicate(timeout=20)
    finally:
        sink.close()
    assert proc.returncode == 0, err
    assert "NaN" not in out and "Infinity" not in out
    stats = json.loads(out.splitlines()[0])
    assert stats["fps"] is None and stats["latency_ms"] == {"p95": None}


def test_curve_lets_in_the_right_key_and_nobody_else(tmp_path):
    keys, other = tmp_path / "keys", tmp_path / "other"
    assert streamlens("keygen", str(keys)).returncode == 0
    assert streamlens("keygen", str(other)).returncode == 0  # keys the publisher does not know
    sink = ZmqSink("tcp://127.0.0.1:*", curve={"server_secret": keys / "server.key_secret",
                                               "authorized": keys / "authorized"})
    sink.open()
    try:
        right = subscribe(sink.endpoint, "--until-eos", "--timeout", "20",
                          "--server-key", str(keys / "server.key"), "--client-key", str(keys / "client.key_secret"))
        unknown_client = subscribe(sink.endpoint, "--timeout", "3", "--server-key", str(keys / "server.key"),
                                   "--client-key", str(other / "client.key_secret"))
        wrong_server = subscribe(sink.endpoint, "--timeout", "3", "--server-key", str(other / "server.key"),
                                 "--client-key", str(keys / "client.key_secret"))
        assert sink.wait_for(1, timeout_s=20)
        for seq in range(20):  # for about 2 s, while the others keep trying
            send(sink, result(seq))
            time.sleep(0.1)
        send(sink, StreamEnd("cam1", 20, 20))
        assert sink.peers == 1  # only the right key ever subscribed
        outputs = [p.communicate(timeout=20) for p in (right, unknown_client, wrong_server)]
    finally:
        sink.close()
    (right_out, right_err), (unknown_out, unknown_err), (wrong_out, wrong_err) = outputs
    assert right.returncode == 0, right_err
    assert [json.loads(line)["seq"] for line in right_out.splitlines()] == list(range(21))
    assert unknown_out == "" and "0 message(s)" in unknown_err
    assert wrong_out == "" and "0 message(s)" in wrong_err


def test_subscribe_mistakes_are_one_line(tmp_path):
    bad_endpoint = streamlens("subscribe", "127.0.0.1:5555", "--timeout", "0.1")
    assert bad_endpoint.returncode == 1
    assert bad_endpoint.stderr == "streamlens: error: cannot connect to '127.0.0.1:5555': Invalid argument\n"
    bad_stream = streamlens("subscribe", "tcp://127.0.0.1:5555", "--stream", "cam.1", "--timeout", "0.1")
    assert bad_stream.returncode == 1
    assert bad_stream.stderr == ("streamlens: error: stream 'cam.1': a stream name is not empty and holds no '.' "
                                 "(the dot ends a topic)\n")
    missing = tmp_path / "server.key"
    no_key = streamlens("subscribe", "tcp://127.0.0.1:5555", "--server-key", str(missing))
    assert no_key.returncode == 1
    assert no_key.stderr == f"streamlens: error: {missing}: file not found\n"


def test_streamlens_run_publishes_the_sample_to_a_subscriber_started_first(tmp_path):
    """The whole path as a user takes it, on the sample the repository ships: `streamlens run`
    with a zmq sink (msgpack) waits for `streamlens subscribe`, which gets every frame and the eos."""
    port = free_port()
    (tmp_path / "p.yaml").write_text(f"""
sources: [{{name: cam1, uri: {REPO / "samples" / "traffic.mp4"}}}]
detector: {{backend: motion}}
keyframes: {{interval: 5}}
tracker: none
sinks: [{{type: zmq, endpoint: "tcp://127.0.0.1:{port}", format: msgpack, wait_subscribers: 1, wait_timeout_s: 60}}]
""")
    sub = subscribe(f"tcp://127.0.0.1:{port}", "--until-eos", "--timeout", "60")
    run = streamlens("run", "-q", str(tmp_path / "p.yaml"), timeout=120)
    out, err = sub.communicate(timeout=60)
    assert run.returncode == 0, run.stderr
    assert sub.returncode == 0 and err.endswith("0 lost in 0 gap(s)\n"), err
    lines = [json.loads(line) for line in out.splitlines()]
    frames = [m for m in lines if m["type"] == "frame"]
    assert [m["seq"] for m in frames] == list(range(300)) and lines[-1]["type"] == "eos"
    assert (frames[0]["width"], frames[0]["height"]) == (640, 360)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
