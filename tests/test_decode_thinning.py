"""The budget controller's shedding where a live source decodes (graph/overload/control.py `Shedder`,
decode.py `DecodeShare`): the end of each group of pictures skipped undecoded, and on the last rung
every packet but the keyframes, each counted as shed; decoding every frame again from a keyframe. A
file decoded on its own thread or in a worker process, and a camera from a real RTSP server
(GStreamer's, from Debian's packages) decoded in a worker process or on a thread. Real H.264 with
B-frames through PyAV, decoded by `FileSource`, and by a running `Pipeline` for the runtime's
wiring; every picture checked against full decoding."""

from __future__ import annotations

import threading
from fractions import Fraction

import av
import numpy as np
import pytest

import streamlens

from streamlens.graph.overload.control import BudgetController, Shedder
from streamlens.sources.file import FileSource
from streamlens.sources.live import LiveSource

from .conftest import REPO
from .rtsp_server import GstRtspServer, gst_missing

GOP = 10
FRAMES = 60


def encode(path, count: int, gop: int, bframes: int, picture) -> None:
    """`count` frames of `picture(i)` (BGR, 96x160) as H.264 at 10 fps, a keyframe every `gop`."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 160, 96, "yuv420p"
        stream.codec_context.gop_size = gop
        stream.codec_context.options = {"bf": str(bframes), "sc_threshold": "0", "keyint_min": str(gop)}
        stream.time_base = Fraction(1, 10)
        for i in range(count):
            for packet in stream.encode(av.VideoFrame.from_ndarray(picture(i), format="bgr24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def moving(i: int) -> np.ndarray:
    image = np.zeros((96, 160, 3), np.uint8)
    image[:, (i * 2) % 160:(i * 2) % 160 + 20] = 255
    image[(i * 3) % 96:(i * 3) % 96 + 10, :, 1] = 200
    return image


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """60 frames of a moving pattern, H.264 with a keyframe every 10 frames and B-frames between."""
    path = tmp_path_factory.mktemp("thin") / "gop10.mp4"
    encode(path, FRAMES, GOP, 2, moving)
    with av.open(str(path)) as probe:
        keys = [i for i, p in enumerate(probe.demux(video=0)) if p.size and p.is_keyframe]
        assert keys == list(range(0, FRAMES, GOP)), keys
        assert probe.streams.video[0].codec_context.has_b_frames
    return path


def decode(path, shedder: Shedder | None = None, switch=None, where: str = "thread") -> dict[int, np.ndarray]:
    """Every frame `FileSource` gives (decoded `where`: on this thread, or in a process), by index;
    `switch(index, shedder)` is called after each frame."""
    source = FileSource("cam1", path, decode=where)
    if shedder is not None:
        shedder.attach(source)
    frames = {}
    for frame in source.frames(threading.Event()):
        frames[frame.index] = frame.image.copy()
        if switch is not None:
            switch(frame.index, shedder)
    assert source.corrupt_packets == 0
    return frames


def test_on_the_last_rung_only_keyframes_are_decoded_and_the_rest_count_as_shed(clip):
    every = decode(clip)
    assert sorted(every) == list(range(FRAMES))
    shedder = Shedder()
    shedder.fraction, shedder.keyframes_only = 0.9, True
    thinned = decode(clip, shedder)
    assert sorted(thinned) == list(range(0, FRAMES, GOP))  # frame numbers keep counting the skipped
    assert shedder.dropped == FRAMES - FRAMES // GOP
    assert not any(shedder.drop() for _ in range(20))  # what is decoded is kept: the decoder thinned it
    for index, image in thinned.items():
        assert np.array_equal(image, every[index])


def test_decoding_every_frame_again_starts_at_the_next_keyframe_with_exact_pictures(clip):
    every = decode(clip)
    shedder = Shedder()
    shedder.keyframes_only = True

    def switch(index: int, s: Shedder) -> None:
        if index == 20:  # off in the middle of reading: the rest of this GOP is still skipped
            s.keyframes_only = False

    frames = decode(clip, shedder, switch)
    assert sorted(frames) == [0, 10, 20] + list(range(30, FRAMES))
    for index, image in frames.items():
        assert np.array_equal(image, every[index]), index


def test_a_decode_worker_shedding_half_skips_the_end_of_each_group_of_pictures(clip):
    """Once the groups' length is known (at the second keyframe), each group's first half of
    packets in decoding order is decoded (half on average: a group that went a frame over leaves
    the next one a frame less), and the B-frames shown before the last of them: so the frames kept
    are the first shown of each group, and each picture is exact. (Before that, the
    worker drops half the frames it decodes, evenly, once it has been told.)"""
    every = decode(clip, where="process")
    shedder = Shedder()
    shedder.fraction = 0.5
    frames = decode(clip, shedder, where="process")
    counts = []
    for start in range(GOP, FRAMES, GOP):
        kept = sorted(i for i in frames if start <= i < start + GOP)
        assert kept == list(range(start, start + len(kept))) and GOP // 2 - 1 <= len(kept) < GOP, kept
        counts.append(len(kept))
    # B-frames shown before the last packet decoded are decoded too (up to two here), and a group
    # that went over leaves the next one up to a frame less: about half on average
    assert abs(sum(counts) / len(counts) - GOP / 2) <= 1.0, counts
    assert shedder.dropped == FRAMES - len(frames)
    for index, image in frames.items():
        assert np.array_equal(image, every[index]), index


def test_a_share_between_two_whole_numbers_of_a_groups_frames_is_kept_on_average(clip):
    """3.5 frames of a group of 10: groups keep 3 and 4 in turn (a B-frame shown before the last one
    decoded may add one), not 4 in every group. Rounded the same way in every group, two streams
    whose fair shares differed by a few points kept a whole frame a group apart (10 points here)."""
    shedder = Shedder()
    shedder.fraction = 0.65
    frames = decode(clip, shedder, where="process")
    kept = [sum(1 for i in frames if start <= i < start + GOP) for start in range(GOP, FRAMES, GOP)]
    assert {3, 4} <= set(kept) and abs(sum(kept) / len(kept) - 3.5) <= 0.5, kept


@pytest.mark.parametrize("share", [0.5, 0.0])
def test_a_looping_file_shed_to_a_share_keeps_its_clock_across_the_loop(clip, share):
    """A pass whose last frames were skipped undecoded still lasted to its last frame: the next pass
    starts a whole file's length after the first, as without shedding. (It started at the last frame
    decoded instead, up to a group early; the frames after every loop came out that much late, and
    all at once.)"""
    from streamlens.sources.decode import DecodeShare
    from streamlens.sources.file_passes import FilePasses, FileSpec

    thin = DecodeShare()
    thin.share = share
    passes = FilePasses(FileSpec(str(clip), "clip", {}, live=True, loop=True, fps=10.0), lambda: None, thin=thin)
    media = {}
    for item in passes:
        media[item.index] = item.media
        if item.index >= 3 * FRAMES:
            break
    passes.close()
    assert thin.skipped > 0 and {FRAMES, 2 * FRAMES} <= set(media)  # each pass starts with its keyframe
    for index, seconds in media.items():
        assert seconds == pytest.approx(index / 10), index


def test_a_live_file_decoded_on_its_thread_gives_up_its_share_undecoded(clip):
    """As a camera's worker does: the first group whole (its length is learned), then about the first
    half of each group decoded and the rest skipped before decoding; each frame kept is the
    decoder's own picture, and no frame is dropped after decoding on top of that (issue 47: a share
    dropped after decoding left the decoding, most of the CPU, all there)."""
    every = decode(clip)
    shedder = Shedder()
    shedder.fraction = 0.5
    kept = decode(clip, shedder)
    assert sorted(i for i in kept if i < GOP) == list(range(GOP))
    for start in range(GOP, FRAMES, GOP):  # a prefix of each group as shown (B-frames: about half)
        group = sorted(i for i in kept if start <= i < start + GOP)
        assert group == list(range(start, start + len(group))) and GOP // 2 - 1 <= len(group) < GOP, group
    assert shedder.dropped == FRAMES - len(kept)
    assert not any(shedder.drop() for _ in range(10))
    for index, image in kept.items():
        assert np.array_equal(image, every[index]), index


@pytest.mark.parametrize("where", ["thread", "process"])
def test_shedding_by_whole_groups_skips_every_frame_of_a_group_keyframe_too(clip, where):
    """The controller's answer to a load that comes in bursts (copies of one clip in step: every
    stream's keyframe at once): half the groups decoded whole and half skipped whole, keyframe and
    all, from the second group on (until the groups' length is known, at the second keyframe, a
    worker drops half the frames it decodes, evenly), and two streams of different phases skip
    different groups, so that at any time half the streams decode. Each picture kept is the
    decoder's own; every frame skipped is counted."""
    every = decode(clip, where=where)
    kept_groups = []
    for phase in (0.0, 0.5):
        shedder = Shedder(phase)
        shedder.fraction, shedder.whole_groups = 0.5, True
        frames = decode(clip, shedder, where=where)
        groups = [start for start in range(GOP, FRAMES, GOP) if start in frames]
        for start in range(GOP, FRAMES, GOP):
            assert {i for i in frames if start <= i < start + GOP} in (set(), set(range(start, start + GOP)))
        assert len(groups) in (2, 3), groups  # half of the five after the first
        assert shedder.dropped == FRAMES - len(frames)
        for index, image in frames.items():
            assert np.array_equal(image, every[index]), index
        kept_groups.append(set(groups))
    assert not kept_groups[0] & kept_groups[1], kept_groups


