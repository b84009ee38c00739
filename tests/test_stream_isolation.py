"""Streams that never take each other down, tried as users run them: real cameras from GStreamer's
RTSP server (Debian's packages), `streamlens run` in a subprocess, `runtime.workers: 2`, engines and
decode workers killed, a /dev/shm too small for a camera that switches to a larger picture, a
process out of file descriptors, pictures over `max_pixels`, a sink that fails under the supervisor.
Each test asserts what a user relies on: the stream in trouble is retried or ends alone with one
line naming it, the others go on losing nothing, and nothing is left behind."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from .conftest import REPO, tmpfs
from .rtsp_server import GstRtspServer, annexb_copy, free_port, gst_missing

SAMPLE = REPO / "samples" / "traffic.mp4"  # 300 frames, 640x360, 30 fps
SHM = Path("/dev/shm")


def _lines(path: Path) -> list[dict]:
    """The whole lines of a JSONL file that may still be being written."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def _frames(path: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for m in _lines(path):
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


def _start(tmp_path: Path, pipeline: str, prefix: list[str] | None = None) -> tuple[subprocess.Popen, Path]:
    path = tmp_path / "pipeline.yaml"
    path.write_text(pipeline)
    stderr = tmp_path / "stderr.txt"
    proc = subprocess.Popen([*(prefix or []), sys.executable, "-m", "streamlens", "run", str(path)], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(stderr, "wb"))
    return proc, stderr


def _interrupt(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("the run did not end within 60 s of Ctrl-C") from None


def _rings() -> set[str]:
    return {p.name for p in SHM.glob("streamlens-*")} if SHM.is_dir() else set()


def _tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _engines(pid: int) -> list[psutil.Process]:
    """The engine processes of the run `pid`, oldest first (engine 0 first)."""
    found = [p for p in psutil.Process(pid).children()
             if "spawn_main" in " ".join(p.cmdline()) and "resource_tracker" not in " ".join(p.cmdline())]
    return sorted(found, key=lambda p: p.create_time())


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.fixture
def cameras(tmp_path):
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    with GstRtspServer({"cam1": SAMPLE, "cam2": SAMPLE}, tmp_path) as server:
        yield server


def test_two_engines_run_cameras_and_a_killed_engine_takes_nothing_else_down(tmp_path, cameras):
    """`workers: 2` with two RTSP cameras (decoded in worker processes, the default) and two live
    files. SIGKILL the engine of cam2 and file2, twice: both come back each time with `seq` going on
    (never a repeat), the restart's wait doubles (1 s, then 2 s), the restarts are counted in /metrics;
    cam1 and file1 lose nothing. After Ctrl-C no process and no /dev/shm ring is left."""
    rings_before = _rings()
    http = free_port()
    url = cameras.url
    proc, stderr = _start(tmp_path, f"""
sources:
  - {{name: cam1, uri: '{url("cam1")}', timeout_s: 2, stall_s: 3, backoff_max_s: 1}}
  - {{name: cam2, uri: '{url("cam2")}', timeout_s: 2, stall_s: 3, backoff_max_s: 1}}
  - {{name: file1, uri: {SAMPLE}, live: true, loop: true}}
  - {{name: file2, uri: {SAMPLE}, live: true, loop: true}}
detector: {{backend: motion}}
keyframes: {{interval: 5}}
runtime: {{workers: 2, http: {{port: {http}}}}}
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    out = tmp_path / "out.jsonl"
    names = ("cam1", "cam2", "file1", "file2")
    descendants: list[psutil.Process] = []
    try:
        _wait_for(lambda: all(len(_frames(out).get(n, [])) >= 20 for n in names), 120, proc, "frames from every stream")
        engines = _engines(proc.pid)
        assert len(engines) == 2
        # each engine decodes its camera in a worker process of its own: an engine has children
        assert all(e.children() for e in engines), "an engine started no decode worker"
        for kill in (1, 2):
            before = {n: len(v) for n, v in _frames(out).items()}
            victim = _engines(proc.pid)[1]  # engine 1: cam2 and file2
            descendants += _tree(victim.pid)
            victim.kill()
            _wait_for(lambda: all(len(_frames(out).get(n, [])) > before[n] + 30 for n in names), 120, proc,
                      f"every stream delivering again after kill {kill}")
        descendants += _tree(proc.pid)
        metrics = _metrics(http)
        assert 'streamlens_engine_restarts_total{engine="1"} 2.0' in metrics, metrics
        assert 'streamlens_engine_restarts_total{engine="0"} 0.0' in metrics
    finally:
        code = _interrupt(proc)
    err = stderr.read_text()
    assert code == 130, err[-3000:]
    assert "engine 1 (cam2, file2) died (killed by signal 9); restarting it in 1 s (restart 1)" in err, err
    assert "engine 1 (cam2, file2) died (killed by signal 9); restarting it in 2 s (restart 2)" in err, err
    assert "Traceback" not in err
    streams = _frames(out)
    for name in ("cam1", "file1"):  # engine 0: nothing lost
        seq = [m["seq"] for m in streams[name]]
        assert seq == list(range(len(seq))), f"{name}: seq has gaps"
    for name in ("cam2", "file2"):  # engine 1: gaps at the kills, never a repeat or a step back
        seq = [m["seq"] for m in streams[name]]
        assert all(b > a for a, b in zip(seq, seq[1:])), name
    ends = {m["stream"]: m["reason"] for m in _lines(out) if m["type"] == "eos"}
    assert ends == {n: "stopped" for n in names}
    time.sleep(1.0)  # the resource trackers of killed engines end once their last holder has
    assert not [p for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], descendants
    assert _rings() <= rings_before, "frame rings left in /dev/shm"
