"""Temporal batching: never more than max_batch keyframes, never a wait past max_wait_ms, the budget kept."""

from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import supervision as sv

import streamlens.graph.run.pipeline as runtime
from streamlens.config import parse_pipeline
from streamlens.detect.base import Detector
from streamlens.frame import Frame, FrameResult, empty_detections
from streamlens.graph.schedule.batcher import Batcher, DetectCost
from streamlens.graph.channel import Channel, ChannelClosed

from .conftest import REPO
from .rtsp_server import GstRtspServer, gst_missing

class Arrivals:
    """The batcher's channel and clock, simulated: `items` arrive `gap_s` apart on a clock that moves
    only when the batcher waits, so what is checked is what the batcher asks for, not how late a
    busy machine wakes a thread. `get(timeout)` returns the next item if it arrives within
    `timeout` (the clock moves to its arrival), else None with the clock moved by `timeout`; after
    the last item it raises ChannelClosed."""

    def __init__(self, items: list, gap_s: float):
        self.items = [(k * gap_s, item) for k, item in enumerate(items)]
        self.now = 0.0
        self.waits: list[float | None] = []

    def clock(self) -> float:
        return self.now

    def get(self, timeout: float | None = None):
        self.waits.append(timeout)
        if not self.items:
            raise ChannelClosed("jobs")
        at, item = self.items[0]
        if timeout is not None and at > self.now + timeout:
            self.now += timeout
            return None
        self.now = max(self.now, at)
        self.items.pop(0)
        return item


def all_batches(batcher: Batcher) -> list:
    batches = []
    while True:
        try:
            batches.append(batcher.next_batch())
        except ChannelClosed:
            return batches


@pytest.mark.parametrize("max_batch,max_wait_ms,gap_s", [(4, 30.0, 0.004), (3, 5.0, 0.003), (8, 20.0, 0.012),
                                                         (8, 20.0, 0.001)])
def test_batches_never_exceed_max_batch_nor_wait_past_max_wait(max_batch, max_wait_ms, gap_s):
    jobs = Arrivals(list(range(40)), gap_s)
    batcher = Batcher(jobs, max_batch=max_batch, max_wait_ms=max_wait_ms, budget_ms=None, clock=jobs.clock)
    batches = all_batches(batcher)
    assert [item for b in batches for item in b.items] == list(range(40))  # all, in order
    sizes = [len(b.items) for b in batches]
    assert max(sizes) <= max_batch
    # a batch is cut short only by max_wait_ms (or the end): a full one whenever keyframes come fast enough
    full = max_wait_ms / 1000 >= gap_s * (max_batch - 1) - 1e-9
    assert all(n == max_batch for n in sizes[:-1]) if full else max(sizes) < max_batch
    for batch in batches:
        assert batch.waited_ms <= max_wait_ms + 1e-6


def test_a_keyframe_waits_max_wait_for_company_then_goes_alone():
    jobs = Arrivals(["alone", "late"], 0.5)
    batcher = Batcher(jobs, max_batch=4, max_wait_ms=40.0, budget_ms=None, clock=jobs.clock)
    batch = batcher.next_batch()
    assert batch.items == ["alone"] and batch.waited_ms == pytest.approx(40.0)
    assert jobs.waits[:2] == [None, pytest.approx(0.040)]  # it asked to wait 40 ms, no more


def test_a_batch_stops_waiting_at_once_when_no_keyframe_could_join_it():
    """One live stream, whose keyframe is in the batch already: nothing can come to fill it, so the
    detector starts at once instead of idling max_wait_ms (it did: 10 ms of every keyframe's 27 at
    one stream, tools/results/overload.md)."""
    asked = []
    jobs = Arrivals(["alone", "late"], 0.5)
    batcher = Batcher(jobs, max_batch=4, max_wait_ms=40.0, budget_ms=None, clock=jobs.clock,
                      can_grow=lambda until: asked.append(until) or False)
    batch = batcher.next_batch()
    assert batch.items == ["alone"] and batch.waited_ms == 0.0
    assert jobs.waits == [None]  # it never waited for company
    assert asked == [pytest.approx(0.040)]  # asked whether one could come by the end of the wait
    jobs = Arrivals(["first", "second"], 0.010)
    batcher = Batcher(jobs, max_batch=4, max_wait_ms=40.0, budget_ms=None, clock=jobs.clock, can_grow=lambda until: True)
    assert batcher.next_batch().items == ["first", "second"]  # one could: it waits as before


