"""FileSource(decode="process"): a file decoded in a worker process gives the frames the thread path
gives, loses none to a slow consumer (the worker waits for a credit), reports bad files the same
way, fails with the file's name when its worker is killed, and leaves no process or shared memory
behind. Also the I420 pictures both file and camera workers hand over: their BGR against PyAV's
on real clips, odd sizes, full range, BT.709, and a pixel format that crosses as BGR. Real clips,
real processes.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest

from streamlens.errors import SourceError
from streamlens.pictures import YuvPicture, i420_bytes, thumbnail_step, to_bgr
from streamlens.sources.file import FileSource
from streamlens.sources.host_memory import HostMemory
from streamlens.sources.ring import NAME_PREFIX, SHM_DIR, ring_bytes
from streamlens.sources.worker import RING_SLOTS, Died, Ended, FrameReady, ProcessWorker

from .test_file_source import VIDEO, clip, damaged_copy, encoded_clip
from .test_live_source import _running

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "traffic.mp4"
#: swscale's own odd-size conversion of the same planes in another buffer, mean |difference| (see below)
MEAN_LEVELS = 1.0


def _frames(source: FileSource, limit: int | None = None) -> list:
    """Every frame of a run as (index, pts, luma plane, BGR, motion vectors, sample), `limit` at most."""
    stop = threading.Event()
    out = []
    for frame in source.frames(stop):
        step = thumbnail_step(frame.width)
        luma, sample = frame.grey_sample(1).copy(), frame.grey_sample(step).copy()
        out.append((frame.index, frame.pts, luma, frame.image, frame.motion_vectors, sample))
        if limit is not None and len(out) == limit:
            stop.set()
    return out


def _workers(name: str) -> list[multiprocessing.Process]:
    return [p for p in multiprocessing.active_children() if p.name == f"streamlens-decode-{name}"]


def _shm() -> set[str]:
    """The rings this process owns in shared memory (others may run tests beside this one)."""
    mine = f"{NAME_PREFIX}{os.getpid()}-"
    return {name for name in os.listdir(SHM_DIR) if name.startswith(mine)} if os.path.isdir(SHM_DIR) else set()


# -- the same frames as the thread path -------------------------------------------------------

@pytest.mark.parametrize("options, limit", [
    ({}, None),
    ({"export_mvs": True}, None),
    ({"loop": True, "max_fps": 12, "export_mvs": True}, 300),  # two and a half passes at 12 of 30 fps
], ids=["plain", "export_mvs", "loop-max_fps-export_mvs"])
def test_process_decode_gives_the_frames_of_thread_decode(options, limit):
    here = FileSource("cam1", SAMPLE, **options)
    there = FileSource("cam1", SAMPLE, decode="process", **options)
    assert (there.fps, there.total_frames, there.declared_frames) == (here.fps, here.total_frames, 300)
    want, got = _frames(here, limit), _frames(there, limit)
    assert [(i, p) for i, p, *_ in got] == [(i, p) for i, p, *_ in want]  # index and pts, equal
    assert len(got) == (limit or 300)
    for (_, _, luma, image, mvs, sample), (_, _, want_luma, want_image, want_mvs, want_sample) in zip(got, want):
        assert np.array_equal(luma, want_luma) and np.array_equal(sample, want_sample)
        assert np.array_equal(image, want_image)  # the same conversion, from the same planes
        assert (mvs is None) == (want_mvs is None)
        assert mvs is None or (mvs.dtype == want_mvs.dtype and np.array_equal(mvs, want_mvs))
    if options.get("export_mvs"):
        assert sum(mvs is not None for *_, mvs, _ in got) >= 0.8 * len(got)
    if options.get("loop"):
        indexes = [i for i, *_ in got]
        assert indexes[-1] > 600 and set(np.diff(indexes)) <= {2, 3}  # 12 of 30: gaps, across the seams
    assert there.incomplete is None and there.losses() == here.losses() == {"corrupt": 0}


def test_a_worker_frame_is_converted_only_when_read_and_brings_its_scene_cut_sample():
    source = FileSource("cam1", SAMPLE, decode="process")
    stop = threading.Event()
    for frame in source.frames(stop):
        stop.set()
    step = thumbnail_step(frame.width)
    before = frame.timings["decode"]
    sample = frame.grey_sample(step)
    assert sample.shape == (72, 128) and sample.flags.c_contiguous  # the worker's copy, not a strided view
    assert np.array_equal(sample, frame.grey_sample(1)[::step, ::step])
    assert frame.timings["decode"] == before  # no conversion yet
    image = frame.image
    assert image.shape == (360, 640, 3) and frame.timings["decode"] > before and frame.image is image


def test_frames_held_unread_keep_their_own_pixels_while_later_ones_arrive():
    """The owner copies pictures out of the ring into buffers it uses again once free: one that a
    frame, or a view of its planes, still holds is never written over."""
    want = _frames(FileSource("cam1", SAMPLE))
    held, views = [], []
    for frame in FileSource("cam1", SAMPLE, decode="process").frames(threading.Event()):
        if frame.index % 2:
            held.append(frame)  # unread: its YuvPicture stays
        else:
            views.append((frame.index, frame.grey_sample(1)))  # a view of the planes, the frame let go
    assert len(held) == 150
    for frame in held:
        assert np.array_equal(frame.grey_sample(1), want[frame.index][2])
        assert np.array_equal(frame.image, want[frame.index][3])
    for index, luma in views:
        assert np.array_equal(luma, want[index][2])


def test_a_paced_file_keeps_its_clock_in_process_decode(tmp_path):
    source = FileSource("cam1", encoded_clip(tmp_path / "clip.mp4", frames=5), live=True, loop=True,
                        decode="process")
    frames = []
    for frame in source.frames(threading.Event()):
        frames.append((frame.index, frame.pts, frame.ts, frame.clock))
        if len(frames) == 12:
            break
    assert [index for index, *_ in frames] == list(range(12))
    assert frames[5][1] == frames[0][1]  # pts restarts with the loop...
    for (_, _, ts_a, clock_a), (_, _, ts_b, clock_b) in zip(frames, frames[1:]):
        assert ts_b - ts_a == pytest.approx(1 / 30, abs=2e-3)  # ...the schedule does not
        assert clock_b - clock_a == pytest.approx(1 / 30, abs=2e-3)


# -- flow control: a file waits, it never drops -----------------------------------------------

def test_a_consumer_slower_than_decoding_loses_no_frame_and_the_ring_bounds_what_is_ahead():
    before = _shm()
    source = FileSource("slow", SAMPLE, decode="process")
    frames = source.frames(threading.Event())
    indexes = [next(frames).index]
    # The consumer stops here; the worker fills every slot of its ring and then has to wait.
    deadline = time.monotonic() + 60  # a hang guard, not a speed bound
    rings = []
    while time.monotonic() < deadline:
        rings = sorted(_shm() - before)
        if rings:
            with open(os.path.join(SHM_DIR, rings[0]), "rb") as f:
                flags = f.read(RING_SLOTS)
            if flags == b"\x01" * RING_SLOTS:
                break
        time.sleep(0.02)
    else:
        raise AssertionError(f"the worker never filled its ring: {rings}")
    # one ring of RING_SLOTS slots, each an I420 picture and its scene-cut sample: all it decoded ahead
    assert len(rings) == 1
    assert os.path.getsize(os.path.join(SHM_DIR, rings[0])) == ring_bytes(RING_SLOTS, i420_bytes(640, 360) + 72 * 128)
    indexes += [frame.index for frame in frames]  # a frame decoded while the ring was full waited for a slot
    assert indexes == list(range(300)) and source.incomplete is None
    assert _shm() - before == set()


# -- bad files, as the thread path reports them -------------------------------------------------

def test_a_truncated_file_says_so_in_process_decode(tmp_path):
    data = encoded_clip(tmp_path / "whole.mp4").read_bytes()
    path = tmp_path / "cut.mp4"
    path.write_bytes(data[: len(data) // 2])
    here, there = FileSource("cam1", path), FileSource("cam1", path, decode="process")
    want = [f.index for f in here.frames(threading.Event())]
    got = [f.index for f in there.frames(threading.Event())]
    assert got == want and 20 < len(got) < 80
    assert there.incomplete == here.incomplete == f"truncated: {len(got)} of 90 frames decoded"
    assert there.losses() == {"corrupt": 0}


def test_corrupt_packets_are_skipped_and_counted_in_process_decode(tmp_path):
    damaged = damaged_copy(encoded_clip(tmp_path / "clip.mp4"), tmp_path / "damaged.mp4", 90, [10, 40, 70])
    source = FileSource("cam1", damaged, decode="process")
    frames = [f.index for f in source.frames(threading.Event())]
    assert frames == list(range(87)) and source.losses() == {"corrupt": 3} and source.incomplete is None
    looping = FileSource("cam1", damaged, loop=True, decode="process")
    stop = threading.Event()
    for frame in looping.frames(stop):
        if frame.index == 87 * 2 - 1:  # the last frame of the second pass
            stop.set()
    assert looping.losses() == {"corrupt": 6} and looping.incomplete is None


def test_a_real_clip_cut_and_damaged_reports_as_the_thread_path_does(tmp_path):
    path = damaged_copy(clip("highway_720p30.mp4"), tmp_path / "damaged.mp4", 200, [50, 100, 140])
    source = FileSource("cam1", path, decode="process")
    frames = [(f.index, f.pts) for f in source.frames(threading.Event())]
    assert source.losses() == {"corrupt": 3} and len(frames) == 197
    assert source.incomplete == "truncated: 197 of 897 frames decoded"
    assert [index for index, _ in frames] == list(range(197))


def test_a_file_of_nothing_but_corrupt_packets_is_an_error_in_process_decode(tmp_path):
    path = damaged_copy(encoded_clip(tmp_path / "clip.mp4"), tmp_path / "ruined.mp4", 40, list(range(40)))
    source = FileSource("cam1", path, decode="process")
    with pytest.raises(SourceError, match=r"ruined.mp4: no frame could be decoded \(\d+ corrupt packets\)"):
        list(source.frames(threading.Event()))
    assert _workers("cam1") == []


def test_a_file_gone_since_it_was_opened_fails_naming_it(tmp_path):
    path = encoded_clip(tmp_path / "clip.mp4")
    source = FileSource("cam1", path, decode="process")
    path.unlink()
    with pytest.raises(SourceError, match="clip.mp4: no such file"):
        list(source.frames(threading.Event()))


def test_decode_must_be_thread_or_process():
    with pytest.raises(ValueError, match=r"^cam1: decode: unknown 'gpu' \(process, thread\)$"):  # as in a file
        FileSource("cam1", SAMPLE, decode="gpu")


# -- a worker that dies, a run that stops early ---------------------------------------------------

def test_a_killed_worker_is_an_error_that_names_the_file():
    before = _shm()
    source = FileSource("doomed", SAMPLE, decode="process")
    frames = source.frames(threading.Event())
    next(frames)
    (worker,) = _workers("doomed")
    pid = worker.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(SourceError) as raised:
        for _ in frames:  # what the worker sent before it died still comes, then the error
            pass
    message = str(raised.value)
    assert message.startswith(f"{SAMPLE}: decode worker ended") and "\n" not in message
    assert not _running(pid) and _shm() - before == set()


@pytest.mark.parametrize("how", ["stop", "break", "close"])
def test_a_run_that_ends_early_ends_its_worker_and_removes_its_ring(how):
    before = _shm()
    source = FileSource("early", SAMPLE, decode="process", loop=True)
    stop = threading.Event()
    pids = []
    frames = source.frames(stop)
    for frame in frames:
        if frame.index == 0:
            pids = [p.pid for p in _workers("early")]
        if frame.index == 10:
            if how == "break":
                break
            (stop.set if how == "stop" else source.close)()
    else:
        assert how != "break"
    del frames  # a generator left by `break` is closed here, as a for loop's is when it ends
    assert len(pids) == 1 and not _running(pids[0]) and _workers("early") == []
    assert _shm() - before == set()
    source.close()  # twice is fine


def test_close_from_another_thread_ends_a_paced_run_in_process_decode():
    source = FileSource("cam1", clip("person_indoor_768x432.mp4"), live=True, decode="process")  # 10 fps
    received = []
    first = threading.Event()

    def consume():
        for frame in source.frames(threading.Event()):
            received.append(frame.index)
            first.set()

    reader = threading.Thread(target=consume)
    reader.start()
    assert first.wait(30)
    source.close()
    reader.join(10)  # the clip lasts 139 s at its pace
    assert not reader.is_alive() and received and _workers("cam1") == []


# -- pictures as they cross: I420 and its conversion ----------------------------------------------

def _clip_of(path: Path, codec: str, width: int, height: int, pix_fmt: str, frames: int = 12, **stream) -> Path:
    """A small clip encoded with PyAV: moving colour bars of `width` x `height` in `pix_fmt`."""
    with av.open(str(path), "w") as out:
        video = out.add_stream(codec, rate=25)
        video.width, video.height, video.pix_fmt = width, height, pix_fmt
        for name, value in stream.items():
            setattr(video.codec_context, name, value)
        for k in range(frames):
            image = np.zeros((height, width, 3), np.uint8)
            image[:, (7 * k) % width:] = (30, 200, 90)
            image[::3] += 17
            for packet in video.encode(av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format=pix_fmt)):
                out.mux(packet)
        for packet in video.encode():
            out.mux(packet)
    return path


@pytest.mark.parametrize("name, codec, size, pix_fmt, stream, crosses, exact", [
    ("odd.avi", "ffv1", (161, 91), "yuv420p", {}, YuvPicture, True),              # chroma 81 x 46
    ("odd.avi", "mpeg4", (161, 91), "yuv420p", {}, YuvPicture, False),
    ("full.avi", "mjpeg", (160, 90), "yuvj420p", {}, YuvPicture, True),           # full range
    ("bt709.mp4", "libx264", (160, 90), "yuv420p", {"colorspace": 1}, YuvPicture, True),
    ("444.avi", "ffv1", (160, 90), "yuv444p", {}, np.ndarray, True),              # crosses as BGR
], ids=["odd-ffv1", "odd-mpeg4", "yuvj420p", "bt709", "yuv444p"])
def test_every_kind_of_picture_comes_out_as_the_thread_path_gives_it(tmp_path, name, codec, size, pix_fmt, stream,
                                                                      crosses, exact):
    """Odd sizes (the planes copied into a PyAV frame), full range and BT.709 (their tags kept), and
    a format that crosses as BGR (converted in the worker): the thread path's pixels. Not quite for
    mpeg4's odd-sized pictures: swscale's result there depends on the buffer that holds the planes,
    not only on their pixels (the decoder's frame and a new one pad their rows differently; the
    same planes convert up to about 20 levels apart in dark areas, 0.3 to 0.7 on average)."""
    path = _clip_of(tmp_path / name, codec, *size, pix_fmt, **stream)
    want = _frames(FileSource("cam1", path))
    source = FileSource("cam1", path, decode="process")
    got = _frames(source)
    assert len(got) == len(want) == 12
    assert isinstance(_first_picture(source), crosses)
    for (index, pts, luma, image, *_), (want_index, want_pts, want_luma, want_image, *_) in zip(got, want):
        assert (index, pts) == (want_index, want_pts) and image.shape == (size[1], size[0], 3)
        if crosses is YuvPicture:
            assert np.array_equal(luma, want_luma)
        difference = np.abs(image.astype(np.int16) - want_image)
        assert not difference.any() if exact else difference.mean() < MEAN_LEVELS


def _first_picture(source: FileSource):
    """What the first frame of `source` crosses from its worker as, read off the worker protocol."""
    worker = ProcessWorker(source.name)
    worker.start()
    try:
        worker.open(1, source.spec)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            event = worker.poll(0.5)
            assert not isinstance(event, (Died, Ended)), event
            if isinstance(event, FrameReady):
                return event.take(HostMemory(pinned=False))[0]
        raise AssertionError("no frame in 30 s")
    finally:
        worker.close()


def test_i420_packs_odd_sizes_tightly():
    picture = av.VideoFrame.from_ndarray(np.random.default_rng(1).integers(0, 255, (7, 9, 3), np.uint8),
                                         format="bgr24").reformat(format="yuv420p")
    data = np.empty(i420_bytes(9, 7), np.uint8)
    assert data.size == 9 * 7 + 2 * 5 * 4
    YuvPicture.pack(picture, data)
    yuv = YuvPicture(data, 9, 7)
    for plane, mine in zip(picture.planes, (yuv.y, yuv.u, yuv.v)):
        rows = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)
        assert np.array_equal(mine, rows[:plane.height, :plane.width])
    assert np.array_equal(to_bgr(yuv), picture.to_ndarray(format="bgr24"))


@pytest.mark.parametrize("name", ["traffic.mp4", "highway_720p30.mp4", "highway_1080p30.mp4",
                                  "person_indoor_768x432.mp4"])
def test_an_i420_picture_converts_to_pyav_s_own_bgr_on_real_frames(name):
    """person_indoor is tagged SMPTE 170M and limited range, the others carry no tags."""
    path = SAMPLE if name == "traffic.mp4" else VIDEO / name
    if not path.is_file():
        pytest.skip(f"{path} not found: the real test clips live in ../shared/data outside the repository")
    with av.open(str(path)) as container:
        for k, picture in enumerate(container.decode(video=0)):
            if k % 10:
                continue
            if k > 200:
                break
            data = np.empty(i420_bytes(picture.width, picture.height), np.uint8)
            YuvPicture.pack(picture, data)
            mine = YuvPicture(data, picture.width, picture.height, picture.format.name, picture.colorspace,
                              picture.color_range)
            assert np.array_equal(mine.to_bgr(), picture.to_ndarray(format="bgr24"))


def test_the_pipeline_file_chooses_where_a_file_decodes(tmp_path):
    """`decode: process` on a file source decodes it in a worker process, with the same results as
    the default (`thread`)."""
    import json

    from streamlens.config import load_pipeline
    from streamlens.graph.run.pipeline import Pipeline

    out = {}
    for decode in ("thread", "process"):
        path = tmp_path / f"{decode}.yaml"
        path.write_text(f"sources: [{{uri: {SAMPLE}, decode: {decode}}}]\ndetector: {{backend: motion}}\n"
                        f"keyframes: {{interval: 3}}\nsinks: [{{type: jsonl, path: {decode}.jsonl}}]\n")
        config = load_pipeline(path)
        assert config.sources[0].decode == decode
        assert Pipeline(config).run().exit_code == 0
        lines = [json.loads(line) for line in (tmp_path / f"{decode}.jsonl").read_text().splitlines()]
        out[decode] = [(m["frame"], m["objects"]) for m in lines if m["type"] == "frame"]
    assert len(out["process"]) == 300 and out["process"] == out["thread"]
    path = tmp_path / "default.yaml"
    path.write_text(f"sources: [{{uri: {SAMPLE}}}, {{uri: 'rtsp://cam/1'}}]\ndetector: {{backend: motion}}\n")
    assert [s.decode for s in load_pipeline(path).sources] == ["thread", "process"]


def _compiled_motion_steps(conn) -> None:
    """In a decode worker's process: how many compiled versions of the motion-vector step it has."""
    from streamlens.sources import motion_vectors

    conn.send(len(motion_vectors._past_vectors.signatures))
    conn.close()


def test_a_decode_worker_starts_with_the_motion_vector_step_loaded():
    """Loading the compiled step took each worker most of a second at its stream's first P-frame, and a
    live stream's first second of frames came out too old behind it (several workers starting at once
    on 2 cores: 1.4 s). Workers are forked from a server that has loaded it (sources/preload.py)."""
    from streamlens.sources.worker import _process_context

    context = _process_context()
    if context.get_start_method() != "forkserver":
        pytest.skip("this platform has no forkserver: each worker loads it on its own")
    ours, theirs = context.Pipe()
    child = context.Process(target=_compiled_motion_steps, args=(theirs,))
    child.start()
    try:
        assert ours.poll(60) and ours.recv() >= 1
    finally:
        child.join(10)