def test_past_two_in_three_shed_whole_groups_give_way_to_each_groups_end(clip):
    """Whole groups would leave a stream shedding 3 in 4 dark three groups in four (nine seconds in
    ten at 9 in 10): past 2 in 3 every group keeps its start instead, as without whole groups."""
    shedder = Shedder()
    shedder.fraction, shedder.whole_groups = 0.75, True
    frames = decode(clip, shedder)
    for start in range(GOP, FRAMES, GOP):
        group = sorted(i for i in frames if start <= i < start + GOP)
        assert group and group == list(range(start, start + len(group))) and len(group) < GOP, group


def test_a_file_decoded_in_a_worker_process_is_thinned_there(clip):
    """The worker is told when its first message comes back, so the frames it decoded before may
    come; from the second group of pictures on, keyframes only, and every frame missing is shed."""
    every = decode(clip, where="process")
    c = BudgetController(33, ["cam"])
    shedder = c.shedders["cam"]
    shedder.fraction, shedder.keyframes_only = 0.9, True
    source = FileSource("cam", clip, decode="process")
    c.attach([source])
    assert source.thin is shedder
    frames = {frame.index: frame.image.copy() for frame in source.frames(threading.Event())}
    assert set(range(0, FRAMES, GOP)) <= set(frames)
    assert all(index % GOP == 0 for index in frames if index >= GOP), sorted(frames)
    assert shedder.dropped == FRAMES - len(frames)  # each skipped in the worker, counted here
    assert not any(shedder.drop() for _ in range(20))
    for index, image in frames.items():
        assert np.array_equal(image, every[index]), index


