"""Live cameras in whole pipelines, run as a user runs them: `streamlens run` in a subprocess, a real
RTSP server (GStreamer's, RTSP over TCP) that is killed and restarted, a camera that refuses
connections, Ctrl-C, and a password that must never show."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO
from .rtsp_server import GstRtspServer, annexb_copy, free_port, gst_missing

SAMPLE = REPO / "samples" / "traffic.mp4"
#: the rest of each test's pipeline: a looping paced file beside the cameras, the motion detector,
#: results in out/results.jsonl
FILE_AND_REST = f"""  - {{name: file1, uri: {SAMPLE}, live: true, loop: true}}
detector: {{backend: motion}}
keyframes: {{interval: 10}}
tracker: none
sinks: [{{type: jsonl, path: out/results.jsonl}}]
"""
PASSWORD = "s3cret-Pa55"


def _frames(path: Path) -> list[dict]:
    """The complete lines of a JSONL file that is still being written."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def _by_stream(lines: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for m in lines:
        if m["type"] == "frame":
            out.setdefault(m["stream"], []).append(m)
    return out


def _wait_for(check, timeout: float, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the pipeline exited ({proc.returncode}) while waiting for {what}"
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _start(tmp_path: Path, pipeline: str) -> tuple[subprocess.Popen, Path]:
    path = tmp_path / "pipeline.yaml"
    path.write_text(pipeline)
    stderr = tmp_path / "stderr.txt"
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(path)], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(stderr, "wb"),
                            env={**os.environ, "CAM_PASSWORD": PASSWORD})
    return proc, stderr


def _interrupt(proc: subprocess.Popen) -> float:
    """Ctrl-C: SIGINT, then seconds until the process has exited."""
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return time.monotonic() - started


@pytest.fixture
def gst_cameras(tmp_path):
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    small = annexb_copy(SAMPLE, tmp_path, scale=(320, 180))  # a second resolution
    with GstRtspServer({"cam1": SAMPLE, "cam2": SAMPLE, "cam3": small}, tmp_path) as server:
        yield server


def test_three_cameras_come_back_after_the_server_restarts_and_the_file_never_pauses(tmp_path, gst_cameras):
    server = gst_cameras
    # backoff_max_s 1: while the server is down each camera knocks at least once a second, so its return
    # is noticed within a second; then a connection and the first keyframe.
    cams = "\n".join(
        f"  - {{name: {name}, uri: 'rtsp://viewer:${{CAM_PASSWORD}}@127.0.0.1:{server.port}/{name}', "
        f"transport: tcp, timeout_s: 2, stall_s: 3, backoff_max_s: 1}}" for name in ("cam1", "cam2", "cam3"))
    proc, stderr = _start(tmp_path, f"""
sources:
{cams}
{FILE_AND_REST}""")
    results = tmp_path / "out" / "results.jsonl"
    names = ("cam1", "cam2", "cam3", "file1")
    try:
        _wait_for(lambda: set(names) <= set(_by_stream(_frames(results))), 30, proc, "frames from every stream")
        time.sleep(1.0)
        killed = time.time()
        server.kill()
        time.sleep(4.0)
        restarted = time.time()
        server.restart()
        back = server.ready_at  # the moment the restarted server served its streams again
        _wait_for(lambda: all(any(m["ts"] > restarted for m in _by_stream(_frames(results)).get(n, []))
                              for n in names), 8, proc, "frames from every camera after the restart")
        _wait_for(lambda: _by_stream(_frames(results))["file1"][-1]["ts"] > back + 1, 10, proc,
                  "the file a second past the cameras' return")
        assert proc.poll() is None, "the pipeline exited"
    finally:
        took = _interrupt(proc)
    streams = _by_stream(_frames(results))
    err = stderr.read_text()
    for name in ("cam1", "cam2", "cam3"):
        first_back = min(m["ts"] for m in streams[name] if m["ts"] > restarted)
        print(f"{name}: frames again {first_back - back:.2f} s after the server's return")  # measured, not judged
        assert not [m for m in streams[name] if killed + 0.5 < m["ts"] < restarted], f"{name}: frames while down?"
        assert f"{name}: stream lost" in err and f"{name}: streaming again" in err
    assert {(m["width"], m["height"]) for m in streams["cam3"]} == {(320, 180)}
    assert {(m["width"], m["height"]) for m in streams["cam1"]} == {(640, 360)}
    file_ts = [m["ts"] for m in streams["file1"]]
    # 30 fps: a frame every 33 ms; the cameras' outage lasts 4 s, and the file must not wait for it
    assert max(b - a for a, b in zip(file_ts, file_ts[1:])) < 2.0, "the paced file paused"
    assert file_ts[0] < killed and file_ts[-1] > back + 1
    for name in names:
        seq = [m["seq"] for m in streams[name]]
        assert seq == list(range(len(seq))), f"{name}: seq has gaps"
        pts = [m["pts"] for m in streams[name]]
        assert name == "file1" or all(b > a for a, b in zip(pts, pts[1:])), f"{name}: pts went back"
    lines = _frames(results)
    assert {m["stream"] for m in lines if m["type"] == "eos"} == set(names)
    assert proc.returncode == 130, (proc.returncode, took, err[-2000:])
    assert PASSWORD not in err and PASSWORD not in results.read_text()


def test_a_refused_camera_retries_with_backoff_while_others_run_and_ctrl_c_stops_within_2_s(tmp_path):
    port = free_port()  # nothing listens: every connection is refused
    proc, stderr = _start(tmp_path, f"""
sources:
  - {{name: door, uri: 'rtsp://admin:${{CAM_PASSWORD}}@127.0.0.1:{port}/stream1', backoff_initial_s: 0.2,
     backoff_max_s: 1}}
{FILE_AND_REST}""")
    results = tmp_path / "out" / "results.jsonl"

    def retries() -> list[str]:
        return [line for line in stderr.read_text().splitlines()
                if "door: cannot connect to rtsp://***@127.0.0.1" in line]

    try:
        _wait_for(lambda: len(_by_stream(_frames(results)).get("file1", [])) > 30, 30, proc, "file frames")
        _wait_for(lambda: len(retries()) >= 4, 20, proc, "four connection attempts")
        counted = len(_by_stream(_frames(results))["file1"])
        time.sleep(2.0)  # the camera goes on knocking once a second; the file goes on at 30 fps
        assert len(_by_stream(_frames(results))["file1"]) >= counted + 40, "the file stream stalled"
    finally:
        took = _interrupt(proc)
    err = stderr.read_text()
    retries = retries()
    waits = [float(line.split("retrying in ")[1].split(" s")[0]) for line in retries]
    assert len(waits) >= 3 and waits[2] > waits[0] and max(waits) <= 1.0, err[-2000:]
    assert "Connection refused" in retries[0]
    assert proc.returncode == 130, err[-2000:]
    assert took < 10, f"Ctrl-C took {took:.2f} s"  # not the camera's backoff and timeouts over and over
    lines = _frames(results)
    assert {m["stream"] for m in lines if m["type"] == "eos"} == {"door", "file1"}
    assert not _by_stream(lines).get("door")
    assert PASSWORD not in err and PASSWORD not in results.read_text() and "admin" not in err
