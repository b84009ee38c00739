"""The zmq sink's keys in the pipeline file: what loads, and one line per mistake naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq

from streamlens.config import load_pipeline
from streamlens.errors import ConfigError, SinkError
from streamlens.sinks import build_sink
from streamlens.sinks.zmq import DEFAULT_LINGER_MS, DEFAULT_SEND_TIMEOUT_S
from streamlens.wire.keys import make_keys

HEAD = "sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\n"


def pipeline(tmp_path: Path, sink: str) -> Path:
    (tmp_path / "clip.mp4").write_bytes(b"")
    path = tmp_path / "p.yaml"
    path.write_text(f"{HEAD}sinks:\n  - {sink}\n")
    return path


def test_every_zmq_key_loads_and_builds_the_sink(tmp_path):
    make_keys(tmp_path / "keys", ["server", "client"], authorize=("client",))
    cfg = load_pipeline(pipeline(tmp_path, """{type: zmq, endpoint: "tcp://127.0.0.1:5555", mode: push,
      format: msgpack, hwm: 50, wait_subscribers: 2, wait_timeout_s: 5, frames: jpeg, jpeg_quality: 70,
      annotate: false, send_timeout_s: 10, linger_ms: 500,
      curve: {server_secret: keys/server.key_secret, authorized: keys/authorized}}"""))
    sink = build_sink(cfg.sinks[0], {})
    assert (sink.endpoint, sink.mode, sink.format, sink.hwm) == ("tcp://127.0.0.1:5555", "push", "msgpack", 50)
    assert (sink.wait_subscribers, sink.wait_timeout_s, sink.frames, sink.jpeg_quality, sink.annotate) == \
        (2, 5.0, "jpeg", 70, False)
    assert (sink.send_timeout_s, sink.linger_ms) == (10.0, 500)
    assert sink.curve == {"server_secret": tmp_path / "keys" / "server.key_secret",
                          "authorized": tmp_path / "keys" / "authorized"}


def test_the_short_form_keeps_its_defaults(tmp_path):
    sink = build_sink(load_pipeline(pipeline(tmp_path, '{type: zmq, endpoint: "tcp://127.0.0.1:5555"}')).sinks[0], {})
    assert (sink.mode, sink.format, sink.hwm, sink.wait_subscribers, sink.frames, sink.linger_ms) == \
        ("pub", "json", 1000, 0, "none", 200)
    assert sink.curve == {}


def test_a_push_sink_never_waits_for_ever_by_default(tmp_path):
    cfg = load_pipeline(pipeline(tmp_path, '{type: zmq, endpoint: "tcp://127.0.0.1:5555", mode: push}'))
    sink = build_sink(cfg.sinks[0], {})
    assert (sink.send_timeout_s, sink.linger_ms) == (DEFAULT_SEND_TIMEOUT_S, DEFAULT_LINGER_MS["push"])
    assert 0 < sink.send_timeout_s < float("inf")


def test_a_sink_that_cannot_bind_names_its_key(tmp_path):
    with zmq.Context() as ctx, ctx.socket(zmq.PUB) as taken:
        port = taken.bind_to_random_port("tcp://127.0.0.1")
        cfg = load_pipeline(pipeline(tmp_path, f'{{type: zmq, endpoint: "tcp://127.0.0.1:{port}"}}'))
        sink = build_sink(cfg.sinks[0], {}, where="sinks[0]")
        with pytest.raises(SinkError) as info:
            sink.open()
    assert str(info.value) == f"sinks[0].endpoint: cannot bind tcp://127.0.0.1:{port}: Address already in use"


@pytest.mark.parametrize("sink, expected", [
    ("{type: zmq, endpoint: 'tcp://x:1', mode: pull}", "sinks[0].mode: unknown 'pull' (pub, push)"),
    ("{type: zmq, endpoint: 'tcp://x:1', format: xml}", "sinks[0].format: unknown 'xml' (json, msgpack)"),
    ("{type: zmq, endpoint: 'tcp://x:1', frames: png}", "sinks[0].frames: unknown 'png' (none, jpeg)"),
    ("{type: zmq, endpoint: 'tcp://x:1', jpeg_quality: 0}", "sinks[0].jpeg_quality: must be >= 1, got 0"),
    ("{type: zmq, endpoint: 'tcp://x:1', wait_subscribers: -1}", "sinks[0].wait_subscribers: must be >= 0, got -1"),
    ("{type: zmq, endpoint: 'tcp://x:1', wait_subscribers: three}",
     "sinks[0].wait_subscribers: wrong type: expected an integer, got 'three'"),
    ("{type: zmq, endpoint: 'tcp://x:1', send_timeout_s: 5}", "sinks[0].send_timeout_s: only for mode push"),
    ("{type: zmq, endpoint: 'tcp://x:1', topics: [a]}", "sinks[0].topics: unknown key (expected one of: type,"),
    ("{type: zmq, endpoint: 'tcp://x:1', curve: {}}", "sinks[0].curve.server_secret: missing"),
    ("{type: zmq, endpoint: 'tcp://x:1', curve: {server_secret: keys/server.key_secret, client: c}}",
     "sinks[0].curve.client: unknown key (expected one of: server_secret, authorized)"),
    ("{type: zmq, endpoint: 'tcp://x:1', curve: {server_secret: nope.key_secret}}",
     "sinks[0].curve.server_secret: {tmp}/nope.key_secret: file not found"),
    ("{type: zmq, endpoint: 'tcp://x:1', curve: {server_secret: keys/server.key}}",
     "sinks[0].curve.server_secret: {tmp}/keys/server.key: no secret key in this file (use the .key_secret file)"),
    ("{type: zmq, endpoint: 'tcp://x:1', curve: {server_secret: clip.mp4}}",
     "sinks[0].curve.server_secret: {tmp}/clip.mp4: not a CurveZMQ key file"),
    ("{type: zmq, endpoint: 'tcp://x:1', curve: {server_secret: keys/server.key_secret, authorized: nope}}",
     "sinks[0].curve.authorized: folder not found: {tmp}/nope"),
    ("{type: zmq, endpoint: 'tcp://x:1', curve: keys}", "sinks[0].curve: wrong type: expected a mapping, got 'keys'"),
])
def test_each_zmq_mistake_is_one_line_naming_the_key(tmp_path, sink, expected):
    make_keys(tmp_path / "keys", ["server"])
    path = pipeline(tmp_path, sink)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    found = info.value.problems
    assert len(found) == 1, found
    assert found[0].startswith(f"{path}: {expected.replace('{tmp}', str(tmp_path))}"), found
