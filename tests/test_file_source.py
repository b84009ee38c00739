"""FileSource on real clips: every frame, in order, with the right numbers; looping, rate capping,
live pacing, stopping, and bad files (missing, not a video, truncated, corrupt in the middle).

The clips live in ../shared/data/video, outside the repository; tests that need them skip without.
Frame counts are checked against ffprobe, which decodes the same files with FFmpeg's own tools.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import av
import pytest

from streamlens.errors import SourceError
import streamlens.sources.file as file_source
from streamlens.sources.file import FileSource
from streamlens.sources.file_passes import FilePasses, FileSpec

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
VIDEO = DATA / "video"
CLIPS = sorted(p.name for p in VIDEO.glob("*") if p.is_file()) if VIDEO.is_dir() else []

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
                                  reason="ffmpeg/ffprobe not on PATH")


def clip(name: str) -> Path:
    """The path of a real clip, or skip the test saying why."""
    path = VIDEO / name
    if not path.is_file():
        pytest.skip("../shared/data/video not found: real test clips live outside the repository")
    return path


def start_ffprobe_count(path: Path) -> subprocess.Popen:
    """Start ffprobe counting the decoded frames of `path` (it decodes them all, so it runs
    alongside the source under test). Read the answer with `ffprobe_result`."""
    return subprocess.Popen(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
         "stream=nb_read_frames,nb_frames,width,height", "-of", "json", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ffprobe_result(probe: subprocess.Popen) -> dict:
    out, err = probe.communicate(timeout=120)
    assert probe.returncode == 0, err
    return json.loads(out)["streams"][0]


def make_video(path: Path, *args: str) -> Path:
    """Encode a small synthetic clip with the ffmpeg command line (lavfi sources)."""
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args, str(path)], check=True, timeout=60)
    return path


# -- every clip, every frame ---------------------------------------------------------------------

@needs_ffmpeg
@pytest.mark.parametrize("name", CLIPS or [pytest.param("none", id="no-clips")])
def test_every_frame_of_every_clip_decodes_in_order(name):
    path = clip(name)
    probe = start_ffprobe_count(path)
    source = FileSource("cam1", path)
    count, last_pts, last_ts = 0, None, 0.0
    for frame in source.frames(threading.Event()):
        assert frame.stream == "cam1"
        assert frame.index == count
        assert last_pts is None or frame.pts > last_pts, f"pts not increasing at frame {count}"
        assert frame.ts >= last_ts
        assert frame.image.dtype.name == "uint8" and frame.image.ndim == 3 and frame.image.shape[2] == 3
        assert frame.timings["decode"] >= 0.0
        if count == 0:
            shape = frame.image.shape
        assert frame.image.shape == shape
        last_pts, last_ts = frame.pts, frame.ts
        count += 1
    expected = ffprobe_result(probe)
    assert count == int(expected["nb_read_frames"])
    assert shape[:2] == (expected["height"], expected["width"])
    assert source.corrupt_packets == 0 and source.read_error is None and source.incomplete is None
    assert source.fps and source.fps > 0
    if int(expected.get("nb_frames") or 0) > 0:
        # the container's own count; a packed-bitstream AVI counts 2 placeholder packets as frames
        assert source.total_frames == int(expected["nb_frames"])
        assert 0 <= source.total_frames - count <= 2


def test_a_file_with_b_frames_packed_into_avi_gets_increasing_pts():
    """XviD AVIs pack B-frames so that FFmpeg reports their pts out of order; pts must still rise,
    close to one frame duration apart."""
    source = FileSource("cam1", clip("highway_320x240.avi"))
    pts = []
    for frame in source.frames(threading.Event()):
        pts.append(frame.pts)
        if len(pts) == 100:
            break
    steps = [b - a for a, b in zip(pts, pts[1:])]
    assert min(steps) > 0
    assert sorted(steps)[len(steps) // 2] == pytest.approx(1 / 25, abs=1e-6)


# -- loop, max_fps --------------------------------------------------------------------------------

def test_loop_keeps_counting_index_and_restarts_pts():
    source = FileSource("cam1", clip("street_night_1080p_8frames.mp4"), loop=True)
    assert source.total_frames is None
    stop = threading.Event()
    frames = []
    for frame in source.frames(stop):
        frames.append((frame.index, frame.pts))
        if len(frames) == 20:  # two and a half passes
            stop.set()
    assert [index for index, _ in frames] == list(range(20))
    pts = [p for _, p in frames]
    assert pts[8:16] == pts[:8] and pts[16:20] == pts[:4]
    assert pts[8] < pts[7] and pts[16] < pts[15]


def test_max_fps_halves_a_30_fps_file_deterministically():
    source = FileSource("cam1", clip("highway_720p30.mp4"), max_fps=15)
    assert source.total_frames == 897  # what the file holds, not what comes out
    frames = [(frame.index, frame.pts) for frame in source.frames(threading.Event())]
    assert 448 <= len(frames) <= 450
    index_steps = {b[0] - a[0] for a, b in zip(frames, frames[1:])}
    assert index_steps == {2}  # dropped frames keep their index: gaps of one
    for (_, a), (_, b) in zip(frames, frames[1:]):
        assert b - a == pytest.approx(1 / 15, abs=2e-3)


def test_max_fps_above_the_file_rate_drops_nothing():
    source = FileSource("cam1", clip("street_night_1080p_8frames.mp4"), max_fps=30)
    assert [f.index for f in source.frames(threading.Event())] == list(range(8))


def test_max_fps_must_be_positive():
    with pytest.raises(ValueError, match="max_fps"):
        FileSource("cam1", "whatever.mp4", max_fps=0)


# -- live pacing and stopping ---------------------------------------------------------------------

def test_live_paces_frames_at_the_file_rate():
    source = FileSource("cam1", clip("highway_720p30.mp4"), live=True)
    stop = threading.Event()
    arrivals, stamps, clocks = [], [], []
    for frame in source.frames(stop):
        arrivals.append(time.monotonic())
        stamps.append(frame.ts)
        clocks.append(frame.clock)
        if len(stamps) == 15:
            break
    assert arrivals[-1] - arrivals[0] >= 0.44  # 14 intervals of 1/30 s
    for a, b in zip(stamps, stamps[1:]):
        assert b - a == pytest.approx(1 / 30, abs=2e-3)  # ts is the scheduled time
    for a, b in zip(clocks, clocks[1:]):
        assert b - a == pytest.approx(1 / 30, abs=2e-3)  # and so is clock, on time.monotonic()


def _held(source: FileSource, hold_s: float, count: int) -> list:
    """The first `count` frames of `source`, its consumer holding it `hold_s` after the second."""
    frames = []
    for frame in source.frames(threading.Event()):
        frames.append(frame)
        if len(frames) == 2:
            time.sleep(hold_s)
        if len(frames) == count:
            break
    return frames


def test_a_live_file_behind_its_clock_skips_to_a_keyframe_as_a_camera_does():
    """The consumer holds the stream 1.5 s (a graph short of CPU): what comes next is not every frame
    late, but the first keyframe near the clock's present, with the frames skipped counted as a
    camera's decoder losses; their numbers are kept, and the pace goes on from the same clock."""
    source = FileSource("cam1", clip("highway_720p30.mp4"), live=True)
    frames = _held(source, 1.5, 8)  # more than BEHIND_S behind
    skipped = frames[2].index - frames[1].index - 1
    assert skipped >= 15 and source.losses()["decoder"] == skipped  # at least BEHIND_S / 2 of frames
    assert frames[2].pts - frames[1].pts == pytest.approx((skipped + 1) / 30, abs=1e-3)
    for a, b in zip(frames[2:], frames[3:]):
        assert b.index == a.index + 1 and b.ts - a.ts == pytest.approx(1 / 30, abs=2e-3)
    # the clock was kept (no re-anchor): a frame's due time is its media time after the first's
    assert frames[7].ts - frames[0].ts == pytest.approx(frames[7].pts - frames[0].pts, abs=2e-3)


