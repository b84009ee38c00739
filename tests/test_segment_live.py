"""Masks on a camera (issue 48, point 3): a paced stream's tracks get masks while they live; a job
whose tracks have all gone is never encoded; a late mask lands where its track is now; a warning at
start when the cameras ask more of the encoder than it gives. The tiny SAM-format ONNX pair of
tests/sam_models.py (its mask is the middle half of the prompted box) keeps the model out of the way."""

from __future__ import annotations

import json
import logging
import time

import numpy as np
import pytest
import supervision as sv

import streamlens
from streamlens.config.model import SegmentConfig
from streamlens.frame import Frame, FrameResult
from streamlens.http.metrics import Exposition
from streamlens.segment.stage import GONE_AFTER_S, SegmentStage

from .cell_detector import build_cell_detector
from .conftest import REPO
from .sam_models import build_tiny_sam

WAIT_S = 30.0  # a bound for a machine that hangs, not a speed test


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_sam(tmp_path_factory.mktemp("sam"))


def tracked(boxes, ids) -> sv.Detections:
    det = sv.Detections(xyxy=np.array(boxes, np.float32).reshape(-1, 4), confidence=np.full(len(boxes), 0.9, np.float32),
                        class_id=np.zeros(len(boxes), np.int64), tracker_id=np.array(ids, np.int64))
    det.data["class_name"] = np.array(["car"] * len(boxes), dtype=object)
    return det


def result(index: int, pts: float, det: sv.Detections, stream: str = "cam1") -> FrameResult:
    return FrameResult(Frame(stream, index, pts, 0.0, np.zeros((480, 640, 3), np.uint8)), index, False, det)


def until(stage: SegmentStage, done, make) -> None:
    """Results `make(k)` through the stage until `done()`, bounded by WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    k = 0
    while not done():
        assert time.monotonic() < deadline, "the segment worker did not answer"
        stage.process(make(k), [])
        time.sleep(0.01)
        k += 1


def test_a_job_whose_tracks_have_all_gone_is_never_encoded(tiny):
    """A keyframe's job waits (the worker not yet started) while its tracks leave the picture: once
    none of them was published for GONE_AFTER_S of the stream's time, the worker drops it unencoded;
    another camera's job with one of its two tracks still there is decoded for that one alone; a job
    with a track still there is encoded, and its mask lands on that track's box now."""
    encoder, decoder = tiny
    stage = SegmentStage(SegmentConfig(model=encoder, decoder=decoder, every_s=100))
    both = tracked([[40, 60, 240, 300], [300, 60, 500, 300]], [1, 2])
    stage.offer(Frame("cam1", 0, 0.0, 0.0, np.zeros((480, 640, 3), np.uint8)), both, both)
    other = tracked([[40, 60, 240, 300], [300, 60, 500, 300]], [5, 6])
    stage.offer(Frame("cam2", 0, 0.0, 0.0, np.zeros((480, 640, 3), np.uint8)), other, other)
    nobody, five = tracked([], []), tracked([[40, 60, 240, 300]], [5])
    for k in range(16):  # 1.5 s of results without them (cam2: track 5 alone)
        stage.process(result(k, k / 10, nobody if k else both), [])
        stage.process(result(k, k / 10, five if k else other, "cam2"), [])
    assert 1.5 > GONE_AFTER_S
    stage.start()
    try:
        until(stage, lambda: stage.gone + stage.segmented >= 2, lambda k: result(16 + k, 1.6 + k / 10, nobody))
        assert stage.gone == 1 and stage.encoded == 1 and stage.segmented == 1 and stage.decoded == 1
        # a new keyframe with tracks 3 and 4; track 4 leaves, track 3 stays (and moves): encoded
        two = tracked([[40, 60, 240, 300], [300, 60, 500, 300]], [3, 4])
        stage.offer(Frame("cam1", 100, 10.0, 0.0, np.zeros((480, 640, 3), np.uint8)), two, two)
        moved = tracked([[140, 60, 340, 300]], [3])
        until(stage, lambda: stage.applied >= 1 and stage.segmented == 2,
              lambda k: result(101 + k, 10.1 + k / 10, moved))
        out, _ = stage.process(result(500, 60.0, moved), [])
    finally:
        stage.close()
    assert stage.encoded == 2 and stage.gone == 1
    shape = out.detections.data["mask"][0]
    points = np.concatenate([np.array(p).reshape(-1, 2) for p in shape])
    x1, y1, x2, y2 = 140, 60, 340, 300  # the middle half of the box where track 3 is now
    assert np.allclose([points[:, 0].min(), points[:, 0].max()], [x1 + 50, x2 - 50], atol=1.5)
    assert np.allclose([points[:, 1].min(), points[:, 1].max()], [y1 + 60, y2 - 60], atol=1.5)


