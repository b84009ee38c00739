"""Live sources on their own: the decode worker and its shared-memory ring, the state machine, backoff,
the stall watchdog, stopping from any state, and credentials masking. Real servers, real sockets."""

from __future__ import annotations

import logging
import multiprocessing
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from streamlens.sources.file import FileSource
from streamlens.sources.live import LiveSource
from streamlens.sources.session import SessionSpec
from streamlens.sources.worker import Died, Ended, FrameReady, Opened, ProcessWorker, ThreadWorker
from streamlens.sources.host_memory import HostMemory

from .conftest import REPO
from .rtsp_server import (ChildProcess, GstRtspServer, PerlRtspServer, annexb_copy, ffmpeg_missing, free_port,
                          gst_missing, perl_missing)

SAMPLE = REPO / "samples" / "traffic.mp4"


class _Recorder:
    """Runs `source.frames()` on a thread and records frames and state changes with their times."""

    def __init__(self, source: LiveSource):
        self.source = source
        self.stop = threading.Event()
        self.frames: list[tuple[float, object]] = []
        self.states: list[tuple[float, str]] = [(time.monotonic(), source.state)]
        source.on_state = lambda name, state: self.states.append((time.monotonic(), state))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            for frame in self.source.frames(self.stop):
                self.frames.append((time.monotonic(), frame))
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)

    def wait_frames(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.frames) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self.frames) >= count

    def wait_state(self, state: str, timeout: float, after: float = 0.0) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, seen in list(self.states):
                if seen == state and at >= after:
                    return at
            time.sleep(0.05)
        return None


def _decode_in_process(path: Path) -> dict[float, tuple[np.ndarray, np.ndarray | None]]:
    """pts -> (image, motion vectors) as the file source gives them, decoded here."""
    with FileSource("clip", path, export_mvs=True) as source:
        return {round(f.pts, 4): (f.image, f.motion_vectors) for f in source.frames(threading.Event())}


@pytest.mark.parametrize("worker_type", [ProcessWorker, ThreadWorker])
def test_worker_hands_over_pixels_and_motion_vectors_unchanged(worker_type):
    expected = _decode_in_process(SAMPLE)
    worker = worker_type("clip")
    worker.start()
    host = HostMemory(pinned=False)
    received, ended = [], None
    try:
        worker.open(1, SessionSpec(str(SAMPLE), export_mvs=True))
        deadline = time.monotonic() + 30
        while ended is None and time.monotonic() < deadline:
            event = worker.poll(0.5)
            if isinstance(event, FrameReady):
                image, mvs = event.take(host)
                received.append((event.pts, image, mvs))
            elif isinstance(event, Ended):
                ended = event
            elif event is not None:
                assert isinstance(event, Opened) and (event.info.width, event.info.height) == (640, 360)
    finally:
        worker.close()
    assert ended is not None and ended.reason == "eof"
    # A worker drops frames only when its owner is behind; here the owner keeps up with most.
    assert len(received) >= 100
    with_mvs = 0
    for pts, image, mvs in received:
        want_image, want_mvs = expected[round(pts, 4)]
        assert np.array_equal(image, want_image)
        if want_mvs is None:
            assert mvs is None
        else:
            with_mvs += 1
            assert mvs.dtype == want_mvs.dtype and np.array_equal(mvs, want_mvs)
    assert with_mvs >= 0.8 * len(received)


