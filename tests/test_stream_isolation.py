"""Streams that never take each other down, tried as users run them: real cameras from GStreamer's
RTSP server (Debian's packages), `streamlens run` in a subprocess, `runtime.workers: 2`, engines and
decode workers killed, a /dev/shm too small for a camera that switches to a larger picture, a
process out of file descriptors, pictures over `max_pixels`, a sink that fails under the supervisor.
Each test asserts what a user relies on: the stream in trouble is retried or ends alone with one
line naming it, the others go on losing nothing, and nothing is left behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from .conftest import REPO, tmpfs
from .rtsp_server import GstRtspServer, free_port, gst_missing
from .test_live_pipeline import _by_stream, _wait_for
from .test_live_pipeline import _frames as _lines
from .test_workers import command_line, engines

SAMPLE = REPO / "samples" / "traffic.mp4"  # 300 frames, 640x360, 30 fps
SHM = Path("/dev/shm")


def _frames(path: Path) -> dict[str, list[dict]]:
    """The frame messages of a JSONL file that may still be being written, by stream."""
    return _by_stream(_lines(path))


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
    (never a repeat), each restart waits as the backoff says, the restarts are counted in /metrics;
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
        running = engines(proc.pid)
        assert len(running) == 2
        # each engine decodes its camera in a worker process of its own: an engine has children
        assert all(e.children() for e in running), "an engine started no decode worker"
        for kill in (1, 2):
            before = {n: len(v) for n, v in _frames(out).items()}
            victim = engines(proc.pid)[1]  # engine 1: cam2 and file2
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
    # the second wait doubles unless the restarted engine ran a minute first (a very slow machine):
    # the schedule itself is supervisor.restart_delay's doctest
    assert re.search(r"engine 1 \(cam2, file2\) died \(killed by signal 9\); restarting it in [12] s \(restart 2\)",
                     err), err
    assert "Traceback" not in err
    assert "resource_tracker" not in err, err  # a dead engine's rings were removed, and untracked, by the run
    streams = _frames(out)
    for name in ("cam1", "file1"):  # engine 0: nothing lost
        seq = [m["seq"] for m in streams[name]]
        assert seq == list(range(len(seq))), f"{name}: seq has gaps"
    for name in ("cam2", "file2"):  # engine 1: gaps at the kills, never a repeat or a step back
        seq = [m["seq"] for m in streams[name]]
        assert all(b > a for a, b in zip(seq, seq[1:])), name
    ends = {m["stream"]: m["reason"] for m in _lines(out) if m["type"] == "eos"}
    assert ends == {n: "stopped" for n in names}, err[-3000:]  # the run's own lines say what became of an engine

    def left() -> list[psutil.Process]:  # a killed engine's resource tracker ends once its last holder has
        return [p for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    deadline = time.monotonic() + 30
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left(), left()
    assert _rings() <= rings_before, "frame rings left in /dev/shm"


def _switching_camera_media(folder: Path) -> Path:
    """4 s of the sample at 320x240, then 4 s at 1280x720, as one H.264 MPEG-TS (SPS and PPS before
    every keyframe): looped by the publisher, a camera that keeps switching its resolution."""
    parts = []
    for w, h in ((320, 240), (1280, 720)):
        part = folder / f"part_{w}x{h}.ts"
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(SAMPLE), "-t", "4", "-an",
                        "-vf", f"scale={w}:{h}", "-c:v", "libx264", "-preset", "ultrafast", "-g", "30", "-bf", "0",
                        "-bsf:v", "h264_mp4toannexb", "-f", "mpegts", str(part)], check=True, timeout=120)
        parts.append(part.read_bytes())
    out = folder / "switching.ts"
    out.write_bytes(b"".join(parts))
    return out


def _small_shm_prefix(size: str) -> list[str]:
    """A command prefix that runs the pipeline in a mount namespace of its own whose /dev/shm is a
    tmpfs of `size`; skips where this machine does not allow it (needs root and unshare)."""
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size={size} tmpfs /dev/shm"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot give a process a private {size} /dev/shm here "
                    f"({probe.stderr.strip() or 'unshare -m failed'}): needs root and util-linux's unshare")
    return ["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$0" "$@"']


def test_a_camera_that_outgrows_shared_memory_is_retried_and_the_other_stream_goes_on(tmp_path):
    """A camera that switches from 320x240 to 1280x720 in a 3 MB /dev/shm (its 720p frame ring needs
    5.5 MB): the camera says so in a line naming it, counts the picture it refused, and is retried;
    it streams again once its pictures fit; the file beside it is never stopped."""
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    prefix = _small_shm_prefix("3m")
    with GstRtspServer({"switching": _switching_camera_media(tmp_path)}, tmp_path) as server:
        proc, stderr = _start(tmp_path, f"""
