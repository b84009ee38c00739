"""The engine: batching keyframes, waiting for them on files, never on live streams."""

from __future__ import annotations

import threading
import time

import numpy as np
import supervision as sv

from streamlens.config import TrackerConfig
from streamlens.detect.motion import MotionDetector
from streamlens.frame import EndOfStream, FrameResult, StreamEnd
from streamlens.graph.channel import Channel
from streamlens.graph.engine import Detected, DetectWorker, Engine, Lane
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
    now, clock = time.time(), time.monotonic()
    for k, f in enumerate(frames):
        f.ts = now + k / 30 if live else now
        f.clock = clock + k / 30 if live else clock
    return frames


def run_engine(frames, *, live: bool, interval: int, delay_s: float, late_after_s: float,
               lane_interval: int | None = None):
    """Feed frames (paced at 30 fps when live) through an engine; return (result, publish time) pairs."""
    inbox = Channel(64)
    detections = Channel(1 << 20, "detections", share=inbox)
    detector = SlowMotionDetector(delay_s)
    worker = DetectWorker(detector, detections.put, max_batch=4, max_wait_ms=5,
                          budget_ms=None)
    published = []
    lane = Lane("cam1", build_tracker(TrackerConfig(motion="kalman"), 30.0), live, lane_interval or interval)
    engine = Engine(inbox, detections, [lane], worker, lambda item: published.append((item, time.time())), late_after_s)
    runner = threading.Thread(target=engine.run)
    runner.start()
    for k, f in enumerate(frames):
        f.scheduled = k % interval == 0
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
    assert [r.detected_frame for r in results] == [k - k % 5 for k in range(40)]
    assert all(r.frame.timings["detect"] > 0 for r in results if r.keyframe)


