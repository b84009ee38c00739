"""Cameras added and removed while a pipeline runs: `POST /api/streams` and `DELETE
/api/streams/<name>` against `streamlens run` in a subprocess, with real RTSP cameras (GStreamer's
RTSP server from Debian's packages, fed the shipped sample), with one engine and with two; a bad
source is a 400 with `validate`'s line; the run goes on, the other streams untouched."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from streamlens import Pipeline
from streamlens.errors import NoSuchStream, StreamConflict

from .conftest import REPO, streamlens
from .rtsp_server import GstRtspServer, free_port, gst_missing

SAMPLE = REPO / "samples" / "traffic.mp4"


@pytest.fixture
def cameras(tmp_path):
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    (tmp_path / "gst").mkdir()
    with GstRtspServer({"cam1": SAMPLE, "cam2": SAMPLE}, tmp_path / "gst") as server:
        yield server


def call(method: str, url: str, body=None, ctype: str = "application/json", headers: dict | None = None):
    """(status, body text) of one request."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers={
        **({"Content-Type": ctype} if data is not None else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class Run:
    """`streamlens run` of a pipeline file in a subprocess, with its JSONL and its HTTP server."""

    def __init__(self, folder: Path, sources: str, workers: int = 1, manage: bool = True):
        self.port = free_port()
        self.out = folder / "out.jsonl"
        self.pipeline = folder / "p.yaml"
        self.pipeline.write_text(f"""
sources: {sources}
detector: {{backend: motion}}
keyframes: {{interval: 3}}
sinks: [{{type: jsonl, path: {self.out}}}]
runtime: {{workers: {workers}, http: {{port: {self.port}, manage: {str(manage).lower()}}}}}
""")
        self.err = (folder / "stderr.txt").open("w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(self.pipeline)], cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=self.err, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.wait_for(lambda: call("GET", self.url + "/healthz")[0] == 200, "the run to be up")

    def messages(self) -> list[dict]:
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        return [json.loads(line) for line in lines if line.endswith("}")]

    def frames(self, stream: str) -> list[dict]:
        return [m for m in self.messages() if m["type"] == "frame" and m["stream"] == stream]

    def wait_for(self, ready, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.stderr()
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"waited {timeout} s for {what}: {self.stderr()}")

    def stderr(self) -> str:
        self.err.flush()
        return Path(self.err.name).read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(90)
        self.err.close()
        return code


def live_file(name: str) -> str:
    return f"{{name: {name}, uri: {SAMPLE}, live: true, loop: true}}"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_camera_added_and_removed_over_http_while_the_others_run(tmp_path, cameras, workers):
    first = f"{{name: cam1, uri: '{cameras.url('cam1')}'}}"
    sources = f"[{first}]" if workers == 1 else f"[{first}, {live_file('yard')}]"
    run = Run(tmp_path, sources, workers)
    try:
        run.wait_for(lambda: len(run.frames("cam1")) >= 10, "cam1's frames")
        code, body = call("POST", run.url + "/api/streams", {"name": "door", "uri": cameras.url("cam2")})
        assert code == 201, body
        assert json.loads(body) == {"name": "door", "warnings": []}
        assert call("POST", run.url + "/api/streams", {"name": "door", "uri": cameras.url("cam2")})[0] == 400
        run.wait_for(lambda: len(run.frames("door")) >= 30, "the added camera's frames")
        listed = json.loads(call("GET", run.url + "/api/streams")[1])["streams"]
        door = next(s for s in listed if s["name"] == "door")
        assert door["live"] and door["uri"] == cameras.url("cam2")
        before = len(run.frames("cam1"))

        code, body = call("DELETE", run.url + "/api/streams/door")
        assert code == 202, body
        run.wait_for(lambda: any(m["type"] == "eos" and m["stream"] == "door" for m in run.messages()),
                     "the removed camera's eos")
        run.wait_for(lambda: len(run.frames("cam1")) >= before + 30, "cam1 going on after the removal")
        assert call("DELETE", run.url + "/api/streams/door")[0] == 409  # it has ended
        assert call("DELETE", run.url + "/api/streams/nobody")[0] == 404
        assert run.proc.poll() is None
    finally:
        code = run.stop()
    messages = run.messages()
    ends = {m["stream"]: m for m in messages if m["type"] == "eos"}
    assert ends["door"]["reason"] == "removed"
    assert ends["cam1"]["reason"] == "stopped"
    for stream in ("cam1", "door"):  # every frame published, in order, no gap
        seqs = [m["seq"] for m in messages if m["stream"] == stream and m["type"] in ("frame", "eos")]
        assert seqs == list(range(len(seqs))), stream
    door = [m for m in messages if m["type"] == "frame" and m["stream"] == "door"]
    assert {(m["width"], m["height"]) for m in door} == {(640, 360)}
    assert code == 130, run.stderr()  # Ctrl-C: interrupted, nothing failed


def test_a_bad_source_is_a_400_with_validates_line(tmp_path):
    run = Run(tmp_path, f"[{live_file('cam1')}]")
    try:
        bad = {"uri": "missing.mp4", "fps": 5}
        code, body = call("POST", run.url + "/api/streams", bad)
        # the same lines `streamlens validate` gives for that entry in the file
        (tmp_path / "v.yaml").write_text(f"sources: [{live_file('cam1')}, {json.dumps(bad)}]\n"
                                         "detector: {backend: motion}\n")
        checked = streamlens("validate", str(tmp_path / "v.yaml"))
        assert checked.returncode != 0
        expected = sorted(line.split(": ", 1)[1] for line in checked.stderr.splitlines())
        assert code == 400
        assert sorted(line.split(": ", 1)[1] for line in body.splitlines()) == expected
        assert expected == [f"sources[1].fps: unknown key (expected one of: {expected[0].split('one of: ')[1]}"]

        assert call("POST", run.url + "/api/streams", {"uri": "rtsp://127.0.0.1:99999/x"})[0] == 400
        assert call("POST", run.url + "/api/streams", {"uri": str(SAMPLE), "name": "cam1"})[0] == 400  # taken
        assert call("POST", run.url + "/api/streams", b"{not json")[0] == 400
        assert call("POST", run.url + "/api/streams", {"uri": str(SAMPLE)}, ctype="text/plain")[0] == 415
        assert call("POST", run.url + "/api/streams", b" " * 20000)[0] == 413
        assert call("POST", run.url + "/api/streams", {"uri": str(SAMPLE)},
                    headers={"Origin": "http://evil.example"})[0] == 403  # another site's page
        assert call("PUT", run.url + "/api/streams", {"uri": str(SAMPLE)})[0] == 405
        assert call("POST", run.url + "/api/stats", {"uri": str(SAMPLE)})[0] == 405
        names = [s["name"] for s in json.loads(call("GET", run.url + "/api/streams")[1])["streams"]]
        assert names == ["cam1"]  # nothing was added
        assert run.proc.poll() is None
    finally:
        assert run.stop() == 130, run.stderr()


def test_manage_false_leaves_the_streams_as_the_file_says(tmp_path):
    run = Run(tmp_path, f"[{live_file('cam1')}]", manage=False)
    try:
        assert call("POST", run.url + "/api/streams", {"uri": str(SAMPLE)})[0] == 403
        assert call("DELETE", run.url + "/api/streams/cam1")[0] == 403
    finally:
        run.stop()


def test_removing_the_last_stream_leaves_the_run_waiting_for_another(tmp_path):
    """In the library: the last stream removed, the run waits; a stream added then runs; a file
    added ends by itself without ending the run's wait only when it was not the last one taken away."""
    (tmp_path / "p.yaml").write_text(f"sources: [{live_file('cam1')}]\ndetector: {{backend: motion}}\n"
                                     f"sinks: [{{type: jsonl, path: {tmp_path / 'out.jsonl'}}}]\n")
    pipeline = Pipeline.from_yaml(tmp_path / "p.yaml")
    reports = []
    runner = threading.Thread(target=lambda: reports.append(pipeline.run()), daemon=True)
    runner.start()

    def until(ready, what: str) -> None:
        deadline = time.monotonic() + 60
        while not ready():
            assert time.monotonic() < deadline, what
            assert runner.is_alive(), reports
            time.sleep(0.1)

    try:
        until(lambda: pipeline.stats["cam1"].frames >= 5, "cam1's frames")
        with pytest.raises(NoSuchStream):
            pipeline.remove_stream("cam9")
        pipeline.remove_stream("cam1")
        until(lambda: pipeline.stats["cam1"].reason == "removed", "cam1 removed")
        with pytest.raises(StreamConflict):
            pipeline.remove_stream("cam1")
        # no stream open: the run waits for one (had it ended, the stream added next would never run)
        name, warnings = pipeline.add_stream({"uri": str(SAMPLE)})  # a file, read once
        assert (name, warnings) == ("cam2", [])
        until(lambda: pipeline.stats["cam2"].reason == "end", "the added file read to its end")
        runner.join(30)
        assert not runner.is_alive()  # that file ended by itself: the run ends with its last stream
    finally:
        pipeline.close()
    report = reports[0]
    assert report.status == "done"
    assert {st.name: (st.reason, st.frames) for st in report.streams}["cam2"] == ("end", 300)
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [m["reason"] for m in lines if m["type"] == "eos"] == ["removed", "end"]