@pytest.fixture(scope="module")
def long_groups(tmp_path_factory):
    """10 s at 10 fps, a keyframe every 2 s, no B-frames."""
    path = tmp_path_factory.mktemp("thin") / "gop20.mp4"
    encode(path, 100, 20, 0, lambda i: np.full((96, 160, 3), (i * 5) % 256, np.uint8))
    return path


@pytest.mark.parametrize("where", ["thread", "process"])
def test_packets_skipped_ahead_of_a_live_files_clock_do_not_make_it_catch_up_later(long_groups, where):
    """On keyframes only, the packets skipped are read at once, ahead of the file's clock. Counted as
    punctual, they would make the packets read on time afterwards look a group late, and the
    catch-up would skip frames that were never late (counted as `decoder` losses)."""
    shedder = Shedder()
    shedder.keyframes_only = True
    source = FileSource("cam", long_groups, decode=where, live=True)
    shedder.attach(source)
    indices = []
    for frame in source.frames(threading.Event()):
        indices.append(frame.index)
        if len(indices) == 3:
            shedder.keyframes_only = False
        if len(indices) == 3 + 25:
            break
    after = indices[3:]
    assert after == list(range(after[0], after[0] + len(after))), indices
    assert source.losses()["decoder"] == 0, indices


@pytest.fixture(scope="module")
def camera(tmp_path_factory):
    """A camera: samples/traffic.mp4 (30 fps, a keyframe every 30 frames, no B-frames) looping
    from GStreamer's RTSP server."""
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    with GstRtspServer({"cam1": SAMPLE}, tmp_path_factory.mktemp("gst")) as server:
        yield server


SAMPLE = REPO / "samples" / "traffic.mp4"
SAMPLE_GOP = 30
SAMPLE_FRAMES = 300


@pytest.fixture(scope="module")
def sample_frames():
    """Each frame of the sample by its luma plane's bytes, as the file source gives them: the frame's index."""
    with FileSource("clip", SAMPLE) as source:
        return {f.grey_sample(1).tobytes(): f.index for f in source.frames(threading.Event())}


