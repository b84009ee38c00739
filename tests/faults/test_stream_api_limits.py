"""The stream API adds only what the operator allows (issue 45), against `streamlens run` in a
subprocess over real sockets: `runtime.max_streams` holds however many POSTs come at once, with one
engine and with two; a source that would listen (a `listen` query or option, a bind address, udp
from anywhere, RTSP as a server, an SDP fetched over HTTP that names ports to bind) is refused, or
cannot open what would listen, and no socket of the run ever listens on its port; a path is
normalised before it is checked (`/dev/..`); names are short and plain; control characters are
refused in a request and in the pipeline file; a second DELETE is a conflict.

Every wait is bounded; nothing compares times."""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..conftest import REPO, streamlens
from ..rtsp_server import free_port
from ..test_streams_api import call

SAMPLE = REPO / "samples" / "traffic.mp4"


def listening(port: int) -> list[str]:
    """This machine's sockets on `port` that take what peers send: TCP ones listening, UDP ones bound."""
    found = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        path = Path(f"/proc/net/{proto}")
        for line in path.read_text().splitlines()[1:] if path.exists() else []:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and (proto.startswith("udp") or fields[3] == "0A"):
                found.append(f"{proto} {fields[1]}")
    return found


class Run:
    """`streamlens run` of two live files with its HTTP server; `runtime` and `http`: more keys of
    those sections."""

    def __init__(self, folder: Path, runtime: str = "", http: str = "", workers: int = 1):
        self.port = free_port()
        (folder / "p.yaml").write_text(f"""
sources:
  - {{name: cam1, uri: {SAMPLE}, live: true, loop: true, max_fps: 10}}
  - {{name: cam2, uri: {SAMPLE}, live: true, loop: true, max_fps: 10}}
detector: {{backend: motion}}
tracker: none
runtime: {{workers: {workers}, http: {{port: {self.port}{', ' + http if http else ''}}}{', ' + runtime if runtime else ''}}}
""")
        self.err = (folder / "stderr.txt").open("w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(folder / "p.yaml")],
                                     cwd=REPO, stdout=subprocess.DEVNULL, stderr=self.err, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.wait_for(lambda: call("GET", self.url + "/healthz")[0] == 200, "the run to be up")

    def wait_for(self, ready, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.stderr()
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"waited {timeout} s for {what}: {self.stderr()}")

    def post(self, source: dict) -> tuple[int, str]:
        return call("POST", self.url + "/api/streams", source)

    def streams(self) -> dict[str, str]:
        listed = json.loads(call("GET", self.url + "/api/streams")[1])["streams"]
        return {s["name"]: s["state"] for s in listed}

    def stderr(self) -> str:
        self.err.flush()
        return Path(self.err.name).read_text()[-4000:]

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def one_line(body: str) -> str:
    lines = body.strip().splitlines()
    assert len(lines) == 1, body
    return lines[0]


@pytest.mark.parametrize("workers", [1, 2])
def test_max_streams_holds_however_many_posts_come_at_once(tmp_path, workers):
    """`runtime.max_streams: 8`, two streams running: of ten POSTs sent at once six are taken, four get
    429; a stream removed makes room; a second DELETE of it is a conflict."""
    with Run(tmp_path, "max_streams: 8", f"add_folders: [{SAMPLE.parent}]", workers) as run:
        extra = [{"name": f"extra{i}", "uri": str(SAMPLE), "live": True, "loop": True, "max_fps": 5} for i in range(10)]
        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(run.post, extra))
        codes = sorted(code for code, _ in answers)
        assert codes == [201] * 6 + [429] * 4, answers
        refused = next(body for code, body in answers if code == 429)
        assert "runtime.max_streams" in one_line(refused) and "8" in refused
        added = [source["name"] for source, (code, _) in zip(extra, answers) if code == 201]
        assert len(run.streams()) == 8

        assert call("DELETE", f"{run.url}/api/streams/{added[0]}")[0] == 202
        code, body = call("DELETE", f"{run.url}/api/streams/{added[0]}")
        assert code == 409, body  # removed already: a conflict, however soon it is asked again
        code, body = run.post({"name": "after", "uri": str(SAMPLE), "live": True, "loop": True, "max_fps": 5})
        assert code == 201, body  # the removed stream counts no more
        assert run.post({"name": "past", "uri": "rtsp://127.0.0.1:9/x"})[0] == 429
        assert run.proc.poll() is None