sources:
  - {{name: cam, uri: '{server.url("switching")}', timeout_s: 2, stall_s: 3, backoff_max_s: 1}}
  - {{name: file1, uri: {SAMPLE}, live: true, loop: true}}
detector: {{backend: motion}}
tracker: none
sinks: [{{type: jsonl, path: out.jsonl}}]
""", prefix)
        out = tmp_path / "out.jsonl"

        def connections() -> int:  # the camera's runs of frames, a connection each
            cam = _frames(out).get("cam", [])
            return 1 + sum(b["pts"] - a["pts"] > 1.0 for a, b in zip(cam, cam[1:])) if cam else 0

        try:
            _wait_for(lambda: "not enough shared memory" in stderr.read_text(), 60, proc, "the camera's ring refused")
            refused_at = time.time()
            _wait_for(lambda: connections() >= 2, 60, proc, "the camera streaming again after its refusal")
            _wait_for(lambda: _frames(out)["file1"][-1]["ts"] > refused_at + 2, 30, proc, "the file going on")
        finally:
            code = _interrupt(proc)
    err = stderr.read_text()
    assert code == 130, err[-3000:]
    assert "Traceback" not in err
    refusals = [line for line in err.splitlines() if "not enough shared memory" in line]
    assert refusals and all(line.split(": ")[1].startswith("cam") for line in refusals), refusals
    streams = _frames(out)
    assert {(m["width"], m["height"]) for m in streams["cam"]} == {(320, 240)}
    file_seq = [m["seq"] for m in streams["file1"]]
    assert file_seq == list(range(len(file_seq)))
    ends = {m["stream"]: m for m in _lines(out) if m["type"] == "eos"}
    assert ends["file1"]["reason"] == "stopped" and ends["cam"]["reason"] == "stopped"
    assert ends["cam"]["lost"]["refused"] >= 1


def _decode_workers(pid: int) -> list[psutil.Process]:
    """The run's decode worker processes: the children of its forkserver (forked, they show its command line)."""
    servers = [p for p in psutil.Process(pid).children() if "forkserver" in command_line(p)]
    return [w for server in servers for w in server.children()]


def test_a_decode_worker_that_cannot_start_is_retried_and_the_file_beside_it_goes_on(tmp_path, cameras):
    """The camera's decode worker is killed while the run may open no file descriptor at all (its
    RLIMIT_NOFILE lowered to 3): a new worker cannot be started, the camera says so in a line naming
    it and backs off; the file decoded beside it goes on. Once descriptors are allowed again the
    camera streams again."""
    proc, stderr = _start(tmp_path, f"""
sources:
  - {{name: cam1, uri: '{cameras.url("cam1")}', timeout_s: 2, stall_s: 3, backoff_max_s: 1}}
  - {{name: file1, uri: {SAMPLE}, live: true, loop: true}}
detector: {{backend: motion}}
tracker: none
sinks: [{{type: jsonl, path: out.jsonl}}]
runtime: {{workers: 1}}  # one engine: the run's own process starts the decode worker, under its limit
""")
    out = tmp_path / "out.jsonl"
    run = psutil.Process(proc.pid)
    limits = run.rlimit(psutil.RLIMIT_NOFILE)
    try:
        _wait_for(lambda: all(len(_frames(out).get(n, [])) >= 20 for n in ("cam1", "file1")), 60, proc,
                  "frames from both streams")
        workers = _decode_workers(proc.pid)
        assert len(workers) == 1, workers
        run.rlimit(psutil.RLIMIT_NOFILE, (3, limits[1]))
        workers[0].kill()
        _wait_for(lambda: "cannot start its decode worker" in stderr.read_text(), 30, proc, "the failed start")
        failed_at = time.time()
        _wait_for(lambda: _frames(out)["file1"][-1]["ts"] > failed_at + 2, 30, proc, "the file going on")
        assert not [m for m in _frames(out)["cam1"] if m["ts"] > failed_at]
        run.rlimit(psutil.RLIMIT_NOFILE, limits)
        _wait_for(lambda: _frames(out)["cam1"][-1]["ts"] > failed_at + 1, 60, proc, "the camera streaming again")
    finally:
        try:
            run.rlimit(psutil.RLIMIT_NOFILE, limits)
        except psutil.Error:
            pass
        code = _interrupt(proc)
    err = stderr.read_text()
    assert code == 130, err[-3000:]
    assert "Traceback" not in err
    assert re.search(r"cam1: cannot connect to rtsp://\S+ \(cannot start its decode worker \(\[Errno 24\] "
                     r"Too many open files\)\); retrying in", err), err[-3000:]
    file_seq = [m["seq"] for m in _frames(out)["file1"]]
    assert file_seq == list(range(len(file_seq)))
    ends = {m["stream"]: m["reason"] for m in _lines(out) if m["type"] == "eos"}
    assert ends == {"cam1": "stopped", "file1": "stopped"}