def test_a_live_file_decoded_in_a_worker_process_catches_up_with_its_clock_too():
    """As above, decoded in a worker process: the frames it decoded ahead before the hold come late,
    then it skips to a keyframe near the clock's present; every frame skipped counted, numbers kept."""
    source = FileSource("cam1", clip("highway_720p30.mp4"), live=True, decode="process")
    frames = _held(source, 1.5, 16)
    gaps = [(a.index, b.index - a.index - 1) for a, b in zip(frames, frames[1:]) if b.index != a.index + 1]
    assert len(gaps) == 1 and gaps[0][1] >= 15, gaps
    assert source.losses()["decoder"] == gaps[0][1]
    assert frames[-1].ts - frames[-2].ts == pytest.approx(1 / 30, abs=2e-3)  # paced again


def test_a_live_file_decoded_in_a_worker_reads_on_its_owners_clock():
    """Held past `MAX_LIVE_LAG_S`, the owner takes its clock up anew at now; its worker, which waited
    meanwhile, takes the same clock. On a clock of its own it would read every packet as late as
    the hold, skip them all looking for a keyframe read in time, and the stream would end there."""
    # the 10 fps clip: a machine too busy to decode it in real time would skip frames as a camera's
    # worker does, and that is not what is asked here
    source = FileSource("cam1", clip("person_indoor_768x432.mp4"), live=True, decode="process")
    frames = _held(source, file_source.MAX_LIVE_LAG_S + 1.0, 2 + 15)
    assert len(frames) == 2 + 15, f"{len(frames)} frames; lost {source.losses()}"
    assert source.losses()["decoder"] == 0
    assert [f.index for f in frames] == list(range(len(frames)))


