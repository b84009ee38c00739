"""Live sources on their own: the decode worker and its shared-memory ring, the state machine, backoff,
the stall watchdog, stopping from any state, signals and an owner that dies, shared memory that runs
out, and credentials masking. Real servers, real sockets, real processes."""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from streamlens.errors import SourceError
from streamlens.pictures import YuvPicture, thumbnail_step, to_bgr
from streamlens.sources.decode import CatchUp
from streamlens.sources.backoff import FAST_FOR_S, FAST_S, Backoff, retry_delay
from streamlens.sources.file import FileSource
from streamlens.sources.live import LiveSource
from streamlens.sources.ring import free_bytes
from streamlens.sources.session import BEHIND_S, SessionSpec
from streamlens.sources.worker import (Died, Ended, FrameReady, Opened, ProcessWorker, ThreadWorker,
                                       check_shared_memory)
from streamlens.sources.host_memory import HostMemory

from .conftest import REPO, tmpfs
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


def _decode_in_process(path: Path) -> dict[float, tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """pts -> (luma plane, BGR image, motion vectors) as the file source gives them, decoded here."""
    with FileSource("clip", path, export_mvs=True) as source:
        return {round(f.pts, 4): (f.grey_sample(1).copy(), f.image, f.motion_vectors)
                for f in source.frames(threading.Event())}


@pytest.mark.parametrize("worker_type", [ProcessWorker, ThreadWorker])
def test_worker_hands_over_the_decoders_planes_and_motion_vectors_unchanged(worker_type):
    """The picture crosses as I420: its planes are the decoder's, and its BGR is PyAV's, byte for byte."""
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
                picture, mvs = event.take(host)
                received.append((event.pts, picture, mvs))
            elif isinstance(event, Ended):
                ended = event
            elif event is not None:
                assert isinstance(event, Opened) and (event.info.width, event.info.height) == (640, 360)
    finally:
        worker.close()
    assert ended is not None and ended.reason == "eof"
    # A worker drops frames only when its owner is behind (as a camera's, it never waits): every frame
    # of the file was either handed over or counted as dropped, however busy the machine
    assert received and len(received) + ended.worker_drops == len(expected), (len(received), ended.worker_drops)
    with_mvs = 0
    for pts, picture, mvs in received:
        want_luma, want_image, want_mvs = expected[round(pts, 4)]
        assert isinstance(picture, YuvPicture) and (picture.width, picture.height) == (640, 360)
        assert np.array_equal(picture.y, want_luma)
        assert np.array_equal(picture.grey_sample(thumbnail_step(640)), want_luma[::5, ::5])  # made in the worker
        assert np.array_equal(to_bgr(picture), want_image)
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
            rec.thread.join(15)
            took = time.monotonic() - started
        assert not rec.thread.is_alive() and took < 10, f"stopping took {took:.2f} s"  # not FFmpeg's 20 s
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


def test_a_decoder_that_fell_behind_its_camera_skips_to_a_keyframe_instead_of_handing_over_old_frames(gst_server):
    # The decode worker is frozen for 4 s (as a CPU-starved one would be) while the camera goes on
    # sending: when it runs again, the packets waiting for it are seconds old. It skips them, counts
    # them, and decodes again from a keyframe read near the camera's present.
    source = LiveSource("cam1", gst_server.url("cam1"), transport="tcp", timeout_s=10, stall_s=30)
    with _Recorder(source) as rec:
        assert rec.wait_frames(30, 15), f"no frames: {source.stats()}"
        (worker,) = [p for p in multiprocessing.active_children() if p.name == "streamlens-decode-cam1"]
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            time.sleep(4.0)
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        count = len(rec.frames)
        frozen_at = max(f.pts for _, f in rec.frames)  # the camera's time when the worker froze
        assert rec.wait_frames(count + 60, 15), f"no frames after the freeze: {source.stats()}"
    frames = [f for _, f in rec.frames]
    assert source.reconnects == 0 and source.losses()["decoder"] >= 30, (source.stats(), source.losses())
    # nothing handed over came from the 4 s backlog: a packet sent in its first 2.5 s was read at
    # least 1.5 s after a punctual one would have been (more on a slower machine), past BEHIND_S;
    # the first 0.5 s are left out for frames decoded before the freeze and not yet handed over
    backlog = [round(f.pts - frozen_at, 2) for f in frames if frozen_at + 0.5 < f.pts < frozen_at + 4 - BEHIND_S - 0.5]
    assert backlog == [], backlog
    assert all(b.pts > a.pts for a, b in zip(frames, frames[1:]))


def test_catch_up_skips_a_start_backlog_but_not_a_clock_that_runs_fast_or_a_camera_read_late():
    """A start's backlog is skipped to the camera's pace; a camera whose clock runs twice as fast as
    this host's is not a backlog for long (decoded again after `BACKLOG_MAX_S`); a live file read
    ahead has no backlog (its clock is known); a camera read late from its start (a slow first
    decode, its packets waiting in the socket) is behind, not a backlog."""
    from streamlens.sources.decode import BACKLOG_MAX_S

    burst = CatchUp(behind_s=1.0)  # 4 s sent in 40 ms, then 30 fps at the camera's pace, a keyframe a second
    sent = [burst.skip(k / 30, 10 + k / 3000, k % 30 == 0) for k in range(120)]
    live = [burst.skip(4 + k / 30, 10.04 + k / 30, k % 30 == 0) for k in range(1, 91)]
    assert not any(sent[:31]) and all(sent[32:]) and burst.backlog is False
    assert all(live[:29]) and not any(live[29:])  # the first keyframe after half a second of pace
    fast = CatchUp(behind_s=1.0)
    run = [fast.skip(k / 15, 10 + k / 30, k % 30 == 0) for k in range(30 * 10)]
    # 1 s ahead after 31 packets: skipped for BACKLOG_MAX_S of wall time (150 packets), decoded after
    assert run.index(True) == 31 and all(run[31:181]) and not any(run[int(31 + 30 * BACKLOG_MAX_S) + 1:])
    from streamlens.sources.decode import ClockCatchUp

    file = ClockCatchUp(behind_s=1.0)  # a live file read ahead before its clock is known: no backlog there
    assert not any(file.skip(k / 30, 10 + k / 3000, k % 30 == 0) for k in range(120))
    late = CatchUp(behind_s=1.0)  # its first packet read, then nothing for 2 s, then the rest at once:
    for k in range(60):  # behind the camera (the lag rule's to catch up), never ahead of it
        late.skip(k / 30, 10 + (0 if k == 0 else 2 + k / 3000), k % 30 == 0)
        assert not late.backlog, k


def test_catch_up_follows_a_camera_clock_slower_than_the_hosts_and_lets_jitter_be():
    # an hour of a 30 fps camera whose clock runs 0.1% slow (3.6 s an hour), each packet read up to
    # 0.4 s late (network jitter): never skipped; then the decoder freezes for 3 s: skipped up to a
    # keyframe read within half a second of the camera
    rng = np.random.default_rng(7)
    catch_up = CatchUp(behind_s=1.0)
    for k in range(30 * 3600):
        assert not catch_up.skip(k / 30 * 0.999, 1000 + k / 30 + rng.uniform(0, 0.4), k % 60 == 0), k
    start = 1000 + 3600 + 3.0
    skipped = [catch_up.skip((30 * 3600 + j) / 30 * 0.999, start + j * 0.001, j % 60 == 0) for j in range(120)]
    assert skipped[:60] == [True] * 60 and skipped[60:] == [True] * 60  # still 3 s behind: no keyframe taken
    now = start + 0.2
    later = [catch_up.skip((30 * 3600 + 120 + j) / 30 * 0.999, now + j / 30, j % 60 == 0) for j in range(200)]
    resumed = later.index(False)
    assert resumed % 60 == 0 and not any(later[resumed:])


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
        picture, _ = event.take(HostMemory("auto"))
    finally:
        worker.close()
    assert _FakeTorch.calls == []  # the planes cross in plain memory: only the BGR image goes to a GPU
    image = to_bgr(picture)
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
        picture, _ = _first_frame(worker).take(HostMemory(True))
    finally:
        worker.close()
    tensor = torch.from_numpy(to_bgr(picture))
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


# -- reconnecting fast --------------------------------------------------------------------------

def test_retries_stay_quick_for_the_first_minute_of_an_outage_then_back_off_to_the_cap():
    now = [0.0]
    backoff = Backoff(0.5, 30.0, jitter=0.0, clock=lambda: now[0])
    schedule = []  # (seconds into the outage, wait) for each failed attempt, attempts taking no time
    while now[0] < 600:
        wait = backoff.next()
        schedule.append((now[0], wait))
        now[0] += wait
    young = [wait for at, wait in schedule if at < FAST_FOR_S]
    old = [wait for at, wait in schedule if at >= FAST_FOR_S]
    assert len(young) >= 100 and max(young) <= FAST_S <= 1.0
    growing = old[:old.index(30.0)]
    assert len(growing) >= 4 and all(b == 2 * a for a, b in zip(growing, growing[1:-1]))
    assert set(old[len(growing):]) == {30.0}  # at the cap for good: a camera that stays down
    assert len(old) < 30  # ...is knocked at about twice a minute, not twice a second
    backoff.reset()
    assert backoff.next() == 0.5 and backoff.since == now[0]  # a new outage starts quick again


def test_the_quick_phase_grows_from_the_initial_wait_and_respects_both_settings():
    assert [retry_delay(n, 1.0, 0.1, 5.0) for n in range(1, 6)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert retry_delay(9, 10.0, 0.1, 0.3) == 0.3  # backoff_max_s below the quick cap wins
    assert retry_delay(9, 10.0, 2.0, 5.0) == 2.0  # so does a longer backoff_initial_s
    assert retry_delay(1, 10_000.0, 0.5, 5.0) == 5.0


def test_a_camera_back_after_a_short_outage_was_retried_quickly_and_streams_again(tmp_path):
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    with GstRtspServer({"cam1": SAMPLE}, tmp_path) as server:
        source = LiveSource("cam1", server.url("cam1"), timeout_s=2, stall_s=3, backoff_max_s=5)
        waits: list[float] = []  # every wait the source chose, as it chose it
        next_wait = source.backoff.next
        source.backoff.next = lambda: waits.append(next_wait()) or waits[-1]
        with _Recorder(source) as rec:
            assert rec.wait_frames(10, 15), f"no frames: {source.stats()}"
            server.kill()
            lost = rec.wait_state("reconnecting", 10)
            assert lost is not None, rec.states
            time.sleep(4.0)  # the camera is down for 4 s; then it comes back on the same port
            server.restart()
            back = time.monotonic()
            count = len(rec.frames)
            assert rec.wait_frames(count + 10, 15), f"no frames after the camera came back: {source.stats()}"
            assert rec.wait_state("streaming", 1, after=lost) is not None
    after_loss = [state for at, state in rec.states if at >= lost]
    assert after_loss[0] == "reconnecting" and after_loss[-1] == "stopped"
    assert set(after_loss[:after_loss.index("streaming")]) == {"reconnecting", "backing_off"}
    assert len(waits) >= 2 and max(waits) <= FAST_S, waits  # refused at once, retried quickly, 4 s long
    assert source.reconnects == 1 and "Connection refused" in source.last_error
    assert any(at > back for at, _ in rec.frames)
    frames = [f for _, f in rec.frames]
    assert [f.index for f in frames] == list(range(len(frames)))
    assert all(b.pts > a.pts and b.clock >= a.clock for a, b in zip(frames, frames[1:]))


# -- losses and clocks ------------------------------------------------------------------------------

def test_losses_count_each_cause_and_frames_carry_the_workers_decode_clock():
    # A file read as fast as it decodes stands in for a camera; the consumer takes 50 ms a frame.
    source = LiveSource("clip", str(SAMPLE), max_staleness_ms=40)
    assert source.losses() == {"corrupt": 0, "decoder": 0, "stale": 0, "refused": 0}
    stop = threading.Event()
    for frame in source.frames(stop):
        age = time.monotonic() - frame.clock
        assert 0 <= age < 1.0 and abs((time.time() - frame.ts) - age) < 0.05
        time.sleep(0.05)
        if frame.index >= 20:
            stop.set()
    losses = source.losses()
    assert losses["decoder"] == source.dropped_worker > 0 and losses["stale"] == source.dropped_stale > 0
    assert losses["corrupt"] == 0


def test_packets_the_cameras_decoder_rejects_are_counted(tmp_path):
    """The worker decodes a copy of the sample with three inter-frame packets overwritten."""
    import av

    with av.open(str(SAMPLE)) as container:
        packets = [(p.pos, p.size, p.is_keyframe) for p in container.demux(video=0) if p.size]
    data = bytearray(SAMPLE.read_bytes())
    damaged = [n for n, (_, _, key) in enumerate(packets) if not key][20:23]
    for n in damaged:
        pos, size, _ = packets[n]
        data[pos:pos + size] = b"\xff" * size
    path = tmp_path / "damaged.mp4"
    path.write_bytes(data)
    source = LiveSource("clip", str(path))
    stop = threading.Event()
    for frame in source.frames(stop):
        if frame.index >= 100:
            stop.set()
    assert source.losses()["corrupt"] == 3


# -- signals and an owner that goes away ------------------------------------------------------------

def _frames_until_end(worker, session: int) -> int:
    """Discard a session's frames until it ends; how many came. Fails if the worker died."""
    count = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        event = worker.poll(0.5)
        assert not isinstance(event, Died), event
        if isinstance(event, FrameReady):
            event.discard()
            count += 1
        elif isinstance(event, Ended) and event.session == session:
            return count
    raise AssertionError("the session did not end in 30 s")


def test_a_decode_worker_outlives_sigterm_and_ends_when_its_owner_closes_it():
    """systemd and `docker stop` send SIGTERM to every process; the owner ends its workers itself."""
    worker = ProcessWorker("clip")
    worker.start()
    try:
        worker.open(1, SessionSpec(str(SAMPLE)))
        _first_frame(worker).discard()  # the worker runs its loop: its signal handling is in place
        os.kill(worker.pid, signal.SIGTERM)
        _frames_until_end(worker, 1)
        worker.open(2, SessionSpec(str(SAMPLE)))
        assert _frames_until_end(worker, 2) > 0 and worker.alive
        pid = worker.pid
    finally:
        worker.close()
    assert not worker.alive and not _running(pid)


def _running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (an orphan's zombie waits for init)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


_OWNER = """
import sys, time
from streamlens.sources.session import SessionSpec, input_options
from streamlens.sources.worker import ProcessWorker
worker = ProcessWorker("hang")
worker.start()
url = sys.argv[1]
worker.open(1, SessionSpec(url, input_options(url, transport="tcp", timeout_s=60, user={})))
print(worker.pid, flush=True)
time.sleep(120)
"""


def test_a_decode_worker_whose_owner_dies_exits_even_from_inside_ffmpeg(tmp_path):
    hole = _Blackhole()  # the worker's connect hangs in FFmpeg, for up to its 60 s timeout
    owner = ChildProcess([sys.executable, "-c", _OWNER, f"rtsp://127.0.0.1:{hole.port}/x"], tmp_path / "owner.log")
    pid = None
    try:
        pid = int(owner.readline(timeout=30) or 0)
        deadline = time.monotonic() + 10
        while not hole.held and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid and hole.held and _running(pid), (tmp_path / "owner.log").read_text()
        os.kill(owner.popen.pid, signal.SIGKILL)  # the owner alone (its group holds the worker too)
        owner.popen.wait(10)
        deadline = time.monotonic() + 10
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid), "the worker outlived its owner"
        camera = hole.held[0]
        camera.settimeout(5)
        while camera.recv(4096):  # what the worker sent (its OPTIONS request), then the end: it let go
            pass
    finally:
        owner.kill()
        if pid and _running(pid):
            os.kill(pid, signal.SIGKILL)
        hole.close()


# -- shared memory that runs out ------------------------------------------------------------------

def test_a_ring_that_does_not_fit_in_shared_memory_is_one_clear_line():
    with pytest.raises(SourceError) as raised:
        check_shared_memory("cam6", 11_059_264, free=3_145_728)
    message = str(raised.value)
    assert message.startswith("cam6: not enough shared memory") and "\n" not in message
    assert "11059264 bytes" in message and "3145728 free" in message and "/dev/shm" in message
    assert "docker run --shm-size=" in message and "fewer or smaller cameras" in message
    check_shared_memory("cam1", 11_059_264, free=11_059_264)  # just fits: no error


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs in a folder of its own."""
    with tmpfs(tmp_path / "shm", "1m") as folder:
        yield folder


def test_the_check_reads_a_real_tmpfs(small_tmpfs):
    assert free_bytes(str(small_tmpfs)) == 1 << 20
    check_shared_memory("cam1", 512 << 10, path=str(small_tmpfs))
    (small_tmpfs / "other").write_bytes(b"x" * (768 << 10))  # another camera's ring, say
    with pytest.raises(SourceError, match=rf"cam1: .* needs 524288 bytes, {small_tmpfs} has 262144 free"):
        check_shared_memory("cam1", 512 << 10, path=str(small_tmpfs))


_SMALL_SHM_RUN = """
import threading, time
from streamlens.sources.live import LiveSource
source = LiveSource("cam1", {sample!r}, backoff_initial_s=0.1, backoff_max_s=0.2)
stop = threading.Event()

def watch():  # stop once the camera has been refused twice (a second attempt), or after a minute
    deadline = time.monotonic() + 60
    while source.losses()["refused"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()

threading.Thread(target=watch, daemon=True).start()
frames = sum(1 for _ in source.frames(stop))  # retried until stopped: it never raises for this
print("FRAMES", frames, source.losses()["refused"], source.reconnects)
print("ERROR", source.last_error)
"""


def test_a_camera_whose_ring_does_not_fit_in_dev_shm_is_refused_with_one_line_instead_of_sigbus(tmp_path):
    """/dev/shm shrunk to 1 MiB in a mount namespace of its own; a 640x360 ring needs 1.4 MiB (4 slots
    of I420 and its scene-cut sample). The camera delivers nothing, says why, counts each picture it
    refused and is retried (its trouble is its own: sources/live.py); no worker dies of SIGBUS."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a small /dev/shm in a mount namespace here ({probe.stderr.strip()})")
    script = _SMALL_SHM_RUN.format(sample=str(SAMPLE))
    done = subprocess.run(["unshare", "--mount", "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$@"',
                           "sh", sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    counts, line = done.stdout.strip().splitlines()
    _, frames, refused, _ = counts.split()
    assert frames == "0" and int(refused) >= 2, counts  # refused at each attempt, retried
    assert line.startswith("ERROR cam1: not enough shared memory"), line
    assert "needs 1419328 bytes, /dev/shm has" in line and "--shm-size=" in line


_RING_REFUSED_THEN_SMALL = """
import sys
from streamlens.sources.file_passes import FileSpec
from streamlens.sources.host_memory import HostMemory
from streamlens.sources.session import SessionSpec
from streamlens.sources.worker import Ended, FrameReady, ProcessWorker

def session(worker, number, spec, frames):
    worker.open(number, spec)
    got = 0
    while True:
        event = worker.poll(30)
        if isinstance(event, FrameReady):
            event.take(HostMemory(False))
            got += 1
            if got == frames:
                worker.abort(number)
        elif isinstance(event, Ended) and event.session == number:
            return got, event
        elif event is not None and not hasattr(event, "info"):
            return got, event

worker = ProcessWorker("cam1")
worker.start()
small, large = sys.argv[1], sys.argv[2]
# the small sessions read their file losslessly: a camera's session would drop frames whenever this
# loop is slower than decoding (a loaded machine), and the counts below would depend on its speed
print(*session(worker, 1, FileSpec(small, small, {}), 5)[:1])
got, end = session(worker, 2, SessionSpec(large), 5)
print(got, end.reason, end.detail.get("refused"))
got, end = session(worker, 3, FileSpec(small, small, {}), 5)
print(got)
print(end)  # how the third session ended, for the assertion's message
worker.close()
"""


def test_a_worker_whose_larger_ring_was_refused_asks_for_a_new_one_next_session(tmp_path):
    """A 3 MiB /dev/shm: a 320x240 session, then a 1280x720 one (its ring has no room: refused), then
    320x240 again. The refusal retired the small ring too, so the third session must get a ring of its
    own (it once sent frames of the retired ring, which ended the stream with KeyError)."""
    if shutil.which("unshare") is None or ffmpeg_missing():
        pytest.skip("unshare (util-linux) or ffmpeg is not installed")
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=3m tmpfs /dev/shm"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a small /dev/shm in a mount namespace here ({probe.stderr.strip()})")
    sizes = {}
    for w, h in ((320, 240), (1280, 720)):
        sizes[w] = tmp_path / f"{w}.mp4"
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(SAMPLE), "-t", "1", "-an", "-vf",
                        f"scale={w}:{h}", "-c:v", "libx264", "-preset", "ultrafast", str(sizes[w])], check=True)
    done = subprocess.run(["unshare", "--mount", "sh", "-c", 'mount -t tmpfs -o size=3m tmpfs /dev/shm && exec "$@"',
                           "sh", sys.executable, "-c", _RING_REFUSED_THEN_SMALL, str(sizes[320]), str(sizes[1280])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    first, refused, third = done.stdout.split("\n")[:3]
    # each small session delivers its frames (5, or one more already on its way when it was aborted)
    assert int(first) >= 5 and refused == "0 refused 1" and int(third) >= 5, done.stdout + done.stderr[-2000:]


def test_a_backlog_a_server_sends_at_connection_is_skipped_to_the_cameras_present(tmp_path):
    """GStreamer's RTSP server, its shared media playing with no client for 5 s, sends the first
    client those 5 s at once (a relay's cache does the same). They are not published as if live:
    past `BEHIND_S` ahead of this host's clock the session skips to a keyframe read at the camera's
    pace, so the video handed over outruns the wall clock by little more than that, and the frames
    skipped are not counted as the camera's losses. Before, the whole backlog was decoded and
    handed over within a second or two (7.1 s of video in 1.1 s). A slow machine only makes frames
    later."""
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    with GstRtspServer({"cam1": SAMPLE}, tmp_path) as server:
        time.sleep(5.0)  # the media runs, buffered by the server for its first client
        source = LiveSource("cam1", server.url("cam1"), transport="tcp", timeout_s=10, stall_s=5)
        with _Recorder(source) as rec:
            assert rec.wait_frames(60, 30), f"no frames: {source.stats()}"
            time.sleep(1.0)
    pts = [frame.pts for _, frame in rec.frames]
    steps = [b - a for a, b in zip(pts, pts[1:])]
    # the video handed over (the skip to the present left out) against the wall time it took: at
    # most `BEHIND_S` of backlog decoded before the skip, and a second's slack for frames handed
    # over late (a busy machine only adds wall time); the code before handed over 6 s more
    video, wall = sum(step for step in steps if step < 1.0), rec.frames[-1][0] - rec.frames[0][0]
    assert video - wall < BEHIND_S + 1.0, (video, wall, max(steps))
    assert max(steps) > 3.0, max(steps)  # the skip: most of the 5 s backlog was never decoded
    assert source.losses().get("decoder", 0) < 30, source.losses()  # and is not counted as lost