class _Blackhole:
    """A TCP port that accepts connections and never answers: a camera that hangs."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("decode", ["process", "thread"])
def test_stop_ends_a_connect_that_hangs_within_a_second(decode):
    hole = _Blackhole()
    source = LiveSource("hang", f"rtsp://127.0.0.1:{hole.port}/x", timeout_s=20, decode=decode)
    try:
        with _Recorder(source) as rec:
            time.sleep(1.5)  # the worker is inside FFmpeg's open, which waits up to 20 s
            assert source.state == "connecting" and hole.held
            started = time.monotonic()
            rec.stop.set()
            rec.thread.join(3)
            took = time.monotonic() - started
        assert not rec.thread.is_alive() and took < 1.0, f"stopping took {took:.2f} s"
        assert source.state == "stopped" and rec.error is None
        if decode == "process":
            assert not [p for p in multiprocessing.active_children() if p.name.startswith("streamlens-decode")]
    finally:
        hole.close()


def test_refused_camera_backs_off_with_a_cap_and_never_shows_its_password(caplog):
    port = free_port()  # nothing listens there: every connection is refused
    source = LiveSource("door", f"rtsp://admin:s3cret@127.0.0.1:{port}/stream1", backoff_initial_s=0.1,
                        backoff_max_s=0.4, decode="thread")
    with caplog.at_level(logging.DEBUG, logger="streamlens"), _Recorder(source) as rec:
        time.sleep(2.5)
    attempts = [at for at, state in rec.states if state == "connecting"]
    waits = np.diff(attempts)
    assert len(attempts) >= 5 and not rec.frames
    assert waits[0] < 0.2 and all(w < 0.4 * 1.0 + 0.15 for w in waits), waits  # 0.1, 0.2, 0.4, 0.4 ...
    assert waits[-1] > 0.25, waits
    assert source.state == "stopped" and source.reconnects == 0
    assert "Connection refused" in source.last_error
    shown = caplog.text + repr(source.stats()) + str(source.last_error)
    assert "cannot connect to rtsp://***@127.0.0.1" in caplog.text
    assert "s3cret" not in shown and "admin" not in shown


@pytest.fixture(scope="module")
def gst_server(tmp_path_factory):
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    with GstRtspServer({"cam1": SAMPLE}, tmp_path_factory.mktemp("gst")) as server:
        yield server


def test_stall_watchdog_reopens_a_connection_that_goes_quiet(gst_server):
    source = LiveSource("cam1", gst_server.url("cam1"), transport="tcp", timeout_s=10, stall_s=1.0,
                        backoff_max_s=0.5)
    with _Recorder(source) as rec:
        assert rec.wait_frames(10, 15), f"no frames: {source.stats()}"
        publisher = gst_server.publishers["cam1"]
        publisher.pause()  # the encoder freezes: the connection stays up, no packet arrives
        try:
            paused = time.monotonic()
            stalled = rec.wait_state("stalled", 5, after=paused)
        finally:
            publisher.resume()
        assert stalled is not None and 0.9 < stalled - paused < 2.5, rec.states
        count = len(rec.frames)
        assert rec.wait_frames(count + 10, 10), f"no frames after the stall: {source.stats()}"
        back = rec.wait_state("streaming", 1, after=stalled)
    assert back is not None and source.reconnects >= 1
    states = [s for _, s in rec.states]
    assert states[:3] == ["connecting", "streaming", "stalled"] and states[-1] == "stopped"
    frames = [f for _, f in rec.frames]
    assert all(b.pts > a.pts for a, b in zip(frames, frames[1:]))
    assert [f.index for f in frames] == list(range(len(frames)))


def test_udp_transport_through_rtsp_server_perl_and_its_restart(tmp_path):
    reason = perl_missing()
    if reason:
        pytest.skip(reason)
    with PerlRtspServer({"cam1": SAMPLE}, tmp_path) as server:
        source = LiveSource("cam1", server.url("cam1", "viewer:pa55"), transport="udp", timeout_s=2,
                            backoff_max_s=0.5)
        with _Recorder(source) as rec:
            assert rec.wait_frames(10, 15), f"no frames over UDP: {source.stats()}"
            server.kill()
            time.sleep(1.0)
            count = len(rec.frames)
            server.restart()
            back = time.monotonic()
            assert rec.wait_frames(count + 5, 6), f"no frames after the restart: {source.stats()}"
            first_after = next(at for at, f in rec.frames[count:])
    assert first_after - back < 3.0
    assert source.reconnects == 1 and rec.frames[0][1].image.shape == (360, 640, 3)


def test_a_decode_worker_that_dies_is_replaced_and_the_stream_goes_on(gst_server):
    source = LiveSource("cam1", gst_server.url("cam1"), timeout_s=2, backoff_max_s=0.5)
    with _Recorder(source) as rec:
        assert rec.wait_frames(10, 15), f"no frames: {source.stats()}"
        (worker,) = [p for p in multiprocessing.active_children() if p.name == "streamlens-decode-cam1"]
        worker.kill()  # as a crash inside FFmpeg would end it
        count = len(rec.frames)
        assert rec.wait_frames(count + 10, 10), f"no frames after the worker died: {source.stats()}"
    assert source.reconnects == 1 and "decode worker ended" in source.last_error


def _first_frame(worker) -> FrameReady:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        event = worker.poll(0.5)
        assert not isinstance(event, (Ended, Died)), event
        if isinstance(event, FrameReady):
            return event
    raise AssertionError("no frame from the worker in 20 s")


class _FakeTensor:
    def __init__(self, shape):
        self.array = np.zeros(shape, np.uint8)

    def numpy(self):
        return self.array


class _FakeTorch:
    """Just enough of torch to see that pinned memory is asked for (no GPU here)."""

    uint8 = "uint8"
    calls: list = []

    class cuda:  # noqa: N801 - torch's name
        @staticmethod
        def is_available():
            return True

    @classmethod
    def empty(cls, shape, dtype, pin_memory):
        cls.calls.append((tuple(shape), dtype, pin_memory))
        return _FakeTensor(shape)


def test_frames_land_in_pinned_memory_when_a_cuda_torch_is_loaded(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _FakeTorch)
    assert HostMemory("auto").pinned
    worker = ProcessWorker("clip")
    worker.start()
    try:
        worker.open(1, SessionSpec(str(SAMPLE)))
        event = _first_frame(worker)
        image, _ = event.take(HostMemory("auto"))
    finally:
        worker.close()
    assert _FakeTorch.calls == [((360, 640, 3), "uint8", True)] and image.any()
    monkeypatch.delitem(sys.modules, "torch")
    assert not HostMemory("auto").pinned  # torch not loaded: never imported just to find out


def test_frames_are_pinned_on_a_real_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: pinned host memory is checked with a stand-in torch above")
    worker = ThreadWorker("clip")
    worker.start()
    try:
        worker.open(1, SessionSpec(str(SAMPLE)))
        image, _ = _first_frame(worker).take(HostMemory(True))
    finally:
        worker.close()
    tensor = torch.from_numpy(image)
    assert tensor.is_pinned()
    assert torch.equal(tensor.cuda(non_blocking=True).cpu(), tensor)


def test_a_slow_consumer_gets_fresh_frames_and_every_drop_is_counted():
    # A file read as fast as it decodes stands in for a camera; the consumer takes 50 ms a frame.
    source = LiveSource("clip", str(SAMPLE), max_staleness_ms=40)
    stop = threading.Event()
    ages, indexes = [], []
    for frame in source.frames(stop):
        ages.append(time.time() - frame.ts)
        indexes.append(frame.index)
        time.sleep(0.05)
        if len(indexes) == 20:
            stop.set()
    assert max(ages) < 0.04 + 0.03, ages
    assert source.dropped_stale > 0 and source.dropped_worker > 0, source.stats()
    assert source.stats()["dropped_source"] == source.dropped_stale + source.dropped_worker
    assert indexes == sorted(indexes) and indexes[-1] >= 19 + source.dropped_stale


def test_an_http_stream_is_read_with_its_own_timeout_option(tmp_path):
    if ffmpeg_missing():
        pytest.skip(ffmpeg_missing())
    port = free_port()
    server = ChildProcess(["ffmpeg", "-nostdin", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i",
                       str(annexb_copy(SAMPLE, tmp_path)), "-c", "copy", "-f", "mpegts", "-listen", "1",
                       f"http://127.0.0.1:{port}/live.ts"], tmp_path / "http.log")
    try:
        source = LiveSource("web", f"http://127.0.0.1:{port}/live.ts", timeout_s=2, backoff_initial_s=0.2,
                            backoff_max_s=0.5, decode="thread")
        assert source.spec.options["rw_timeout"] == "2000000" and "timeout" not in source.spec.options
        with _Recorder(source) as rec:
            assert rec.wait_frames(10, 15), f"no frames over HTTP: {source.stats()}"
        assert rec.frames[0][1].image.shape == (360, 640, 3)
    finally:
        server.kill()
