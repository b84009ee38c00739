"""The webhook sink against a real HTTP server on 127.0.0.1 (started here, recording what it gets):
a pipeline's events arrive as the JSONL file holds them, in order, as JSON; kinds are filtered;
the cooldown holds back one rule on media time, not the others; 5xx is retried, 4xx refused; a
server that stalls or is not there never holds up the pipeline, and every loss is counted; the
bearer token comes from the environment; the pipeline file's short form builds it."""

from __future__ import annotations

import http.server
import json
import logging
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import streamlens
from streamlens.config import load_pipeline
from streamlens.config.model import WebhookSinkConfig
from streamlens.errors import ConfigError, SinkError
from streamlens.frame import Event, Frame, FrameResult, empty_detections
from streamlens.sinks import build_sink
from streamlens.sinks.webhook import WebhookSink
from streamlens.wire.schema import dumps, message_for

from .conftest import REPO, sample_pipeline
from .test_workers import free_port

WAIT_S = 30  # generous: a condition, never a race


class Hook:
    """What the server got (`requests`: method, path, headers, body, client port) and how it
    answers: `answers` in turn, then `status`; with `stall`, it reads a request and never answers."""

    def __init__(self):
        self.requests: list[dict] = []
        self.answers: list[int] = []
        self.status = 200
        self.stall = False
        self.release = threading.Event()  # ends the stalls (at the end of the test)
        self.cond = threading.Condition()
        self.url = ""

    def wait_for(self, count: int) -> list[dict]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.requests) >= count, WAIT_S), self.requests
            return list(self.requests)

    def bodies(self, path: str | None = None) -> list[dict]:
        with self.cond:
            return [json.loads(r["body"]) for r in self.requests if path is None or r["path"] == path]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real endpoint

    def do_POST(self):
        hook: Hook = self.server.hook
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with hook.cond:
            hook.requests.append({"method": "POST", "path": self.path, "headers": dict(self.headers), "body": body,
                                  "port": self.client_address[1]})
            hook.cond.notify_all()
            stall = hook.stall
            status = hook.answers.pop(0) if hook.answers else hook.status
        if stall:
            hook.release.wait(WAIT_S)
            self.close_connection = True
            return
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.hook = found = Hook()
    found.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        found.release.set()
        server.shutdown()
        server.server_close()


def event(kind: str, seq: int, pts: float, stream: str = "cam1", label: str = "car", **keys):
    """write()'s arguments for one crafted event at media time `pts`."""
    frame = Frame(stream, seq, pts, 1_700_000_000.0 + pts, np.zeros((4, 4, 3), np.uint8))
    body = {"event": kind, **keys, "object": {"id": seq, "label": label, "score": 0.9, "box": [0, 0, 2, 2]}}
    item = Event(stream, seq, body, FrameResult(frame, seq, True, empty_detections()))
    message = message_for(item)
    return item, message, dumps(message)


def closed(sink: WebhookSink) -> bool:
    """Close `sink` on a thread of its own; whether close() returned (it is bounded)."""
    thread = threading.Thread(target=sink.close, daemon=True)
    thread.start()
    thread.join(WAIT_S)
    return not thread.is_alive()


def webhook_pipeline(folder: Path, more: str) -> Path:
    return sample_pipeline(folder, "  - {type: jsonl, path: out.jsonl}\n" + more)


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    """The sample through a pipeline with a line, a zone and two webhook sinks (every event to
    /all, line crossings to /cross): the server's requests and the jsonl file's messages."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.hook = found = Hook()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    folder = tmp_path_factory.mktemp("webhook")
    path = webhook_pipeline(folder, f"""  - {{type: webhook, url: "{base}/all", timeout_s: 30}}
  - {{type: webhook, url: "{base}/cross", events: [line_cross], timeout_s: 30}}
