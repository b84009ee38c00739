"""The budget controller's last rung (graph/control.py): a live file decoded on its own thread skips
every packet but its keyframes before decoding them, each counted as shed, and starts decoding every
frame again at a keyframe. Real H.264 with B-frames through PyAV, decoded by `FileSource`."""

from __future__ import annotations

import threading
from fractions import Fraction

import av
import numpy as np
import pytest

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


def test_a_source_that_cannot_thin_is_still_shed_after_decoding():
    c = BudgetController(33, ["cam"])
    shedder = c.shedders["cam"]
    shedder.fraction, shedder.keyframes_only = 0.5, True
    shedder.attach(object())  # neither a file nor decoded here: it never asks `skips`
    assert [shedder.drop() for _ in range(4)] == [False, True, False, True]
