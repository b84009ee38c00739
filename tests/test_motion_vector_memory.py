"""Reading a frame's motion vectors must not keep its decoded picture alive: PyAV's side data
container points back at its frame, a reference cycle that only Python's rare full collections
would free (hundreds of pictures held, memory growing with the file)."""

from __future__ import annotations

import gc
import sys

import av
import numpy as np
import pytest

import streamlens
from streamlens.sources import motion_vectors
from streamlens.sources.motion_vectors import frame_motion_vectors

from .conftest import REPO
from .test_pipeline_run import write_pipeline

SAMPLE = REPO / "samples" / "traffic.mp4"


def _decoded(export_mvs: bool):
    container = av.open(str(SAMPLE))
    stream = container.streams.video[0]
    if export_mvs:
        stream.codec_context.options = {"flags2": "+export_mvs"}
    return container, container.decode(stream)


def test_a_frame_whose_vectors_were_read_is_freed_by_its_last_reference():
    gc.disable()  # nothing but reference counts may free the pictures here
    try:
        container, frames = _decoded(export_mvs=True)
        read = 0
        for k, frame in enumerate(frames):
            untouched = sys.getrefcount(frame)
            vectors = frame_motion_vectors(frame)
            read += vectors is not None and len(vectors) > 0
            # no side data object or container holds the frame any more: the cycle is broken
            assert sys.getrefcount(frame) == untouched
            if k % 25 == 1:  # a walk of the whole heap: on a sample of the frames (the count is every frame's)
                assert not [r for r in gc.get_referrers(frame) if "SideData" in type(r).__name__]
            assert frame.side_data.get("MOTION_VECTORS") is None  # read once, then let go
        container.close()
        assert read > 200 and not motion_vectors.SIDE_DATA_CYCLE
    finally:
        gc.enable()


@pytest.mark.parametrize("bytes_as_records", [None, False], ids=["own bytes", "PyAV's copy"])
def test_the_vectors_are_those_pyav_gives(bytes_as_records, monkeypatch):
    """Read from the side data's own bytes where their layout is FFmpeg's record (checked on the
    first frame), or through PyAV's copy into records where it is not: the same vectors."""
    monkeypatch.setattr(motion_vectors, "_BYTES_AS_RECORDS", bytes_as_records)
    container, frames = _decoded(export_mvs=True)
    for k, frame in enumerate(frames):
        side_data = frame.side_data.get("MOTION_VECTORS")
        expected = None if side_data is None else motion_vectors.vectors_from_side_data(side_data.to_ndarray())
        del side_data
        got = frame_motion_vectors(frame)
        assert (got is None) == (expected is None)
        if got is not None:
            np.testing.assert_array_equal(got, expected)
        if k == 60:
            break
    container.close()
    assert motion_vectors._BYTES_AS_RECORDS is (bytes_as_records is None)  # as checked, or as set


def test_where_the_cycle_stays_the_engine_collects_it(tmp_path, monkeypatch):
    """An unknown PyAV layout: nothing is written into it, and the run collects the cycles itself."""
    monkeypatch.setattr(motion_vectors, "_container_layout_known", lambda kind: False)
    monkeypatch.setattr(motion_vectors, "SIDE_DATA_CYCLE", False)
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}}}]
detector: {{backend: motion}}
tracker: {{motion: mv}}
""")
    pipeline = streamlens.Pipeline.from_yaml(path)
    report = pipeline.run()
    assert report.exit_code == 0 and report.streams[0].frames == 300
    assert motion_vectors.SIDE_DATA_CYCLE and pipeline._collector.collections >= 300 // 24

