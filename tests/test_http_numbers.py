"""Every number of a query or path of the HTTP API is parsed with bounds (streamlens/http/numbers.py):
over real HTTP against a running pipeline with `runtime.history`, a number that is none, not finite,
or out of its range is a 400 of one line naming the key and the range, never a 500 and never a
default put in its place; one in range is answered as before."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

import streamlens

from .conftest import REPO

SAMPLE = REPO / "samples" / "traffic.mp4"
BIG = "9" * 30


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode("latin-1")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("latin-1")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The address of a running pipeline's HTTP server, with a history file."""
    folder = tmp_path_factory.mktemp("numbers")
    path = folder / "p.yaml"
    path.write_text(f"sources: [{{name: cam1, uri: {SAMPLE}, live: true, loop: true, max_fps: 10}}]\n"
                    "detector: {backend: motion}\ntracker: none\n"
                    f"runtime: {{http: {{port: 0}}, history: {{path: {folder / 'history.db'}}}}}\n")
    pipeline = streamlens.Pipeline.from_yaml(path)
    runner = threading.Thread(target=pipeline.run)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while pipeline.http_port is None or pipeline.stats["cam1"].frames < 5:
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.05)
        yield f"http://127.0.0.1:{pipeline.http_port}"
    finally:
        pipeline.stop()
        runner.join(30)
    assert not runner.is_alive()


@pytest.mark.parametrize(("path", "line"), [
    ("/api/history?since=nan", "since: expected a number from 0 to 253402300799, got 'nan'"),
    ("/api/history?since=inf", "since: expected a number from 0 to 253402300799, got 'inf'"),
    ("/api/history?until=1e400", "until: expected a number from 0 to 253402300799, got '1e400'"),
    ("/api/history?since=-1", "since: expected a number from 0 to 253402300799, got '-1'"),
    ("/api/history?bucket_s=1e30", "bucket_s: expected an integer from 60 to 3153600000, got '1e30'"),
    ("/api/history?bucket_s=1e-9", "bucket_s: expected an integer from 60 to 3153600000, got '1e-9'"),
    ("/api/history?bucket_s=59", "bucket_s: expected an integer from 60 to 3153600000, got '59'"),
    (f"/api/history?bucket_s={BIG}", f"bucket_s: expected an integer from 60 to 3153600000, got '{BIG}'"),
    (f"/api/events?since={BIG}", f"since: expected an integer from 0 to 9223372036854775807, got '{BIG}'"),
    ("/api/events?since=x", "since: expected an integer from 0 to 9223372036854775807, got 'x'"),
    ("/api/events?since=%0A%1B[2J", "since: expected an integer from 0 to 9223372036854775807, got '\\n\\x1b[2J'"),
    ("/api/events/9223372036854775808/clip.mp4",
     "event: expected an integer from 0 to 9223372036854775807, got '9223372036854775808'"),
    (f"/api/events/{BIG}/snapshot.jpg", f"event: expected an integer from 0 to 9223372036854775807, got '{BIG}'"),
    ("/api/stats?history_since=1e3", "history_since: expected an integer from 0 to 9223372036854775807, got '1e3'"),
    (f"/api/streams/cam1/result?seq={BIG}", f"seq: expected an integer from 0 to 9223372036854775807, got '{BIG}'"),
    ("/api/streams/cam1/preview.jpg?after=-1", "after: expected an integer from 0 to 9223372036854775807, got '-1'"),
])
def test_a_number_out_of_bounds_is_a_400_of_one_line(base, path, line):
    code, body = get(base + path)
    assert (code, body) == (400, line + "\n")


def test_numbers_in_range_are_answered(base):
    for path in ("/api/history?since=0&until=253402300799&bucket_s=3600", "/api/events?since=0",
                 "/api/stats?history_since=0"):
        code, body = get(base + path)
        assert code == 200, (path, body)
        json.loads(body)
    assert get(base + "/api/events/9223372036854775807/clip.mp4")[0] == 404  # no clips in this run
    assert get(base + "/api/events/9223372036854775807/snapshot.jpg")[0] == 404
    assert get(base + "/api/streams/cam1/result?seq=9223372036854775807")[0] == 404