def test_a_live_file_held_past_max_live_lag_re_anchors_instead_of_bursting(monkeypatch):
    monkeypatch.setattr(file_source, "MAX_LIVE_LAG_S", 0.5)  # a suspended process, made short
    monkeypatch.setattr(file_source, "BEHIND_S", 60.0)  # the catch-up out of the way
    source = FileSource("cam1", clip("highway_720p30.mp4"), live=True)
    stamps = []
    for frame in source.frames(threading.Event()):
        stamps.append((time.monotonic(), frame.ts))
        if len(stamps) == 2:
            time.sleep(0.8)
        if len(stamps) == 8:
            break
    late_arrival, late_ts = stamps[2]
    assert late_ts - stamps[1][1] > 0.5  # the late frame is stamped when it came out, not when due
    assert stamps[7][0] - late_arrival >= 5 / 30 - 0.01  # then paced again, no burst
    for (_, a), (_, b) in zip(stamps[2:], stamps[3:]):
        assert b - a == pytest.approx(1 / 30, abs=2e-3)
    assert source.losses()["decoder"] == 0


@needs_ffmpeg
def test_live_loop_keeps_the_pace_across_the_seam(tmp_path):
    path = make_video(tmp_path / "five.mp4", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=30",
                      "-frames:v", "5", "-pix_fmt", "yuv420p")
    source = FileSource("cam1", path, live=True, loop=True)
    frames = []
    for frame in source.frames(threading.Event()):
        frames.append((frame.index, frame.pts, frame.ts))
        if len(frames) == 12:
            break
    assert [index for index, _, _ in frames] == list(range(12))
    assert frames[5][1] == frames[0][1]  # pts restarts...
    for (_, _, a), (_, _, b) in zip(frames, frames[1:]):
        assert b - a == pytest.approx(1 / 30, abs=2e-3)  # ...but the clock does not


@needs_ffmpeg
def test_stop_ends_a_live_wait_at_once(tmp_path):
    # frames two seconds apart: the source is waiting when stop is set
    path = make_video(tmp_path / "slow.mp4", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=0.5",
                      "-frames:v", "3", "-pix_fmt", "yuv420p")
    source = FileSource("cam1", path, live=True)
    stop = threading.Event()
    first = threading.Event()
    received = []

    def consume():
        for frame in source.frames(stop):
            received.append(frame.index)
            first.set()

    worker = threading.Thread(target=consume)
    worker.start()
    assert first.wait(10)
    time.sleep(0.2)
    stopped_at = time.monotonic()
    stop.set()
    worker.join(5)
    assert not worker.is_alive()
    assert time.monotonic() - stopped_at < 5  # the stop is seen at once, not at the file's next frame
    assert received == [0]