def test_the_budget_counts_from_when_the_keyframes_frame_was_due():
    """A keyframe that spent 10 ms being decoded and queued has 23 ms of a 33 ms budget left: with a
    detector that takes 13 ms a frame, a batch of two (26 ms) no longer fits, so it goes alone at once;
    a frame due just now waits for a second."""

    def batch_of(age_s: float) -> list:
        jobs = Arrivals([SimpleNamespace(clock=-age_s, name="first"), SimpleNamespace(clock=0.005, name="second")],
                        0.005)
        batcher = Batcher(jobs, max_batch=4, max_wait_ms=10.0, budget_ms=33.0, clock=jobs.clock)
        for _ in range(10):
            batcher.observe(1, 13.0)
        return [item.name for item in batcher.next_batch().items]

    assert batch_of(0.010) == ["first"]
    assert batch_of(0.0) == ["first", "second"]


def test_a_real_channel_hands_over_every_keyframe_in_order_in_batches():
    jobs = Channel(64)
    batcher = Batcher(jobs, max_batch=4, max_wait_ms=30.0, budget_ms=None)

    def feed() -> None:
        for item in range(40):
            jobs.put(item, key="cam")
            time.sleep(0.002)
        jobs.close()

    threading.Thread(target=feed, daemon=True).start()
    batches = all_batches(batcher)
    assert [item for b in batches for item in b.items] == list(range(40))
    assert max(len(b.items) for b in batches) <= 4


def test_the_budget_sizes_batches_from_the_detectors_cost():
    batcher = Batcher(Channel(4), max_batch=8, max_wait_ms=10.0, budget_ms=33.0)
    assert batcher.batch_limit(0.0) == 8  # nothing measured yet
    for _ in range(10):
        batcher.observe(1, 25.0)  # a CPU model: 25 ms a frame
    assert batcher.batch_limit(0.0) == 1
    slow = Batcher(Channel(4), max_batch=8, max_wait_ms=10.0, budget_ms=33.0)
    for n in (1, 2, 4, 8, 4, 2):
        slow.observe(n, 2.0 + 3.0 * n)  # a GPU: 2 ms + 3 ms a frame
    assert round(slow.cost.estimate(8), 1) == 26.0
    assert slow.batch_limit(0.0) == 8 and slow.batch_limit(9.0) == 7 and slow.batch_limit(30.0) == 1
    unbounded = Batcher(Channel(4), max_batch=32, max_wait_ms=10.0, budget_ms=None)
    unbounded.observe(1, 100.0)
    assert unbounded.batch_limit(0.0) == 32  # bulk mode: no budget


def test_detect_cost_follows_a_change_of_speed():
    cost = DetectCost()
    for _ in range(30):
        cost.observe(4, 40.0)
    for _ in range(100):  # recent batches count most (half-life about 20 batches)
        cost.observe(4, 8.0)
    assert cost.estimate(4) < 9.0


class RecordingDetector(Detector):
    """Records every batch the engine hands it."""

    names = {0: "thing"}

    def __init__(self) -> None:
        self.batches: list[int] = []

    def detect(self, frames: list[Frame]) -> list[sv.Detections]:
        self.batches.append(len(frames))
        time.sleep(0.002)
        return [empty_detections() for _ in frames]


def test_the_engine_batches_keyframes_within_max_batch(monkeypatch, tmp_path):
    detector = RecordingDetector()
    monkeypatch.setattr(runtime, "build_detector", lambda cfg, *_: detector)
    cfg = parse_pipeline({"sources": [{"name": "a", "uri": str(REPO / "samples" / "traffic.mp4")},
                                      {"name": "b", "uri": str(REPO / "samples" / "traffic.mp4")}],
                          "detector": {"backend": "motion", "max_batch": 3, "max_wait_ms": 5, "budget_ms": 0},
                          "keyframes": {"interval": 2}, "tracker": "none"}, tmp_path / "p.yaml")
    report = runtime.Pipeline(cfg).run()
    assert report.status == "done", report.error
    # 300 frames a stream at interval 2: 150 keyframes for a, 151 for b (staggered: 0, 1, 3, 5, ...)
    assert sum(detector.batches) == 301 and max(detector.batches) <= 3
    assert np.mean(detector.batches) > 1.2  # two streams' keyframes do share batches


