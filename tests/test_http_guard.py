"""Who may ask the HTTP server what (streamlens/http/auth.py), over real sockets: the Host and Origin
checked on loopback too, `require_token` on loopback, the one-time `?token=` exchange, wrong tokens
limited per address, the token in no log line at any level (`streamlens run --debug`), a short token
refused before the run starts, and a request path of raw bytes answered 400 or 404.

One `streamlens run --debug` serves the module (a live, looping copy of the sample, the motion
detector, `require_token` on 127.0.0.1); the Host test runs a pipeline without a token on a thread.
Nothing here compares times."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from .conftest import REPO
from .rtsp_server import free_port
from .test_metrics import running

SAMPLE = REPO / "samples" / "traffic.mp4"
TOKEN = "Guard-test-token-0123456789"
ENV = "STREAMLENS_GUARD_TEST_TOKEN"


def ask(port: int, path: bytes | str, headers: dict | None = None, source: str = "127.0.0.1",
        method: str = "GET") -> tuple[int, dict, bytes]:
    """One request over its own connection from `source` (any 127.x address): (status, headers, body).
    A `bytes` path goes on the wire as it is."""
    headers = {"Host": f"127.0.0.1:{port}", **(headers or {})}
    with socket.create_connection(("127.0.0.1", port), timeout=20, source_address=(source, 0)) as s:
        target = path if isinstance(path, bytes) else path.encode()
        lines = [method.encode() + b" " + target + b" HTTP/1.1", b"Connection: close"]
        lines += [f"{k}: {v}".encode() for k, v in headers.items() if v is not None]
        s.sendall(b"\r\n".join(lines) + b"\r\n\r\n")
        response = http.client.HTTPResponse(s, method=method)
        response.begin()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """`streamlens run --debug` with `require_token` on loopback: (port, its stderr file)."""
    folder = tmp_path_factory.mktemp("guard")
    port = free_port()
    (folder / "pipeline.yaml").write_text(f"""sources:
  - {{name: cam1, uri: {SAMPLE}, live: true, loop: true, max_fps: 10}}
detector: {{backend: motion}}
tracker: none
runtime:
  http: {{port: {port}, require_token: true, token_env: {ENV}}}