def test_a_paced_cameras_tracks_get_masks_while_they_live(tmp_path, tiny, caplog):
    """The sample paced as a camera (`live: true`), the tests' cell detector (its boxes a function of
    the pixels): every track that lives more than 1 s carries a mask before it ends, and the stage's
    lag is in its figures and in /metrics. `every_s` below what one encode takes on any machine: the
    warning at start names the figures."""
    encoder, decoder = tiny
    cells = build_cell_detector(tmp_path)
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}, live: true}}]
detector: {{backend: onnx, model: {cells}, resize: resize, conf: 0.4}}
keyframes: {{interval: 3}}
segment: {{model: {encoder}, decoder: {decoder}, every_s: 0.000001}}
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    with caplog.at_level(logging.WARNING, logger="streamlens"):
        with streamlens.Pipeline.from_yaml(path) as pipe:
            report = pipe.run()
            stats = pipe.segment_stats()
            scraped = Exposition(pipe).reply("", "text/plain", "identity").body.decode()
    assert report.exit_code == 0, report.error
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("segment: 1 camera")]
    assert len(warned) == 1 and "segment.every_s" in warned[0], warned
    assert stats["lag_s"] is not None and stats["lag_s"]["p50"] <= stats["lag_s"]["p95"]
    assert f'streamlens_segment_lag_seconds{{quantile="0.95"}} {stats["lag_s"]["p95"]}' in scraped, scraped
    frames = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    life: dict[int, list] = {}
    for m in frames:
        if m["type"] == "frame":
            for obj in m["objects"]:
                life.setdefault(obj["id"], []).append((m["pts"], "mask" in obj))
    lasting = {track: seen for track, seen in life.items() if seen[-1][0] - seen[0][0] > 1.0}
    assert len(lasting) >= 3, life.keys()
    assert all(any(masked for _, masked in seen) for seen in lasting.values()), \
        {track: seen[:3] for track, seen in lasting.items()}


def test_a_real_cameras_tracks_get_masks_while_they_live(tmp_path, tiny):
    """The same on a camera: the sample looping from GStreamer's RTSP server, decoded in its worker
    process as cameras are by default; over its first 300 results every track that lives more than
    1 s carries a mask before it ends (or before the run is stopped)."""
    from .rtsp_server import GstRtspServer, gst_missing

    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    encoder, decoder = tiny
    cells = build_cell_detector(tmp_path)
    (tmp_path / "gst").mkdir()
    with GstRtspServer({"cam1": REPO / "samples" / "traffic.mp4"}, tmp_path / "gst") as server:
        path = tmp_path / "p.yaml"
        path.write_text(f"""
sources: [{{name: cam, uri: '{server.url('cam1')}'}}]
detector: {{backend: onnx, model: {cells}, resize: resize, conf: 0.4}}
keyframes: {{interval: 3}}
segment: {{model: {encoder}, decoder: {decoder}, every_s: 0.5}}
""")
        pipeline = streamlens.Pipeline.from_yaml(path, sinks=[])
        life: dict[int, list] = {}
        published = 0
        for item in pipeline.results():
            if not isinstance(item, streamlens.FrameResult):
                continue
            published += 1
            det = item.detections
            masks = det.data.get("mask") if det.data else None
            for i, track in enumerate(det.tracker_id if det.tracker_id is not None else []):
                life.setdefault(int(track), []).append((item.media_s, masks is not None and masks[i] is not None))
            if published >= 300:
                break
        pipeline.stop()
    lasting = {track: seen for track, seen in life.items() if seen[-1][0] - seen[0][0] > 1.0}
    assert len(lasting) >= 3, life.keys()
    assert all(any(masked for _, masked in seen) for seen in lasting.values()), \
        {track: seen[:3] for track, seen in lasting.items()}