class WaitRecordingDetector(RecordingDetector):
    """Records how long each keyframe waited between its submission and its detector call."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def detect(self, frames: list[Frame]) -> list[sv.Detections]:
        now = time.perf_counter()
        self.waits += [now - f.submitted for f in frames]
        return super().detect(frames)


@pytest.fixture(scope="module")
def camera(tmp_path_factory):
    """A camera: samples/traffic.mp4 looping from GStreamer's RTSP server."""
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    with GstRtspServer({"cam": REPO / "samples" / "traffic.mp4"}, tmp_path_factory.mktemp("gst")) as server:
        yield server


@pytest.mark.parametrize("kind", ["live file", "camera"])
def test_one_live_stream_gets_its_detections_without_waiting_for_a_batch_to_fill(monkeypatch, tmp_path, request, kind):
    """One live stream (a live file, or a real RTSP camera decoded in its worker process) and a
    batch allowed to wait a minute to fill: nothing could join its batch (its own keyframe is the only
    one there can be), so every keyframe goes to the detector at once. Before, the first one waited
    the whole minute, and no other keyframe was taken meanwhile."""
    detector = WaitRecordingDetector()
    monkeypatch.setattr(runtime, "build_detector", lambda cfg, *_: detector)
    source = ({"name": "cam", "uri": request.getfixturevalue("camera").url("cam")} if kind == "camera"
              else {"name": "cam", "uri": str(REPO / "samples" / "traffic.mp4"), "live": True})
    cfg = parse_pipeline({"sources": [source],
                          "detector": {"backend": "motion", "max_batch": 4, "max_wait_ms": 60_000},
                          "keyframes": {"interval": 5}, "tracker": {"motion": "kalman"}}, tmp_path / "p.yaml")
    pipeline = runtime.Pipeline(cfg, sinks=[])
    published = 0
    for result in pipeline.results():  # 150 frames (5 s of video), then stop
        published += isinstance(result, FrameResult)
        if published >= 150:
            break
    pipeline.stop()
    assert len(detector.waits) > 20 and max(detector.batches) == 1
    assert max(detector.waits) < 30.0, max(detector.waits)  # half the minute


def test_a_model_that_runs_one_frame_a_call_gets_its_keyframes_one_at_a_time(tmp_path):
    """A model exported with a fixed batch of one (YOLOX-Nano's ONNX export; here the tests' cell
    model, the real onnx backend) runs a batch of four as four calls, and the whole batch's
    detections came back together: the first keyframe waited for the other three's inference. Four
    keyframes wait, `max_batch` is 4 and a batch may wait a minute to fill: each keyframe goes to
    the model alone, and its detections are back before the next one's call starts."""
    from streamlens.detect.onnx import OnnxDetector
    from streamlens.graph.schedule.detect_worker import Detected, DetectWorker

    from .cell_detector import build_cell_detector

    events: list[tuple[str, list[int]]] = []

    class Recorded(OnnxDetector):
        def detect(self, frames):
            events.append(("call", [f.index for f in frames]))
            return super().detect(frames)

    detector = Recorded(build_cell_detector(tmp_path), resize="resize", conf=0.5)
    assert detector.max_batch == 1  # the model's own batch dimension
    back = Channel(64)

    def deliver(done: Detected) -> bool:
        assert done.error is None, done.error
        events.append(("back", [done.frame.index]))
        return back.put(done) is not False

    worker = DetectWorker(detector, deliver, max_batch=4, max_wait_ms=60_000, budget_ms=None)
    for i in range(4):
        image = np.full((48, 64, 3), 60 * i, np.uint8)
        worker.submit(Frame("cam", i, i / 30, time.time(), image))
    worker.start()
    try:
        for _ in range(4):
            assert back.get(60) is not None, "a keyframe's detections never came back"
    finally:
        worker.close(10)
    assert events == [(what, [i]) for i in range(4) for what in ("call", "back")], events

    # four keyframes may still wait their turn, one call each: the schedule sees a queue of four places
    waiting = DetectWorker(detector, deliver, max_batch=4, max_wait_ms=0, budget_ms=33)
    waiting.batcher.observe(1, 10.0)  # the model's learnt speed: 10 ms a keyframe
    starts = []
    for i in range(4):
        starts.append(waiting.start_in_s())
        waiting.submit(Frame("cam", i, i / 30, time.time(), np.zeros((48, 64, 3), np.uint8)))
    assert starts == pytest.approx([0.0, 0.010, 0.020, 0.030])
    assert waiting.start_in_s() == math.inf  # the fifth has no place