""")
    stderr = folder / "stderr.txt"
    with open(stderr, "wb") as err:
        run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "--debug", "pipeline.yaml"], cwd=folder,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                               env={**os.environ, ENV: TOKEN})
    try:
        deadline = time.monotonic() + 60
        while True:
            assert run.poll() is None, stderr.read_text()[-3000:]
            try:
                if ask(port, "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the run did not answer /healthz within 60 s"
            time.sleep(0.2)
        yield port, stderr
    finally:
        run.send_signal(signal.SIGINT)
        try:
            run.wait(30)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()


def test_require_token_holds_on_loopback(guarded):
    port, _ = guarded
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for route in ("/", "/api/streams", "/api/stats", "/metrics", "/page/app.js", "/api/events?since=0"):
        code, headers, _ = ask(port, route)
        assert code == 401 and headers["www-authenticate"].startswith("Bearer"), route
        assert ask(port, route, bearer)[0] == 200, route
    assert ask(port, "/healthz")[0] == 200  # no token asked: a liveness probe
    assert ask(port, "/metrics", {"Authorization": f"Bearer {TOKEN}x"}, source="127.0.0.5")[0] == 401


def test_the_token_exchange_sets_the_cookie_and_leaves_the_url(guarded):
    port, _ = guarded
    code, headers, _ = ask(port, f"/?token={TOKEN}")
    assert code == 303 and headers["location"] == "/" and headers["referrer-policy"] == "no-referrer"
    cookie = headers["set-cookie"]
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= {part.strip() for part in cookie.split(";")}
    assert TOKEN not in cookie
    pair = cookie.split(";")[0]
    code, headers, body = ask(port, "/", {"Cookie": f"other=1; {pair}"})
    assert code == 200 and b"<html" in body.lower() and headers["referrer-policy"] == "no-referrer"
    code, headers, _ = ask(port, f"/api/events?since=2&token={TOKEN}&x=1")
    assert code == 303 and headers["location"] == "/api/events?since=2&x=1"
    code, headers, _ = ask(port, f"//evil.example/?token={TOKEN}")
    assert code == 303 and not headers["location"].startswith("//")  # the redirect stays on this server
    assert ask(port, "/api/stats", {"Cookie": pair + "0"})[0] == 401  # a changed digest is no cookie
    # a crafted cookie header as long as a header may be is read in one pass and refused
    crafted = "a=" + '"\\' * 4000
    assert ask(port, "/api/stats", {"Cookie": crafted})[0] == 401


def test_a_foreign_host_or_origin_is_refused_even_with_the_token(guarded):
    port, _ = guarded
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert ask(port, "/api/streams", {**bearer, "Host": "evil.example"})[0] == 403
    assert ask(port, "/healthz", {"Host": "evil.example"})[0] == 403
    assert ask(port, "/api/streams", {**bearer, "Origin": "http://evil.example"})[0] == 403
    assert ask(port, "/api/streams", {**bearer, "Origin": f"http://localhost:{port}"})[0] == 200


def test_wrong_tokens_from_one_address_are_limited_and_others_go_on(guarded):
    """Ten wrong tokens from 127.0.0.7 within a minute: its next try, the right token included, is
    429 with Retry-After; another address and a cookie holder are not held back."""
    port, _ = guarded
    code, headers, _ = ask(port, f"/?token={TOKEN}")
    pair = headers["set-cookie"].split(";")[0]
    for n in range(10):
        assert ask(port, "/metrics", {"Authorization": f"Bearer wrong-{n:02d}-0123456789"},
                   source="127.0.0.7")[0] == 401
    code, headers, _ = ask(port, "/metrics", {"Authorization": f"Bearer {TOKEN}"}, source="127.0.0.7")
    assert code == 429 and int(headers["retry-after"]) >= 1
    assert ask(port, f"/?token={TOKEN}", source="127.0.0.7")[0] == 429
    assert ask(port, "/api/stats", {"Cookie": pair}, source="127.0.0.7")[0] == 200
    assert ask(port, "/metrics", {"Authorization": f"Bearer {TOKEN}"}, source="127.0.0.8")[0] == 200


def test_raw_bytes_in_a_path_answer_400_or_404(guarded):
    port, _ = guarded
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for path in (b"/\xb2", b"/api/events/\xb2/snapshot.jpg", b"/api/streams/\xb2/frame.jpg", b"/%B2",
                 b"/api/events/%C2%B2/snapshot.jpg", b"/api/streams/%B2%FF/result"):
        code, _, body = ask(port, path, bearer)
        assert code in (400, 404), (path, code, body)
        assert b"Traceback" not in body and b"Error:" not in body, body


def test_the_token_is_in_no_log_line(guarded):
    """Every way the token can reach the server, a malformed request line among them: `--debug`
    logs none of it."""
    port, stderr = guarded
    ask(port, f"/?token={TOKEN}")
    ask(port, f"/api/streams/cam1/frame.jpg?token={TOKEN}")
    ask(port, f"/nope?token={TOKEN}")
    ask(port, f"/api/stats?token={TOKEN}", source="127.0.0.9", method="POST")
    ask(port, f"/api/events/\xb2?token={TOKEN}".encode("latin-1"), {"Authorization": f"Bearer {TOKEN}"})
    ask(port, "/metrics", {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"})
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:  # past the size of a header
        s.sendall(f"GET /?token={TOKEN} HTTP/1.1\r\nHost: 127.0.0.1\r\nX: {'a' * 9000}\r\n\r\n".encode())
        assert s.recv(100).startswith(b"HTTP/1.")
    assert ask(port, "/metrics", {"Authorization": f"Bearer {TOKEN}"})[0] == 200  # and it still serves
    text = stderr.read_text(errors="replace")
    assert "DEBUG" in text  # --debug did log
    assert TOKEN not in text and TOKEN[:12] not in text


def test_a_short_token_is_refused_at_load_in_one_line(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"sources: [{{uri: {SAMPLE}}}]\ndetector: {{backend: motion}}\n"
                    f"runtime: {{http: {{port: 0, host: 0.0.0.0, token_env: {ENV}}}}}\n")
    for command in ("validate", "run"):
        done = subprocess.run([sys.executable, "-m", "streamlens", command, str(path)], capture_output=True, text=True,
                              timeout=120, env={**os.environ, ENV: "short-token"}, cwd=REPO)
        said = done.stderr.strip().splitlines() + done.stdout.strip().splitlines()
        assert done.returncode != 0
        mine = [line for line in said if "runtime.http.token_env" in line]
        assert len(mine) == 1 and "11 characters long: at least 16" in mine[0], said
        assert "short-token" not in done.stderr + done.stdout
        if command == "run":
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_on_loopback_without_a_token_the_host_is_still_checked(tmp_path):
    """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1 names its own
    host; it gets 403, while 127.0.0.1, localhost and [::1] get the answer."""
    with running(tmp_path, f"  - {{name: cam1, uri: {SAMPLE}, live: true, loop: true, max_fps: 10}}",
                 "port: 0, allowed_hosts: [grafana.lan]") as pipeline:
        deadline = time.monotonic() + 30
        while pipeline.http_port is None and time.monotonic() < deadline:
            time.sleep(0.05)
        port = pipeline.http_port
        assert ask(port, "/api/streams", {"Host": "evil.example"})[0] == 403
        assert ask(port, "/api/streams", {"Host": f"evil.example:{port}"})[0] == 403
        assert ask(port, "/metrics", {"Host": "127.0.0.1.evil.example"})[0] == 403
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST", "grafana.lan"):
            code, _, body = ask(port, "/api/streams", {"Host": host})
            assert code == 200 and json.loads(body)["streams"][0]["name"] == "cam1", host
        assert ask(port, "/api/streams", {"Origin": "http://evil.example"})[0] == 403
        assert ask(port, "/api/streams", {"Origin": "null"})[0] == 403