def read_camera(source, take, timeout_s: float) -> None:
    """Hand each frame of `source` to `take` on a thread of its own until `take` says enough (True),
    for at most `timeout_s` seconds; then stop the source."""
    stop = threading.Event()

    def read():
        for frame in source.frames(stop):
            if take(frame):
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    stop.set()
    reader.join(5)


@pytest.mark.parametrize("where", ["process", "thread"])
def test_a_camera_shedding_by_whole_groups_skips_them_keyframe_and_all(camera, sample_frames, where):
    """A real RTSP camera shedding half by whole groups: once its groups' length is known, its frames
    come a whole group of pictures at a time, and the groups between are skipped from their keyframe
    on; every picture is exactly the sample's."""
    c = BudgetController(33, ["cam1"])
    shedder = c.shedders["cam1"]
    shedder.fraction, shedder.whole_groups = 0.5, True
    source = LiveSource("cam1", camera.url("cam1"), transport="tcp", timeout_s=10, decode=where)
    c.attach([source])
    shown = []

    def take(frame) -> bool:
        shown.append(sample_frames.get(frame.grey_sample(1).tobytes()))
        return len(shown) >= 4 * SAMPLE_GOP

    read_camera(source, take, timeout_s=60)
    assert len(shown) >= 4 * SAMPLE_GOP and None not in shown, shown
    later = shown[len(shown) // 2:]  # before the groups' length is known the worker drops evenly
    jumps = [(a, b) for a, b in zip(later, later[1:]) if (b - a) % SAMPLE_FRAMES != 1]
    assert jumps, later
    assert all(b % SAMPLE_GOP == 0 and (b - a) % SAMPLE_FRAMES == SAMPLE_GOP + 1 for a, b in jumps), jumps


@pytest.mark.parametrize("where", ["process", "thread"])
def test_a_camera_on_the_last_rung_decodes_its_keyframes_only_in_its_decode_worker(camera, sample_frames, where):
    c = BudgetController(33, ["cam1"])
    shedder = c.shedders["cam1"]
    shedder.fraction, shedder.keyframes_only = 0.9, True
    source = LiveSource("cam1", camera.url("cam1"), transport="tcp", timeout_s=10, decode=where)
    c.attach([source])
    assert source.thin is shedder
    frames = []

    def take(frame) -> bool:
        frames.append((frame.index, frame.pts, sample_frames.get(frame.grey_sample(1).tobytes())))
        if len(frames) == 4:  # down a rung: half of each group
            shedder.fraction, shedder.keyframes_only = 0.5, False
        if len(frames) == 4 + 2 * SAMPLE_GOP:  # every frame again, from the next keyframe
            shedder.fraction = 0.0
        return len(frames) >= 4 + 3 * SAMPLE_GOP + 10

    read_camera(source, take, timeout_s=30)
    assert len(frames) >= 4 + 3 * SAMPLE_GOP + 10, f"{len(frames)} frames: {source.stats()}"
    thinned = frames[:4]
    # every picture is one of the sample's, exactly: on the last rung its keyframes only
    assert all(shown is not None and shown % SAMPLE_GOP == 0 for _, _, shown in thinned), thinned
    assert all(shown is not None for _, _, shown in frames), [shown for _, _, shown in frames]
    # one keyframe after the other, and frame numbers count the frames skipped between
    steps = [(b[0] - a[0], (b[2] - a[2]) % SAMPLE_FRAMES) for a, b in zip(thinned, thinned[1:])]
    assert steps == [(SAMPLE_GOP, SAMPLE_GOP)] * 3, steps
    # half: from the next keyframe, the first half of each group (no B-frames: the first 15 shown),
    # numbered on; the frames decoded before the worker was told may still come
    half = [(index, shown) for index, _, shown in frames[4:4 + 2 * SAMPLE_GOP] if index > thinned[-1][0] + 2]
    starts = [k for k, (_, shown) in enumerate(half) if shown % SAMPLE_GOP == 0]
    assert len(starts) >= 2, half
    group = half[starts[0]:starts[1]]
    assert [shown % SAMPLE_GOP for _, shown in group] == list(range(SAMPLE_GOP // 2)), group
    assert half[starts[1]][0] - group[0][0] == SAMPLE_GOP  # the skipped frames numbered
    # every frame again: consecutive numbers from a keyframe on
    tail = frames[-40:]
    assert [index for index, _, _ in tail] == list(range(tail[0][0], tail[0][0] + 40)), tail
    assert shedder.dropped >= 3 * (SAMPLE_GOP - 1) + SAMPLE_GOP // 2
    assert source.losses()["decoder"] == 0  # skipped by the controller's say, not lost


def on_the_last_rung(tmp_path, source: str, enough) -> tuple[list[int], object]:
    """The frame numbers a running `Pipeline` of `source` (a line of YAML) publishes, the controller
    put on its last rung at the first one, until `enough(numbers)`; and the pipeline, stopped."""
    path = tmp_path / "p.yaml"
    path.write_text(f"sources:\n  - {source}\ndetector: {{backend: motion}}\ntracker: {{motion: kalman}}\n")
    pipeline = streamlens.Pipeline.from_yaml(path, sinks=[])
    indices = []
    for result in pipeline.results():
        if not isinstance(result, streamlens.FrameResult):
            continue
        indices.append(result.frame.index)
        if len(indices) == 1:
            control = pipeline.controller
            control.calm_s = control._least_calm_s = 1e9  # no step back down during the test
            control._set_keyframes_only(True)
        if enough(indices):
            break
    pipeline.stop()
    return indices, pipeline


def test_a_running_pipeline_thins_its_live_file_on_the_last_rung(clip, tmp_path):
    """The runtime gives each live file decoded on its thread its stream's shedder: with the
    controller on its last rung, the frames published from the next keyframe on are keyframes
    only, and the pictures skipped are counted as shed."""
    # frames already decoded when it switched, then keyframes (1 a second)
    indices, pipeline = on_the_last_rung(tmp_path, f"{{name: cam, uri: {clip}, live: true, loop: true}}",
                                         lambda numbers: len(numbers) >= 10)
    first_key = next(k for k, i in enumerate(indices) if k and i % GOP == 0)
    thinned = indices[first_key:]
    assert len(thinned) >= 5 and all(i % GOP == 0 for i in thinned), indices
    assert thinned == sorted(thinned)
    # the pictures between two keyframes published were skipped, each counted as shed
    assert pipeline.controller.shedders["cam"].dropped >= (len(thinned) - 1) * (GOP - 1)


def test_a_running_pipeline_thins_its_camera_in_its_decode_worker(camera, tmp_path):
    """The runtime gives a camera (a real RTSP stream, decoded in a worker process by default) its
    stream's shedder: with the controller on its last rung, the frames published from the next
    keyframe on are a group of pictures apart, and the frames between count as shed."""
    def steps(numbers):
        return [b - a for a, b in zip(numbers, numbers[1:])]

    indices, pipeline = on_the_last_rung(   # keyframes only, or never
        tmp_path, f"{{name: cam, uri: '{camera.url('cam1')}'}}",
        lambda numbers: steps(numbers)[-3:] == [SAMPLE_GOP] * 3 or len(numbers) > 10 * SAMPLE_GOP)
    assert steps(indices)[-3:] == [SAMPLE_GOP] * 3, steps(indices)
    assert pipeline.controller.shedders["cam"].dropped >= 3 * (SAMPLE_GOP - 1)


def test_a_stream_added_while_running_counts_the_frames_its_shedder_gives_up(clip, tmp_path):
    """A live stream added to a running pipeline gets its shedder from the budget controller, and its
    figures count what that shedder gives up (`lost.shed`): the stream owns its shedder, and the
    loss accounting asks the stream, not a table of shedders taken at the start."""
    path = tmp_path / "p.yaml"
    path.write_text(f"sources:\n  - {{name: cam, uri: {clip}, live: true, loop: true}}\n"
                    "detector: {backend: motion}\ntracker: {motion: kalman}\n")
    pipeline = streamlens.Pipeline.from_yaml(path, sinks=[])
    added = 0
    for result in pipeline.results():
        if not isinstance(result, streamlens.FrameResult):
            continue
        if pipeline.controller.steps == 0 and not pipeline.controller.keyframes_only:
            control = pipeline.controller
            control.calm_s = control._least_calm_s = 1e9  # no step back down during the test
            control._set_keyframes_only(True)
            pipeline.add_stream({"name": "cam2", "uri": str(clip), "live": True, "loop": True})
        if result.frame.stream == "cam2":
            added += 1
        owner = pipeline.streams.get("cam2")
        if added >= 5 and owner.shedder is not None and owner.shedder.dropped >= 2 * (GOP - 1):
            break
    pipeline.stop()
    pipeline.close()  # the run has ended: its last figures are in
    owner = pipeline.streams["cam2"]
    assert owner.shedder is pipeline.controller.shedders["cam2"]
    assert pipeline.stats["cam2"].lost["shed"] == owner.shedder.dropped >= 2 * (GOP - 1)