def test_live_stream_flows_on_while_the_detector_is_late_and_reanchors():
    frames = sample_frames(90, live=True)
    published, lane, _ = run_engine(frames, live=True, interval=5, delay_s=0.25, late_after_s=0.033)
    results = [(r, t) for r, t in published if isinstance(r, FrameResult)]
    assert [r.seq for r, _ in results] == list(range(90))
    # frames do not wait for the detector: most go out sooner than one detection takes (250 ms)
    lateness = sorted(t - r.frame.ts for r, t in results)
    assert lateness[len(lateness) // 2] < 0.25, lateness
    late = sum(1 for r, _ in results if r.frame.keyframe and not r.keyframe)
    assert late >= 6
    # one keyframe per stream with the detector at a time: those due meanwhile were put off
    assert lane.deferred_keyframes >= 3
    assert late + sum(r.keyframe for r, _ in results) + lane.deferred_keyframes >= 90 // 5
    # once the detector's speed is known (its first batch ends a quarter of a second in), a keyframe
    # it cannot finish in time does not wait at all
    assert lane.unwaited >= sum(1 for r, _ in results[30:] if r.frame.keyframe) > 0
    # the boxes say which keyframe they rest on: never a later frame, never going back, and the
    # late keyframes' detections count once they are applied
    rests = [r.detected_frame for r, _ in results]
    assert all(d is None or d <= r.frame.index for d, (r, _) in zip(rests, results))
    assert [d for d in rests if d is not None] == sorted(d for d in rests if d is not None)
    late_ones = {r.frame.index for r, _ in results if r.frame.keyframe and not r.keyframe}
    assert late_ones & set(rests)
    # the late detections were not lost: tracks re-anchored on them carry objects later on
    assert sum(len(r.detections) for r, _ in results[45:]) > 0
    ids = {int(i) for r, _ in results for i in r.detections.tracker_id}
    assert ids and min(ids) >= 1


def test_detector_batches_keyframes_of_several_streams():
    inbox = Channel(64)
    detections = Channel(1 << 20, "detections", share=inbox)
    detector = SlowMotionDetector(0.02)
    worker = DetectWorker(detector, detections.put, max_batch=4, max_wait_ms=50,
                          budget_ms=None)
    worker.start()
    frames = sample_frames(8, live=False)
    for k, f in enumerate(frames):
        f.stream = f"cam{k % 4}"
        worker.submit(f)
    back = [detections.get(5) for _ in range(8)]
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


def a_car() -> sv.Detections:
    return sv.Detections(xyxy=np.array([[100.0, 80.0, 160.0, 120.0]]), confidence=np.array([0.9]),
                         class_id=np.array([2]), data={"class_name": np.array(["car"])})


def test_a_late_keyframe_replay_holds_up_only_its_own_stream():
    """Detections for a keyframe 30 frames back re-anchor that stream's tracks; the 30 frames since
    are replayed while the engine has nothing else to do, or before the stream's own next frame.
    A frame of another stream in the meantime is published without waiting for that replay, and
    the replayed stream ends where a tracker that replayed at once would be."""
    frames = sample_frames(32, live=True)
    others = sample_frames(1, live=True)
    for f in others:
        f.stream = "cam2"
    inbox = Channel(64)
    detections = Channel(1 << 20, "detections", share=inbox)
    worker = DetectWorker(MotionDetector(), detections.put, max_batch=1,
                          max_wait_ms=0, budget_ms=None)
    published = []
    lanes = [Lane(name, build_tracker(TrackerConfig(motion="kalman"), 30.0), True, 1000) for name in ("cam1", "cam2")]
    engine = Engine(inbox, detections, lanes, worker, published.append, late_after_s=0.0)
    twin = build_tracker(TrackerConfig(motion="kalman"), 30.0)
    found = a_car()
    for f in frames[:31]:  # cam1 carried 31 frames by motion; frame 0 was a keyframe gone out late
        engine.lanes["cam1"].tracker.propagate(f)
        twin.propagate(f)
    engine.lanes["cam1"].late.add(frames[0].index)
    engine.lanes["cam1"].in_flight = 1
    engine._on_detected(Detected(frames[0], found))
    twin.update(frames[0], found)
    assert engine.lanes["cam1"].tracker.catching_up

    engine._on_input(others[0])  # another stream's frame: out at once, cam1's replay still to do
    engine._advance(engine.lanes["cam2"])
    assert [r.frame.stream for r in published] == ["cam2"]
    assert engine.lanes["cam1"].tracker.catching_up

    frames[31].scheduled = False
    engine._on_input(frames[31])  # cam1's own next frame: its replay first
    engine._advance(engine.lanes["cam1"])
    assert not engine.lanes["cam1"].tracker.catching_up
    got, want = published[-1].detections, twin.propagate(frames[31])
    assert got.tracker_id.tolist() == want.tracker_id.tolist()
    np.testing.assert_allclose(got.xyxy, want.xyxy)


def test_the_engine_replays_a_late_keyframe_while_idle():
    frames = sample_frames(20, live=True)
    inbox = Channel(64)
    detections = Channel(1 << 20, "detections", share=inbox)
    worker = DetectWorker(MotionDetector(), detections.put, max_batch=1,
                          max_wait_ms=0, budget_ms=None)
    lane = Lane("cam1", build_tracker(TrackerConfig(motion="kalman"), 30.0), True, 1000)
    engine = Engine(inbox, detections, [lane], worker, lambda item: None, late_after_s=0.0)
    for f in frames:
        lane.tracker.propagate(f)
    lane.late.add(frames[0].index)
    lane.in_flight = 1
    runner = threading.Thread(target=engine.run)
    runner.start()
    detections.put(Detected(frames[0], a_car()))
    deadline = time.monotonic() + 10
    while lane.tracker.catching_up and time.monotonic() < deadline:
        time.sleep(0.01)
    caught_up = not lane.tracker.catching_up
    inbox.put(EndOfStream("cam1", 20), key="cam1")
    runner.join(10)
    assert caught_up and not runner.is_alive()


def test_the_detector_never_writes_into_a_frame_already_published():
    """A late keyframe goes out while the detector still has it. Its timings are the engine's alone
    (no internal key, no figures added after publication, which could also race the serialising of
    them); the detector's batch and detect times of it reach the stats through `on_detected`."""
    frames = sample_frames(30, live=True)
    published, lane, detector = run_engine(frames, live=True, interval=5, delay_s=0.12, late_after_s=0.001)
    results = [r for r, _ in published if isinstance(r, FrameResult)]
    late = [r for r in results if r.frame.keyframe and not r.keyframe]
    assert late
    for r in results:
        assert not [k for k in r.frame.timings if k.startswith("_")]
    for r in late:
        assert "batch" not in r.frame.timings and r.frame.timings["detect"] == 0.0


def test_the_controllers_rung_is_applied_by_the_engine_to_live_lanes_only_and_undone():
    inbox = Channel(8)
    detections = Channel(1 << 20, "detections", share=inbox)
    worker = DetectWorker(MotionDetector(), detections.put, max_batch=4, max_wait_ms=5, budget_ms=33)
    lanes = [Lane("cam", build_tracker(TrackerConfig(motion="kalman"), 30.0), True, 5),
             Lane("file", build_tracker(TrackerConfig(motion="kalman"), 30.0), False, 5)]
    engine = Engine(inbox, detections, lanes, worker, lambda item: None, late_after_s=0.033)
    engine.apply_control(stretch=3.0, wait=False, throughput=True)
    assert (engine.lanes["cam"].interval, engine.lanes["file"].interval) == (15, 5)
    assert engine.late_after_s == 0.0 and worker.batcher.budget_ms is None
    engine.apply_control(stretch=1.0, wait=True, throughput=False)
    assert engine.lanes["cam"].interval == 5 and engine.late_after_s == 0.033 and worker.batcher.budget_ms == 33
