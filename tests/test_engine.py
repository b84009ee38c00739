"""The engine: batching keyframes, waiting for them on files, never on live streams."""

from __future__ import annotations

import threading
import time

import numpy as np

from streamlens.config import TrackerConfig
from streamlens.detect.motion import MotionDetector
from streamlens.frame import EndOfStream, FrameResult, StreamEnd
from streamlens.graph.channel import Channel
from streamlens.graph.engine import DETECTED_KEY, DetectWorker, Engine, Lane
from streamlens.sources.file import FileSource
from streamlens.track import build_tracker

from .conftest import REPO

SAMPLE = REPO / "samples" / "traffic.mp4"


class SlowMotionDetector(MotionDetector):
    """The motion detector behind a model that takes `delay_s` per call, like a big one on a CPU."""

    def __init__(self, delay_s: float):
        super().__init__()
        self.delay_s = delay_s
        self.calls: list[int] = []

    def detect(self, frames):
        self.calls.append(len(frames))
        time.sleep(self.delay_s)
        return super().detect(frames)


def sample_frames(n: int, live: bool):
    frames = []
    for frame in FileSource("cam1", SAMPLE).frames(threading.Event()):
        frames.append(frame)
        if len(frames) == n:
            break
    now = time.time()
    for k, f in enumerate(frames):
        f.ts = now + k / 30 if live else now
    return frames


def run_engine(frames, *, live: bool, interval: int, delay_s: float, late_after_s: float,
               lane_interval: int | None = None):
    """Feed frames (paced at 30 fps when live) through an engine; return (result, publish time) pairs."""
    inbox = Channel(64)
    inbox.set_capacity(DETECTED_KEY, 1 << 20)
    detector = SlowMotionDetector(delay_s)
    worker = DetectWorker(detector, lambda d: inbox.put(d, key=DETECTED_KEY), max_batch=4, max_wait_ms=5,
                          budget_ms=None)
    published = []
    lane = Lane("cam1", build_tracker(TrackerConfig(motion="kalman"), 30.0), live, lane_interval or interval)
    engine = Engine(inbox, [lane], worker, lambda item: published.append((item, time.time())), late_after_s)
    runner = threading.Thread(target=engine.run)
    runner.start()
    for k, f in enumerate(frames):
        f.keyframe = k % interval == 0
        if live:
            time.sleep(max(0.0, f.ts - time.time()))
        inbox.put(f, key="cam1")
    inbox.put(EndOfStream("cam1", len(frames)), key="cam1")
    runner.join(30)
    assert not runner.is_alive()
    return published, lane, detector


def test_file_stream_waits_for_every_keyframe():
    frames = sample_frames(40, live=False)
    published, lane, detector = run_engine(frames, live=False, interval=5, delay_s=0.05, late_after_s=0.001)
    results = [r for r, _ in published if isinstance(r, FrameResult)]
    assert [r.seq for r in results] == list(range(40)) and isinstance(published[-1][0], StreamEnd)
    assert [r.keyframe for r in results] == [k % 5 == 0 for k in range(40)]
    assert lane.deferred_keyframes == 0
    assert sum(detector.calls) == 8
    assert all(r.frame.timings["detect"] > 0 for r in results if r.keyframe)


def test_live_stream_flows_on_while_the_detector_is_late_and_reanchors():
    frames = sample_frames(90, live=True)
    published, lane, _ = run_engine(frames, live=True, interval=5, delay_s=0.25, late_after_s=0.033)
    results = [(r, t) for r, t in published if isinstance(r, FrameResult)]
    assert [r.seq for r, _ in results] == list(range(90))
    # every frame goes out within ~budget of becoming available, although each detection takes 250 ms
    lateness = sorted(t - r.frame.ts for r, t in results)
    assert lateness[len(lateness) // 2] < 0.1, lateness
    late = sum(1 for r, _ in results if r.frame.keyframe and not r.keyframe)
    assert late >= 6
    # one keyframe per stream with the detector at a time: those due meanwhile were put off
    assert lane.deferred_keyframes >= 3
    assert late + sum(r.keyframe for r, _ in results) + lane.deferred_keyframes >= 90 // 5
    # once the detector's speed is known, a keyframe it cannot finish in time does not wait at all
    keyframe_lateness = sorted(t - r.frame.ts for r, t in results[30:] if r.frame.keyframe)
    assert keyframe_lateness[len(keyframe_lateness) // 2] < 0.02, keyframe_lateness
    # the late detections were not lost: tracks re-anchored on them carry objects later on
    assert sum(len(r.detections) for r, _ in results[45:]) > 0
    ids = {int(i) for r, _ in results for i in r.detections.tracker_id}
    assert ids and min(ids) >= 1


def test_detector_batches_keyframes_of_several_streams():
    inbox = Channel(64)
    inbox.set_capacity(DETECTED_KEY, 1 << 20)
    detector = SlowMotionDetector(0.02)
    worker = DetectWorker(detector, lambda d: inbox.put(d, key=DETECTED_KEY), max_batch=4, max_wait_ms=50,
                          budget_ms=None)
    worker.start()
    frames = sample_frames(8, live=False)
    for k, f in enumerate(frames):
        f.stream = f"cam{k % 4}"
        worker.submit(f)
    back = [inbox.get(5) for _ in range(8)]
    worker.close()
    assert sorted(id(d.frame) for d in back) == sorted(id(f) for f in frames)
    assert sum(detector.calls) == 8 and max(detector.calls) == 4
    assert all(isinstance(d.detections.xyxy, np.ndarray) for d in back)


def test_an_adaptive_gap_longer_than_the_base_interval_is_kept():
    """The engine makes a keyframe of its own only after the schedule's longest gap (a live source
    may have dropped the scheduled one), not after the base interval: an adaptive schedule that
    stretched to 10 frames keeps its 10."""
    frames = sample_frames(40, live=False)
    published, lane, _ = run_engine(frames, live=False, interval=10, delay_s=0.0, late_after_s=1.0)
    assert sum(r.keyframe for r, _ in published if isinstance(r, FrameResult)) == 4
    # with a longest gap of 5 (what the engine once used: the base interval), it makes its own
    frames = sample_frames(40, live=False)
    published, _, _ = run_engine(frames, live=False, interval=10, delay_s=0.0, late_after_s=1.0, lane_interval=5)
    assert sum(r.keyframe for r, _ in published if isinstance(r, FrameResult)) > 4