def test_close_from_another_thread_ends_iteration_and_is_idempotent():
    source = FileSource("cam1", clip("person_indoor_768x432.mp4"), live=True)  # 10 fps
    stop = threading.Event()
    received = []
    worker = threading.Thread(target=lambda: received.extend(f.index for f in source.frames(stop)))
    worker.start()
    time.sleep(0.5)
    source.close()
    worker.join(2)
    assert not worker.is_alive()
    assert 0 < len(received) < 20
    source.close()


def test_frames_can_run_again_after_the_file_ended():
    with FileSource("cam1", clip("street_night_1080p_8frames.mp4")) as source:
        first = [f.pts for f in source.frames(threading.Event())]
        again = [f.pts for f in source.frames(threading.Event())]
    assert len(first) == 8 and again == first


# -- bad input ------------------------------------------------------------------------------------

def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope.mp4"
    with pytest.raises(SourceError, match="nope.mp4: no such file"):
        FileSource("cam1", path)


def test_a_folder_is_not_a_video(tmp_path):
    with pytest.raises(SourceError, match=f"{tmp_path}: is a folder"):
        FileSource("cam1", tmp_path)


def test_random_bytes_are_not_a_video(tmp_path):
    path = tmp_path / "noise.mp4"
    path.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(SourceError) as raised:
        FileSource("cam1", path)
    message = str(raised.value)
    assert message.startswith(f"{path}: not a video FFmpeg can read (")
    assert "\n" not in message


@needs_ffmpeg
def test_a_file_without_video_is_refused(tmp_path):
    path = make_video(tmp_path / "tone.m4a", "-f", "lavfi", "-i", "sine=duration=0.5")
    with pytest.raises(SourceError, match="tone.m4a: has no video stream"):
        FileSource("cam1", path)