""")
    try:
        report = streamlens.Pipeline.from_yaml(path).run()
    finally:
        server.shutdown()
        server.server_close()
    assert report.exit_code == 0, report.error
    written = (folder / "out.jsonl").read_bytes().splitlines()
    return found, written


def test_a_pipeline_posts_exactly_the_events_of_its_jsonl_in_order_as_json(sample_run):
    found, written = sample_run
    events = [line for line in written if json.loads(line)["type"] == "event"]
    posted = [r for r in found.requests if r["path"] == "/all"]
    assert events and [r["body"] for r in posted] == events  # the same bytes, in the same order
    assert {r["method"] for r in posted} == {"POST"}
    assert {r["headers"]["Content-Type"] for r in posted} == {"application/json"}
    assert len({r["port"] for r in posted}) == 1  # one keep-alive connection


def test_events_filter_posts_only_the_kinds_asked_for(sample_run):
    found, written = sample_run
    crossings = [json.loads(line) for line in written if json.loads(line).get("event") == "line_cross"]
    assert crossings and found.bodies("/cross") == crossings
    assert len(found.bodies("/all")) > len(crossings)  # there were other kinds to leave out


def test_cooldown_holds_back_a_rule_on_media_time_and_not_the_others(hook):
    sink = WebhookSink(hook.url, cooldown_s=10)
    sink.open()
    writes = [
        event("line_cross", 0, 0.0, line="gate"),    # posted: opens gate's window, 0 .. 10 s
        event("line_cross", 1, 1.0, line="gate"),    # skipped
        event("line_cross", 2, 1.0, line="exit"),    # posted: another rule
        event("zone_enter", 3, 2.0, zone="gate"),    # posted: another kind
        event("line_cross", 4, 2.0, line="gate", stream="cam2"),  # posted: another stream
        event("object_start", 5, 3.0, label="car"),  # posted: object_* events' rule is the label
        event("object_start", 6, 4.0, label="car"),  # skipped
        event("object_start", 7, 4.0, label="person"),  # posted
        event("line_cross", 8, 9.9, line="gate"),    # skipped
        event("line_cross", 9, 10.5, line="gate"),   # posted: the window has passed, in media time
        event("line_cross", 10, 0.5, line="gate"),   # skipped: the file looped, media time goes on
    ]
    for args in writes:
        sink.write(*args)
    hook.wait_for(7)
    assert closed(sink)
    assert [b["seq"] for b in hook.bodies()] == [0, 2, 3, 4, 5, 7, 9]
    counts = sink.counters()
    assert (counts["posted"], counts["skipped"], counts["dropped"]) == (7, 4, 0)
    assert sink.drops() == {}  # skipped by design is no loss


def test_5xx_is_retried_until_it_passes_and_4xx_is_refused_at_once(hook, caplog):
    caplog.set_level(logging.WARNING, logger="streamlens.sinks.webhook")
    hook.answers = [500, 500]
    sink = WebhookSink(hook.url, retries=3)
    sink.open()
    sink.write(*event("line_cross", 0, 0.0, line="gate"))
    hook.wait_for(3)
    assert closed(sink)
    assert len(hook.requests) == 3 and len({r["body"] for r in hook.requests}) == 1
    assert sink.counters()["posted"] == 1 and sink.drops() == {}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # one when it began to fail, one when it worked again; none per try
    assert "HTTP 500" in lines[0] and "works again" in lines[1]

    hook.requests.clear()
    hook.status = 404
    sink = WebhookSink(hook.url, retries=3)
    sink.open()
    sink.write(*event("line_cross", 0, 0.0, line="gate"))
    hook.wait_for(1)
    assert closed(sink)
    assert len(hook.requests) == 1  # not retried
    counts = sink.counters()
    assert (counts["refused"], counts["failed"], counts["posted"]) == (1, 0, 0)
    assert sink.drops() == {"cam1": 1}


def test_a_stalled_server_never_blocks_write_and_close_returns(hook):
    hook.stall = True
    sink = WebhookSink(hook.url, timeout_s=1, retries=0, queue_size=5)
    sink.open()
    sink.write(*event("line_cross", 0, 0.0, line="gate"))
    hook.wait_for(1)  # the worker's request is held unanswered
    for seq in range(1, 51):
        sink.write(*event("line_cross", seq, float(seq), line="gate"))  # each returns: only queued
    assert sink.counters()["dropped"] > 0  # the queue overflowed, and said so
    assert closed(sink)
    counts = sink.counters()
    assert counts["posted"] == 0 and counts["dropped"] + counts["failed"] == 51
    assert sink.drops() == {"cam1": 51}


def test_interrupt_stops_at_once_even_with_a_request_in_flight(hook):
    hook.stall = True
    sink = WebhookSink(hook.url, timeout_s=4 * WAIT_S, retries=5)  # a close that waited would outlast WAIT_S
    sink.open()
    for seq in range(3):
        sink.write(*event("zone_exit", seq, float(seq), zone="bay", dwell_s=1.0))
    hook.wait_for(1)
    sink.interrupt()
    assert closed(sink)
    assert sink.counters()["dropped"] == 3 and sink.drops() == {"cam1": 3}
    assert len(hook.requests) == 1  # nothing tried after the interrupt


def test_an_endpoint_refused_is_retried_then_failed_and_the_run_still_writes_every_frame(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="streamlens.sinks.webhook")
    sink = WebhookSink(f"http://127.0.0.1:{free_port()}/hook", retries=1, timeout_s=2)
    path = webhook_pipeline(tmp_path, "")
    report = streamlens.Pipeline.from_yaml(path, sinks=[sink]).run()
    assert report.exit_code == 0, report.error
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len([m for m in lines if m["type"] == "frame"]) == 300 and lines[-1]["type"] == "eos"
    events = len([m for m in lines if m["type"] == "event"])
    counts = sink.counters()
    assert counts["posted"] == 0 and counts["failed"] >= 1
    assert counts["failed"] + counts["dropped"] == events and sink.drops() == {"cam1": events}
    from streamlens.progress import summary

    assert report.sink_losses == {"webhook sink": events}  # told under the run's summary
    assert f"webhook sink: {events} message(s) not delivered" in summary(report)
    tries = [r for r in caplog.records if "try " in r.getMessage()]
    assert "Connection refused" in tries[0].getMessage()
    # two tries each (one retry), and the one event left at close may have made one or both of its tries
    # (its outcome came after close() had given it up: counted dropped)
    assert len(tries) - 2 * counts["failed"] in (0, 1, 2)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([m for m in warned if "posting fails" in m]) == 1, warned


def test_the_token_comes_from_the_environment_and_an_unset_one_is_one_line(hook, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("HOOK_TOKEN", "s3cret-token")
    sink = WebhookSink(hook.url, token_env="HOOK_TOKEN")
    sink.open()
    sink.write(*event("loiter", 0, 0.0, zone="bay"))
    hook.wait_for(1)
    assert closed(sink)
    assert hook.requests[0]["headers"]["Authorization"] == "Bearer s3cret-token"
    assert not any("s3cret-token" in r.getMessage() for r in caplog.records)

    monkeypatch.delenv("HOOK_TOKEN")
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}}}]
detector: {{backend: motion}}
sinks: [{{type: webhook, url: "{hook.url}", token_env: HOOK_TOKEN}}]
""")
    with pytest.raises(ConfigError) as info:  # checked before any sink opens (a jsonl file is left as it was)
        streamlens.Pipeline.from_yaml(path).run()
    message = str(info.value)
    assert "\n" not in message and ": sinks[0].token_env: the environment variable HOOK_TOKEN is not set" in message
    monkeypatch.setenv("HOOK_TOKEN", "")
    sink = WebhookSink(hook.url, token_env="HOOK_TOKEN")  # made in code: said when it opens
    with pytest.raises(SinkError, match=r"^sinks|^webhook|token_env"):
        sink.open()


