"""The budget controller's last rung (graph/control.py): a live file decoded on its own thread skips
every packet but its keyframes before decoding them, each counted as shed, and starts decoding every
frame again at a keyframe; a file decoded in a worker process is not thinned (nor yet a camera:
docs/overload.md). Real H.264 with B-frames through PyAV, decoded by `FileSource`, and by a running
`Pipeline` for the runtime's wiring."""

from __future__ import annotations

import threading
from fractions import Fraction

import av
import numpy as np
import pytest

import streamlens

from streamlens.graph.control import BudgetController, Shedder
from streamlens.sources.file import FileSource

GOP = 10
FRAMES = 60


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """60 frames of a moving pattern, H.264 with a keyframe every 10 frames and B-frames between."""
    path = tmp_path_factory.mktemp("thin") / "gop10.mp4"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 160, 96, "yuv420p"
        stream.codec_context.gop_size = GOP
        stream.codec_context.options = {"bf": "2", "sc_threshold": "0", "keyint_min": str(GOP)}
        stream.time_base = Fraction(1, 10)
        for i in range(FRAMES):
            image = np.zeros((96, 160, 3), np.uint8)
            image[:, (i * 2) % 160:(i * 2) % 160 + 20] = 255
            image[(i * 3) % 96:(i * 3) % 96 + 10, :, 1] = 200
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="bgr24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    with av.open(str(path)) as probe:
        keys = [i for i, p in enumerate(probe.demux(video=0)) if p.size and p.is_keyframe]
        assert keys == list(range(0, FRAMES, GOP)), keys
        assert probe.streams.video[0].codec_context.has_b_frames
    return path


def decode(path, shedder: Shedder | None = None, switch=None) -> dict[int, np.ndarray]:
    """Every frame `FileSource` gives (decode on this thread), by index; `switch(index, shedder)` is
    called after each frame."""
    source = FileSource("cam1", path, decode="thread")
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


def test_a_file_decoded_in_a_worker_process_is_not_thinned_and_is_still_shed_after_decoding(clip):
    c = BudgetController(33, ["cam"])
    shedder = c.shedders["cam"]
    shedder.fraction, shedder.keyframes_only = 0.5, True
    source = FileSource("cam", clip, decode="process", live=True)
    c.attach([source])  # its worker decodes everything it reads: it is not given the shedder
    assert source.thin is None
    assert [shedder.drop() for _ in range(4)] == [False, True, False, True]
    source.close()


def test_a_running_pipeline_thins_its_live_file_on_the_last_rung(clip, tmp_path):
    """The runtime gives each live file decoded on its thread its stream's shedder: with the
    controller on its last rung, the frames published from the next keyframe on are keyframes
    only, and the pictures skipped are counted as shed."""
    path = tmp_path / "p.yaml"
    path.write_text(f"sources:\n  - {{name: cam, uri: {clip}, live: true, loop: true}}\n"
                    "detector: {backend: motion}\ntracker: {motion: kalman}\n")
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
        if len(indices) >= 10:  # frames already decoded when it switched, then keyframes (1 a second)
            break
    pipeline.stop()
    first_key = next(k for k, i in enumerate(indices) if k and i % GOP == 0)
    thinned = indices[first_key:]
    assert len(thinned) >= 5 and all(i % GOP == 0 for i in thinned), indices
    assert thinned == sorted(thinned)
    # the pictures between two keyframes published were skipped, each counted as shed
    assert pipeline.controller.shedders["cam"].dropped >= (len(thinned) - 1) * (GOP - 1)