def test_a_file_cut_in_half_yields_what_it_can(tmp_path):
    data = clip("highway_320x240.avi").read_bytes()
    path = tmp_path / "half.avi"
    path.write_bytes(data[: len(data) // 2])
    source = FileSource("cam1", path)
    indexes = [frame.index for frame in source.frames(threading.Event())]
    assert 300 < len(indexes) < 748
    assert indexes == list(range(len(indexes)))
    assert source.incomplete == f"truncated: {len(indexes)} of 750 frames decoded"


def test_an_mp4_cut_before_its_index_is_refused(tmp_path):
    """This clip keeps its index (moov) at the end: without it there is nothing to decode."""
    data = clip("street_night_1080p_8frames.mp4").read_bytes()
    path = tmp_path / "cut.mp4"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match="cut.mp4: not a video FFmpeg can read"):
        FileSource("cam1", path)


def damaged_copy(original: Path, dest: Path, keep: int, damaged: list[int]) -> Path:
    """Copy the first `keep` video packets of `original` to `dest`, with the bytes of the packets
    numbered in `damaged` overwritten by 0xFF (an H.264 decoder rejects such a packet)."""
    with av.open(str(original)) as container:
        packets = [(p.pos, p.size) for p in container.demux(video=0) if p.size][:keep]
    data = bytearray(original.read_bytes())
    for number in damaged:
        pos, size = packets[number]
        data[pos:pos + size] = b"\xff" * size
    end = packets[-1][0] + packets[-1][1]
    dest.write_bytes(data[:end])
    return dest


def test_corrupt_packets_are_skipped_and_counted(tmp_path):
    # packets 50, 100 and 140 are inter frames in the middle of GOPs
    path = damaged_copy(clip("highway_720p30.mp4"), tmp_path / "damaged.mp4", 200, [50, 100, 140])
    source = FileSource("cam1", path)
    frames = [(frame.index, frame.pts) for frame in source.frames(threading.Event())]
    assert source.corrupt_packets == 3 and source.losses() == {"corrupt": 3}
    assert len(frames) == 197
    assert source.incomplete == "truncated: 197 of 897 frames decoded"  # cut after packet 200
    assert [index for index, _ in frames] == list(range(197))
    assert all(b > a for (_, a), (_, b) in zip(frames, frames[1:]))


def test_a_file_of_nothing_but_corrupt_packets_is_an_error(tmp_path):
    path = damaged_copy(clip("highway_720p30.mp4"), tmp_path / "ruined.mp4", 40, list(range(40)))
    source = FileSource("cam1", path)
    with pytest.raises(SourceError, match=r"ruined.mp4: no frame could be decoded \(\d+ corrupt packets\)"):
        list(source.frames(threading.Event()))


def encoded_clip(path: Path, frames: int = 90) -> Path:
    """Encode a small H.264 mp4 with PyAV (a keyframe every 30 frames, no B-frames), its index
    (moov) at the front as recorders write it, so that a cut copy still opens."""
    import numpy as np

    with av.open(str(path), "w", options={"movflags": "faststart"}) as out:
        stream = out.add_stream("libx264", rate=30, options={"g": "30", "bf": "0", "preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = 160, 120, "yuv420p"
        for k in range(frames):
            image = np.zeros((120, 160, 3), np.uint8)
            image[:, (3 * k) % 160:] = 200
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="bgr24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def test_a_whole_file_is_not_incomplete_and_loses_nothing(tmp_path):
    source = FileSource("cam1", encoded_clip(tmp_path / "whole.mp4"))
    assert source.total_frames == 90
    frames = list(source.frames(threading.Event()))
    assert len(frames) == 90 and source.incomplete is None and source.losses() == {"corrupt": 0}


def test_a_truncated_file_says_so_after_what_it_could_decode(tmp_path):
    data = encoded_clip(tmp_path / "whole.mp4").read_bytes()
    path = tmp_path / "cut.mp4"
    path.write_bytes(data[: len(data) // 2])
    source = FileSource("cam1", path)
    assert source.total_frames == 90  # the index at the front still declares every frame
    indexes = [frame.index for frame in source.frames(threading.Event())]
    assert 20 < len(indexes) < 80 and indexes == list(range(len(indexes)))
    assert source.incomplete == f"truncated: {len(indexes)} of 90 frames decoded"
    assert str(tmp_path) not in source.incomplete and source.losses() == {"corrupt": 0}
    again = list(source.frames(threading.Event()))  # a second run tells it again, the same way
    assert len(again) == len(indexes) and source.incomplete.startswith("truncated: ")


def test_the_first_300_kb_of_a_real_clip_are_reported_truncated(tmp_path):
    path = tmp_path / "highway_cut.mp4"
    path.write_bytes(clip("highway_720p30.mp4").read_bytes()[:300_000])
    source = FileSource("cam1", path)
    decoded = len(list(source.frames(threading.Event())))
    assert 0 < decoded < 897 and source.incomplete == f"truncated: {decoded} of 897 frames decoded"
    capped = FileSource("cam1", path, max_fps=15)  # frames the cap leaves out were decoded all the same
    assert len(list(capped.frames(threading.Event()))) < decoded and capped.incomplete == source.incomplete


def test_stopping_a_file_early_is_not_incomplete(tmp_path):
    source = FileSource("cam1", encoded_clip(tmp_path / "whole.mp4"))
    stop = threading.Event()
    for frame in source.frames(stop):
        if frame.index == 9:
            stop.set()
    assert source.incomplete is None


def test_corrupt_packets_in_a_whole_file_are_losses_not_truncation(tmp_path):
    path = encoded_clip(tmp_path / "clip.mp4")
    damaged = damaged_copy(path, tmp_path / "damaged.mp4", 90, [10, 40, 70])  # inter frames
    source = FileSource("cam1", damaged)
    frames = list(source.frames(threading.Event()))
    assert len(frames) == 87 and source.losses() == {"corrupt": 3} and source.incomplete is None


def test_a_looping_file_keeps_counting_corrupt_packets_across_passes(tmp_path):
    damaged = damaged_copy(encoded_clip(tmp_path / "clip.mp4"), tmp_path / "damaged.mp4", 90, [10, 40, 70])
    source = FileSource("cam1", damaged, loop=True)
    stop = threading.Event()
    for frame in source.frames(stop):
        if frame.index == 87 * 2 - 1:  # the last frame of the second pass
            stop.set()
    assert source.losses() == {"corrupt": 6} and source.incomplete is None


# -- containers and codecs -----------------------------------------------------------------------

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "traffic.mp4"


@needs_ffmpeg
@pytest.mark.parametrize("suffix, codec_args", [
    (".mkv", ["-c", "copy"]),
    (".mov", ["-c", "copy"]),
    (".ts", ["-c", "copy"]),
    (".avi", ["-c:v", "mpeg4", "-q:v", "5"]),
    (".mkv", ["-c:v", "libvpx-vp9", "-b:v", "300k", "-deadline", "realtime", "-cpu-used", "8"]),
    (".ts", ["-c:v", "mpeg2video", "-q:v", "5"]),
])
def test_containers_and_codecs_decode_every_frame(tmp_path, suffix, codec_args):
    """The shipped sample remuxed or re-encoded into the containers users bring (60 frames each)."""
    path = make_video(tmp_path / f"clip{suffix}", "-i", str(SAMPLE), "-frames:v", "60", *codec_args)
    probe = ffprobe_result(start_ffprobe_count(path))
    frames = list(FileSource("c", path).frames(threading.Event()))
    assert len(frames) == int(probe["nb_read_frames"]) >= 59
    assert [f.index for f in frames] == list(range(len(frames)))
    assert all(b.pts > a.pts for a, b in zip(frames, frames[1:]))
    assert frames[0].image.shape == (360, 640, 3)


def test_the_reused_converter_gives_pyav_own_bgr_for_every_size_and_thread(tmp_path):
    """`to_bgr` keeps one converter per thread: pictures of two sizes and formats, interleaved, and
    the same pictures converted on another thread, all equal `to_ndarray(format="bgr24")`."""
    import numpy as np

    from streamlens.pictures import to_bgr

    small = make_video(tmp_path / "small.mp4", "-i", str(SAMPLE), "-frames:v", "12", "-vf", "scale=320:180",
                       "-pix_fmt", "yuvj420p")
    pictures = []
    for path in (SAMPLE, small):
        with av.open(str(path)) as container:
            pictures.append([f for _, f in zip(range(12), container.decode(video=0))])
    mixed = [p for pair in zip(*pictures) for p in pair]
    assert {(p.width, p.format.name) for p in mixed} == {(640, "yuv420p"), (320, "yuvj420p")}
    want = [p.to_ndarray(format="bgr24") for p in mixed]
    assert all(np.array_equal(to_bgr(p), w) for p, w in zip(mixed, want))
    assert all(np.array_equal(to_bgr(p, threads=1), w) for p, w in zip(mixed, want))  # as camera workers do
    other: list = []
    worker = threading.Thread(target=lambda: other.extend(to_bgr(p) for p in reversed(mixed)))
    worker.start()
    worker.join(30)
    assert all(np.array_equal(a, w) for a, w in zip(reversed(other), want))


@pytest.mark.parametrize("decode", ["thread", "process"])
def test_fast_decode_skips_the_loop_filter_and_keeps_the_picture(decode):
    """`fast_decode: true` (H.264: the shipped sample): every frame still comes, in order; pictures
    differ from a full decode (the deblocking filter was skipped: it reached the decoder, on a thread
    and in a decode worker) yet stay close to it."""
    import numpy as np

    from .conftest import REPO

    sample = REPO / "samples" / "traffic.mp4"

    def pictures(fast: bool) -> list:
        source = FileSource("cam1", sample, fast_decode=fast, decode=decode)
        try:
            return [frame.image.astype(np.int16) for frame in source.frames(threading.Event())][:60]
        finally:
            source.close()

    full, fast = pictures(False), pictures(True)
    assert len(full) == len(fast) == 60
    differences = [float(np.abs(a - b).mean()) for a, b in zip(full, fast)]
    assert max(differences) > 0.05  # the filter was skipped
    assert max(differences) < 3.0  # the same pictures, a little blockier


# -- start_s: a file that begins part way in ---------------------------------------------------------


def _pictures(source: FileSource, count: int) -> list:
    stop = threading.Event()
    frames = []
    for frame in source.frames(stop):
        frames.append((frame.index, round(frame.pts, 3), frame.image.copy()))
        if len(frames) == count:
            stop.set()
            break
    source.close()
    return frames


@pytest.mark.parametrize("decode", ["thread", "process"])
def test_start_s_begins_at_that_time_with_the_pictures_a_whole_decode_gives(decode):
    sample = Path(__file__).resolve().parents[1] / "samples" / "traffic.mp4"
    whole = _pictures(FileSource("all", str(sample)), 200)
    first_pts = whole[0][1]
    later = _pictures(FileSource("later", str(sample), start_s=4.3, decode=decode), 20)
    begin = next(i for i, (_, pts, _) in enumerate(whole) if pts >= first_pts + 4.3 - 1e-3)
    assert [pts for _, pts, _ in later] == [pts for _, pts, _ in whole[begin:begin + 20]]
    assert [index for index, _, _ in later] == list(range(20))  # numbered from the first delivered
    assert all((a == b[2]).all() for (_, _, a), b in zip(later, whole[begin:begin + 20]))


def test_a_looping_file_with_start_s_begins_its_later_passes_at_the_start():
    sample = Path(__file__).resolve().parents[1] / "samples" / "traffic.mp4"
    whole = _pictures(FileSource("all", str(sample)), 10)
    looped = _pictures(FileSource("loop", str(sample), start_s=9.0, loop=True), 60)
    pts = [p for _, p, _ in looped]
    wrap = next(i for i in range(1, len(pts)) if pts[i] < pts[i - 1])
    assert pts[0] >= whole[0][1] + 9.0 - 1e-3 and pts[wrap:wrap + 10] == [p for _, p, _ in whole]
    assert [i for i, _, _ in looped] == list(range(60))  # numbers go on across the loop


@pytest.mark.parametrize("decode", ["thread", "process"])
def test_a_live_file_with_start_s_joins_at_the_next_keyframe_as_a_camera_does(decode):
    """Played live, a file that begins part way in starts at its first keyframe at or after `start_s`
    (the sample has one every second): nothing before it is decoded, so a copy started mid-group does
    not decode the group's head in a burst a joining camera never makes."""
    sample = Path(__file__).resolve().parents[1] / "samples" / "traffic.mp4"
    whole = _pictures(FileSource("all", str(sample)), 300)
    first_pts = whole[0][1]
    live = _pictures(FileSource("live", str(sample), start_s=4.3, live=True, loop=True, decode=decode), 20)
    begin = next(i for i, (_, pts, _) in enumerate(whole) if pts >= first_pts + 5.0 - 1e-3)  # the keyframe at 5 s
    assert [pts for _, pts, _ in live] == [pts for _, pts, _ in whole[begin:begin + 20]]
    assert [index for index, _, _ in live] == list(range(20))
    assert all((a == b[2]).all() for (_, _, a), b in zip(live, whole[begin:begin + 20]))
    # its clock starts at start_s: the keyframe 0.7 s after it is due 0.7 s after the start (so copies
    # started out of step keep their keyframes out of step; the pacer's doctest: due at its media
    # time), and the next pass goes on from the end of this one
    passes = FilePasses(FileSpec(str(sample), "joined", {}, live=True, loop=True, fps=30.0, start_s=4.3), lambda: None)
    media = [(round(d.pts - first_pts, 3), round(d.media, 3)) for _, d in zip(range(200), passes)]
    passes.close()
    assert media[0] == (5.0, 0.7) and media[149] == (9.967, 5.667) and media[150] == (0.0, 5.7)
    # within the last group of pictures there is no keyframe to join at: it begins at start_s, as a file
    late = _pictures(FileSource("late", str(sample), start_s=9.5, live=True, loop=True, decode=decode), 5)
    assert late[0][1] == next(pts for _, pts, _ in whole if pts >= first_pts + 9.5 - 1e-3)


def test_start_s_past_the_end_or_on_a_camera_is_one_clear_line(tmp_path):
    from streamlens.config import parse_pipeline
    from streamlens.errors import ConfigError

    sample = Path(__file__).resolve().parents[1] / "samples" / "traffic.mp4"
    with pytest.raises(SourceError, match=r"traffic\.mp4: start_s 500 is past the file's end"):
        FileSource("late", str(sample), start_s=500)
    with pytest.raises(ConfigError, match=r"start_s.*only for video files"):
        parse_pipeline({"sources": [{"uri": "rtsp://cam.example/live", "start_s": 3}],
                        "detector": {"backend": "motion"}}, tmp_path / "p.yaml")