def test_before_the_detector_is_timed_only_a_keyframe_alone_is_promised_in_time(tmp_path):
    """`expected_s` says when a live keyframe's detections would be back, and the engine lets the
    keyframe wait for them only if that is within the budget. Before the detector has timed a batch
    (a start, when every live stream's first frame is a keyframe) that said 0 for every keyframe, so
    each waited, one after another; now only a keyframe with the detector to itself is (0.0), one
    with others ahead of it is not (inf), and once timed the estimate counts the queue."""
    from streamlens.detect.onnx import OnnxDetector
    from streamlens.graph.schedule.detect_worker import DetectWorker

    from .cell_detector import build_cell_detector

    detector = OnnxDetector(build_cell_detector(tmp_path), resize="resize", conf=0.5)
    worker = DetectWorker(detector, lambda done: True, max_batch=4, max_wait_ms=0, budget_ms=33)
    assert worker.expected_s() == 0.0  # idle: the keyframe would be the only one
    worker.submit(Frame("cam", 0, 0.0, time.time(), np.zeros((48, 64, 3), np.uint8)))
    assert worker.expected_s() == math.inf  # untimed, with one ahead: no promise
    worker.batcher.observe(1, 10.0)  # timed: 10 ms a keyframe
    assert worker.expected_s() == pytest.approx(0.020)  # the one ahead and itself


def test_a_camera_and_a_live_file_get_one_keyframe_a_call_from_a_model_of_batch_one(monkeypatch, tmp_path, camera):
    """The runtime's own path: a real RTSP camera (decoded in its worker process) and a live file,
    the tests' cell model (onnx backend, fixed batch 1) made as slow as YOLOX-Nano on a CPU core
    (12 ms a call: two fit in the 33 ms budget), `max_batch: 4`, every other setting a default.
    Before, the two streams' keyframes went two to a batch, run as two calls, their detections
    back together (it failed so in both runs tried). Every call now takes one keyframe, and the
    budget controller's ladder has no "batching for throughput" rung (there is no batch to fill)."""
    from streamlens.detect.onnx import OnnxDetector

    from .cell_detector import build_cell_detector

    cells = build_cell_detector(tmp_path)
    batches: list[int] = []

    class Slow(OnnxDetector):
        def detect(self, frames):
            batches.append(len(frames))
            time.sleep(0.012)  # a CPU model's time; what is asserted does not depend on it
            return super().detect(frames)

    monkeypatch.setattr(runtime, "build_detector",
                        lambda cfg, *_: Slow(cfg.model, resize="resize", conf=0.5, max_batch=cfg.max_batch))
    cfg = parse_pipeline({"sources": [{"name": "cam", "uri": camera.url("cam")},
                                      {"name": "file", "uri": str(REPO / "samples" / "traffic.mp4"), "live": True,
                                       "loop": True}],
                          "detector": {"backend": "onnx", "model": str(cells), "resize": "resize", "max_batch": 4}},
                         tmp_path / "p.yaml")
    pipeline = runtime.Pipeline(cfg, sinks=[])
    published = {"cam": 0, "file": 0}
    for result in pipeline.results():  # until both streams have published 150 frames
        if isinstance(result, FrameResult):
            published[result.frame.stream] += 1
        if min(published.values()) >= 150:
            break
    pipeline.stop()
    assert len(batches) > 20 and set(batches) == {1}, batches
    assert pipeline.controller is not None and pipeline.controller.batching_rung is False