def test_a_file_over_max_pixels_ends_alone_with_one_line(tmp_path):
    """A file whose pictures are larger than its `max_pixels` ends with reason `error` and one line
    naming it; the file beside it is read to its end; the run exits 1 at its end."""
    out = tmp_path / "out.jsonl"
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources:
  - {{name: big, uri: {SAMPLE}, max_pixels: 100000}}
  - {{name: fine, uri: {SAMPLE}, decode: process}}
detector: {{backend: motion}}
sinks: [{{type: jsonl, path: {out}}}]
""")
    run = subprocess.run([sys.executable, "-m", "streamlens", "run", "-q", str(path)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    line = f"big: {SAMPLE}: a picture of 640x360 (0.2 Mpx) is larger than max_pixels (0.1 Mpx)"
    assert f"streamlens: error: {line}" in run.stderr.splitlines(), run.stderr
    ends = {m["stream"]: m for m in _lines(out) if m["type"] == "eos"}
    assert ends["big"]["reason"] == "error" and ends["big"]["frames"] == 0
    assert ends["fine"]["reason"] == "end" and ends["fine"]["frames"] == 300
    assert len(_frames(out)["fine"]) == 300


def test_a_camera_over_max_pixels_is_retried_saying_so_while_the_other_streams(tmp_path, cameras):
    """A camera whose pictures are over its `max_pixels` is refused before anything is decoded, says
    so in a line naming it, and is retried; the camera beside it streams."""
    proc, stderr = _start(tmp_path, f"""
sources:
  - {{name: big, uri: '{cameras.url("cam1")}', timeout_s: 2, max_pixels: 100000, backoff_max_s: 1}}
  - {{name: cam2, uri: '{cameras.url("cam2")}', timeout_s: 2}}
detector: {{backend: motion}}
tracker: none
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    out = tmp_path / "out.jsonl"
    refusal = "a picture of 640x360 (0.2 Mpx) is larger than max_pixels (0.1 Mpx)"
    try:
        _wait_for(lambda: stderr.read_text().count(refusal) >= 2 and len(_frames(out).get("cam2", [])) >= 30, 60,
                  proc, "two refusals and the other camera's frames")
    finally:
        code = _interrupt(proc)
    err = stderr.read_text()
    assert code == 130 and "Traceback" not in err, err[-3000:]
    assert re.search(rf"big: cannot connect to rtsp://\S+ \({re.escape(refusal)}\); retrying in", err), err[-3000:]
    assert "big" not in _frames(out)


def test_an_unknown_camera_host_is_named_in_its_retry_line(tmp_path):
    """A camera whose host does not resolve says so ("cannot resolve host ...") in its retry lines,
    and the file beside it is read to its end."""
    proc, stderr = _start(tmp_path, f"""
sources:
  - {{name: door, uri: 'rtsp://admin:pw@cam7.invalid:554/stream1', timeout_s: 2}}
  - {{name: file1, uri: {SAMPLE}}}
detector: {{backend: motion}}
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    out = tmp_path / "out.jsonl"
    try:
        _wait_for(lambda: any(m["type"] == "eos" for m in _lines(out)), 120, proc, "the file's end")
        _wait_for(lambda: "cannot resolve host" in stderr.read_text(), 30, proc, "the camera's retry line")
    finally:
        _interrupt(proc)
    err = stderr.read_text()
    assert "door: cannot connect to rtsp://***@cam7.invalid:554/stream1 (cannot resolve host cam7.invalid" in err, err
    assert "pw@" not in err
    assert len(_frames(out)["file1"]) == 300


def test_a_sink_that_fails_under_two_engines_ends_the_run_with_one_line(tmp_path):
    """`workers: 2`, a jsonl file on a disk that fills: the run ends as it does with one engine, one
    line naming the file, exit 1, no traceback; the file holds whole lines only."""
    with tmpfs(tmp_path / "disk", "200k") as disk:
        out = disk / "results.jsonl"
        path = tmp_path / "p.yaml"
        path.write_text(f"""
sources:
  - {{uri: {SAMPLE}, loop: true}}
  - {{uri: {SAMPLE}, loop: true}}
detector: {{backend: motion}}
runtime: {{workers: 2}}
sinks: [{{type: jsonl, path: {out}}}]
""")
        run = subprocess.run([sys.executable, "-m", "streamlens", "run", "-q", str(path)], capture_output=True,
                             text=True, timeout=300)
        raw = out.read_bytes()
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("streamlens: error: ")]
    assert errors == [f"streamlens: error: sinks[0].path: cannot write {out}: No space left on device"], run.stderr
    assert len(raw) > 100_000 and raw.endswith(b"\n")
    [json.loads(line) for line in raw.splitlines()]