@pytest.fixture
def sdp_server(tmp_path):
    """A local HTTP server whose `/cam.sdp` describes an RTP stream to be received on a free port:
    (its URL, that port)."""
    rtp = free_port()
    folder = tmp_path / "www"
    folder.mkdir()
    (folder / "cam.sdp").write_text(f"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=cam\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                                    f"m=video {rtp} RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/cam.sdp", rtp
    finally:
        server.shutdown()
        server.server_close()


def test_sources_that_would_listen_are_refused_and_nothing_listens(tmp_path, sdp_server):
    sdp_url, rtp_port = sdp_server
    port = free_port()  # where nothing may listen
    with Run(tmp_path, http="add_schemes: [rtsp, http, rtmp, srt, tcp, udp]") as run:
        refused = [
            {"uri": f"tcp://127.0.0.1:{port}?listen=1"},
            {"uri": f"tcp://127.0.0.1:{port}?timeout=5&listen"},
            {"uri": f"tcp://127.0.0.1:{port}", "options": {"listen": "1"}},
            {"uri": f"http://127.0.0.1:{port}/x", "options": {"listen": 2}},
            {"uri": f"tcp://0.0.0.0:{port}"},
            {"uri": f"udp://0.0.0.0:{port}"},
            {"uri": f"udp://127.0.0.1:{port}"},
            {"uri": f"udp://239.1.2.3:{port}", "options": {"localaddr": "127.0.0.1"}},
            {"uri": f"rtsp://127.0.0.1:{port}/x", "options": {"rtsp_flags": "listen"}},
            {"uri": f"rtsp://127.0.0.1:{port}/x", "transport": "udp"},
            {"uri": f"srt://127.0.0.1:{port}?mode=listener"},
            {"uri": f"rtmp://127.0.0.1:{port}/live/x", "options": {"timeout": "10"}},
            {"uri": f"http://127.0.0.1:{port}/x", "options": {"protocol_whitelist": "http,tcp,udp,rtp"}},
            {"uri": f"rtp://127.0.0.1:{port}"},  # not a scheme this run allows
            {"uri": "/dev/../etc/passwd"},  # a file's path, and this run names no folder for files
            {"uri": "/dev/video0"},
            {"uri": str(SAMPLE)},
            {"uri": "rtsp://cam.example/1\nWARNING forged line"},
            {"uri": "rtsp://cam.example/1", "name": "cam\x1b[2J"},
            {"uri": "rtsp://cam.example/1", "name": "a" * 65},
        ]
        for source in refused:
            code, body = run.post(source)
            assert code == 400, (source, code, body)
            assert "\x1b" not in one_line(body)
        code, body = run.post({"uri": "/dev/../etc/passwd"})
        assert body.startswith("POST /api/streams: sources[2].uri: files and devices are not added over HTTP")
        code, body = run.post({"uri": "rtsp://cam.example/1", "name": "cam\x1b[2J"})
        assert one_line(body) == ("POST /api/streams: sources[2].name: holds a control character (U+001B): "
                                  "not allowed in a pipeline file or a request")
        assert listening(port) == []
        assert sorted(run.streams()) == ["cam1", "cam2"]

        # a camera URL that is allowed, but serves a description naming a port to receive on: FFmpeg
        # would bind it (and take RTP from anyone); it may open nothing but HTTP, so it fails instead
        code, body = run.post({"name": "sdp", "uri": sdp_url})
        assert code == 201, body
        seen, states = [], set()

        def failed_twice() -> bool:
            seen.extend(listening(rtp_port))
            states.add(run.streams()["sdp"])
            return "cannot connect" in run.stderr() and "attempt 2" in run.stderr()

        run.wait_for(failed_twice, "two failed attempts of the SDP camera")
        assert seen == [], seen
        assert "backing_off" in states or "connecting" in states


def test_a_second_delete_with_one_engine_is_a_conflict(tmp_path):
    with Run(tmp_path) as run:
        assert call("DELETE", run.url + "/api/streams/cam2")[0] == 202
        code, body = call("DELETE", run.url + "/api/streams/cam2")
        assert code == 409 and "cam2" in one_line(body)
        assert call("DELETE", run.url + "/api/streams/nobody")[0] == 404


@pytest.mark.parametrize(("entry", "line"), [
    ("{uri: \"rtsp://cam/1\\nWARNING forged\"}", "sources[0].uri: holds a control character (U+000A)"),
    ("{uri: rtsp://cam/1, name: \"cam\\e[31m\"}", "sources[0].name: holds a control character (U+001B)"),
    ("{uri: rtsp://cam/1, name: " + "a" * 65 + "}", "sources[0].name: at most 64 characters, got 65"),
])
def test_validate_refuses_control_characters_and_long_names_in_one_line(tmp_path, entry, line):
    path = tmp_path / "p.yaml"
    path.write_text(f"sources: [{entry}]\ndetector: {{backend: motion}}\n")
    checked = streamlens("validate", str(path))
    assert checked.returncode == 2
    assert checked.stderr.splitlines() == [f"{path}: {line}" + (
        "" if "at most" in line else ": not allowed in a pipeline file or a request")]
    assert "\x1b" not in checked.stderr


def test_max_streams_holds_the_files_own_sources(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("sources: [{uri: rtsp://cam/1}, {uri: rtsp://cam/2}, {uri: rtsp://cam/3}]\n"
                    "detector: {backend: motion}\nruntime: {max_streams: 2}\n")
    checked = streamlens("validate", str(path))
    assert checked.returncode == 2
    assert checked.stderr.splitlines() == [f"{path}: runtime.max_streams: 2, but sources lists 3 streams"]