def test_the_short_form_validates_and_builds_and_a_wrong_url_is_one_line(tmp_path):
    (tmp_path / "clip.mp4").write_bytes(b"")
    path = tmp_path / "p.yaml"
    path.write_text("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\n"
                    "sinks: [{type: webhook, url: 'http://127.0.0.1:9/x'}]\n")
    cfg = load_pipeline(path).sinks[0]
    sink = build_sink(cfg, {"cam1": 30.0}, where="sinks[0]")
    assert isinstance(sink, WebhookSink) and sink.url == "http://127.0.0.1:9/x" and sink.inline
    # made in code from its keys, it has the file's keys and defaults: they are declared once
    made = WebhookSink("http://127.0.0.1:9/x")
    fields = {k: f for k, f in WebhookSinkConfig.model_fields.items() if k not in ("type", "url")}
    assert {k: getattr(made, k) for k in fields} == {k: f.default for k, f in fields.items()}
    sink.open()  # nothing listens on port 9: opening does not contact the endpoint
    assert closed(sink)

    path.write_text("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\n"
                    "sinks: [{type: webhook, url: 'ftp://x'}]\n")
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith(f"{path}: sinks[0].url: "), info.value.problems


class _Trickler:
    """A raw HTTP endpoint on 127.0.0.1 that reads a request and then answers one byte of its status
    line every 0.2 s, for ever (`body_mb`: answers 200 at once, then a body of that many megabytes,
    sent as long as the client reads). Counts the connections it accepted and the bytes it sent."""

    def __init__(self, body_mb: int = 0):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/hook"
        self.body_mb = body_mb
        self.accepted = 0
        self.sent = 0
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                if self.body_mb:
                    conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {self.body_mb << 20}\r\n\r\n".encode())
                    chunk = b"x" * 65536
                    for _ in range((self.body_mb << 20) // len(chunk)):
                        conn.sendall(chunk)
                        self.sent += len(chunk)
                    return
                for byte in b"HTTP/1.1 200 OK\r\n" * 1000:
                    if self.stop.wait(0.2):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return  # the client went

    def close(self) -> None:
        self.stop.set()
        self.server.close()


def test_an_endpoint_that_trickles_its_answer_is_cut_at_the_deadline(caplog):
    """Each byte comes well within `timeout_s`, so only a deadline on the whole try ends it."""
    caplog.set_level(logging.DEBUG, "streamlens.sinks.webhook")
    endpoint = _Trickler()
    sink = WebhookSink(endpoint.url, timeout_s=1, retries=1)
    try:
        sink.open()
        sink.write(*event("line_cross", 0, 0.0, line="gate"))
        sink.write(*event("line_cross", 1, 1.0, line="gate"))
        deadline = time.monotonic() + WAIT_S
        while sink.counters()["failed"] < 2:  # both tries of both events were cut
            assert time.monotonic() < deadline, sink.counters()
            time.sleep(0.05)
        assert endpoint.accepted == 4
        assert any("no answer within 1 s in all" in r.getMessage() for r in caplog.records)
        assert closed(sink)
    finally:
        endpoint.close()


def test_a_huge_answer_is_not_read():
    endpoint = _Trickler(body_mb=512)
    sink = WebhookSink(endpoint.url, timeout_s=WAIT_S, retries=0)
    try:
        sink.open()
        sink.write(*event("line_cross", 0, 0.0, line="gate"))
        sink.write(*event("line_cross", 1, 1.0, line="gate"))
        deadline = time.monotonic() + WAIT_S
        while sink.counters()["posted"] < 2:  # 200 is the answer; its body is not waited for
            assert time.monotonic() < deadline, sink.counters()
            time.sleep(0.05)
        assert closed(sink)
        assert endpoint.accepted == 2  # each connection was closed, not kept with a body half read
        assert endpoint.sent < 64 << 20  # what the kernel's buffers took, far from 512 MB each
    finally:
        endpoint.close()


@pytest.mark.parametrize("url, warned", [
    ("http://192.0.2.7/hook", True),  # plain http to another machine: the token in clear
    ("https://192.0.2.7/hook", False),
    ("http://127.0.0.1:9/hook", False),  # this machine
])
def test_a_bearer_token_over_plain_http_is_warned_of(url, warned, monkeypatch, caplog):
    monkeypatch.setenv("HOOK_TOKEN", "s3cret-token")
    sink = WebhookSink(url, token_env="HOOK_TOKEN")
    with caplog.at_level(logging.WARNING, "streamlens.sinks.webhook"):
        sink.open()  # does not contact the endpoint
    sink.interrupt()
    assert closed(sink)
    said = [r.getMessage() for r in caplog.records if "plain http://" in r.getMessage()]
    assert len(said) == int(warned), said
    assert not any("s3cret-token" in r.getMessage() for r in caplog.records)
