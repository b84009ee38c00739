"""The shared keyframe schedule of live streams: which stream's frame the detector takes next."""

from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import pytest

from streamlens.config import TrackerConfig
from streamlens.detect.motion import MotionDetector
from streamlens.frame import Frame
from streamlens.graph.schedule.batcher import DetectCost
from streamlens.graph.channel import Channel
from streamlens.graph.engine import Detected, DetectWorker, Engine, Lane
from streamlens.graph.schedule.chooser import STALL_PERIODS, KeyframeChooser
from streamlens.track import build_tracker

PERIOD = 1 / 30


def signals(confidence=1.0, untracked=0.0, births=1, losses=0, keyframe=None):
    return SimpleNamespace(confidence=confidence, untracked_motion=untracked, births=births, losses=losses,
                           keyframe=keyframe, tracks=1)


def simulate(chooser: KeyframeChooser, streams: dict, frames: int, detect_frames: int = 1) -> dict:
    """Every stream offers one frame per tick, in turn; a detector that takes one keyframe at a time
    and needs `detect_frames` ticks for it. Returns each stream's keyframe ticks."""
    for name in streams:
        chooser.add(name, PERIOD)
    keys = {name: [] for name in streams}
    busy: list = []  # [stream, ticks left]
    for tick in range(frames):
        now = tick * PERIOD
        if busy and busy[1] == 0:
            chooser.detected(busy[0])
            busy = []
        for name, sig in streams.items():
            sig = sig(tick) if callable(sig) else sig
            reason = chooser.offer(name, sig, start_in_s=math.inf if busy else 0.0, now=now + 0.001)
            if reason:
                keys[name].append(tick)
                if reason != "first":
                    assert not busy, "a keyframe was given while the detector was busy"
                    busy = [name, detect_frames]
                else:
                    chooser.detected(name)  # first frames: taken as they come
        if busy:
            busy[1] -= 1
    return keys


def test_streams_alike_take_turns_and_the_detector_never_idles():
    keys = simulate(KeyframeChooser(interval=5), {n: signals() for n in "abc"}, frames=61)
    counts = [len(k) for k in keys.values()]
    assert max(counts) - min(counts) <= 1
    # one keyframe per tick after the first frames: the detector always has work
    assert sum(counts) - 3 == 60
    for ticks in keys.values():
        assert max(b - a for a, b in zip(ticks, ticks[1:])) <= 3  # round robin over 3 streams


@pytest.mark.parametrize("streams", [4, 8, 12, 16, 24])
def test_past_capacity_the_detectors_share_shrinks_evenly_across_streams_and_no_frame_is_shed(streams):
    """Issue 47's order under load, on a fake clock: a detector that takes 5 frame periods a
    keyframe (6 keyframes a second) and more and more streams. Each stream's share of the detector
    shrinks as 1/K, evenly (every stream within one keyframe of the others over 10 s), and the
    budget controller, fed the frames' latency (they never wait for the detector: 12 ms), sheds
    nothing: keyframes are thinned first, frames keep."""
    from streamlens.graph.overload.control import BudgetController

    from .test_budget import Clock, feed

    names = [f"s{i}" for i in range(streams)]
    keys = simulate(KeyframeChooser(interval=5, adaptive=True, max_interval=15), dict.fromkeys(names, signals()),
                    frames=301, detect_frames=5)
    counts = [len(k) - 1 for k in keys.values()]  # the first frames aside
    assert max(counts) - min(counts) <= 1, counts
    assert sum(counts) == pytest.approx(300 / 5, abs=2)  # the detector never idles
    clock = Clock()
    controller = BudgetController(33, names, clock=clock, keyframe_wait=True)
    feed(controller, clock, dict.fromkeys(names, 12.0), dict.fromkeys(names, 0), seconds=10)
    assert controller.level == 0 and all(s.fraction == 0 for s in controller.shedders.values())


def test_the_pace_says_how_far_apart_a_busy_detector_brings_each_streams_keyframes():
    """Six streams due every 5 frames and a detector that takes 5 frame periods a keyframe: it
    brings each stream a keyframe every 30 frames, six times the interval, the stretch it delivers
    (graph/overload/control.py jumps its interval stretch that far at once). A detector with room
    for every stream runs them sooner than due: under 1."""
    busy = KeyframeChooser(interval=5)
    assert busy.pace() is None
    simulate(busy, {f"s{i}": signals() for i in range(6)}, frames=300, detect_frames=5)
    assert busy.pace() == pytest.approx(6.0, abs=0.5)
    idle = KeyframeChooser(interval=5)
    simulate(idle, {n: signals() for n in "ab"}, frames=300)
    assert idle.pace() <= 1.0


def test_a_stream_whose_tracks_drift_is_served_more_but_the_calm_one_is_not_starved():
    keys = simulate(KeyframeChooser(interval=4), {"calm": signals(), "drift": signals(confidence=0.3)},
                    frames=200, detect_frames=2)
    assert len(keys["drift"]) >= 1.5 * len(keys["calm"])
    gaps = [b - a for a, b in zip(keys["calm"], keys["calm"][1:])]
    assert max(gaps) <= 12


def test_motion_outside_the_tracks_raises_a_streams_turn():
    keys = simulate(KeyframeChooser(interval=4), {"still": signals(untracked=0.0),
                                                   "moving": signals(untracked=0.06)}, frames=200, detect_frames=2)
    assert len(keys["moving"]) >= 1.5 * len(keys["still"])


def test_a_scene_cut_is_a_keyframe_even_when_the_detector_is_busy():
    chooser = KeyframeChooser(interval=10)
    chooser.add("a", PERIOD)
    assert chooser.offer("a", signals(), now=0.0) == "first"
    assert chooser.offer("a", signals(), start_in_s=math.inf, now=0.03) == ""
    assert chooser.offer("a", signals(), cut=True, start_in_s=math.inf, now=0.06) == "scene_cut"


def test_a_stream_gets_no_second_keyframe_while_its_first_is_with_the_detector():
    chooser = KeyframeChooser(interval=2)
    chooser.add("a", PERIOD)
    assert chooser.offer("a", now=0.0) == "first"
    assert [chooser.offer("a", now=k * PERIOD) for k in range(1, 6)] == [""] * 5
    assert chooser.deferred("a") == 1  # went past its interval once, and waited
    chooser.detected("a")
    assert chooser.offer("a", now=0.2) == "interval"


def test_a_stalled_camera_does_not_hold_the_detector_back():
    chooser = KeyframeChooser(interval=5)
    for name in ("a", "b"):
        chooser.add(name, PERIOD)
        chooser.offer(name, now=0.0)
        chooser.detected(name)
    for k in range(1, 20):  # b is far more overdue than a: a waits for it
        chooser.offer("b", signals(confidence=0.0), now=k * PERIOD, start_in_s=math.inf)
    assert chooser.offer("a", now=20 * PERIOD) == ""
    # b's camera stops sending; once it has been silent for STALL_PERIODS frame periods, a goes first
    later = 20 * PERIOD + (STALL_PERIODS + 1) * PERIOD
    assert chooser.offer("a", now=later) == "spare"  # before its interval: the detector would idle


def test_on_keyframes_only_a_stream_is_expected_a_group_later_not_a_frame_later():
    """On the controller's last rung each stream sends one frame a group of pictures (the frames
    between skipped, counted in `skipped`): a stream that has just sent one is not about to send a
    better one, so the frame in hand is taken."""
    chooser = KeyframeChooser(interval=5)
    for name in ("a", "b"):
        chooser.add(name, PERIOD)
        chooser.offer(name, now=0.0)
        chooser.detected(name)
    # b's keyframe of its next group, 10 frames later, comes while the detector is busy; b's tracks drift
    assert chooser.offer("b", signals(confidence=0.0), now=10 * PERIOD, skipped=9, start_in_s=math.inf) == ""
    # a's comes a frame period later: b's next frame is a group away, so a's is taken
    assert chooser.offer("a", now=11 * PERIOD, skipped=9) == "interval"
    # where b skipped nothing, its next frame was due now, worth more: a would have waited for it
    chooser = KeyframeChooser(interval=5)
    for name in ("a", "b"):
        chooser.add(name, PERIOD)
        chooser.offer(name, now=0.0)
        chooser.detected(name)
    for k in range(1, 11):
        chooser.offer("b", signals(confidence=0.0), now=k * PERIOD, start_in_s=math.inf)
    assert chooser.offer("a", now=11 * PERIOD, skipped=9) == ""


def test_a_burst_of_camera_frames_fills_the_detector_and_no_stream_waits_past_its_interval():
    """Six cameras at 10 fps whose frames come in one burst a period, the least urgent first; a
    detector that takes 30 ms a keyframe (room for 3-4 a period). Knowing that time, the chooser
    fills the detector every period and serves every stream within its interval. Without it
    (`unit_s` unknown) a frame is passed over whenever a better one is still to come in the burst:
    the detector idles and the calm streams wait twice their interval."""
    period, unit = 0.1, 0.03

    def run(unit_s: float):
        chooser = KeyframeChooser(interval=3)
        streams = {f"s{i}": signals(confidence=1.0 - 0.1 * i) for i in range(6)}  # s5 drifts most
        for name in streams:
            chooser.add(name, period)
        keys, taken = {name: [] for name in streams}, []
        for tick in range(30):
            for name in streams:
                chooser.detected(name)  # the last period's keyframes are back
            queued = 0
            for k, (name, sig) in enumerate(streams.items()):
                reason = chooser.offer(name, sig, start_in_s=queued * unit, now=tick * period + 0.001 * k,
                                       unit_s=unit_s)
                if reason and reason != "first":
                    keys[name].append(tick)
                    queued += 1
            taken.append(queued)
        gaps = max(b - a for ticks in keys.values() for a, b in zip(ticks, ticks[1:]))
        return taken[1:], gaps

    taken, gaps = run(unit)
    assert min(taken) >= 3 and gaps <= 3
    taken, gaps = run(math.inf)
    assert min(taken) < 3 and gaps > 3


def test_min_interval_and_the_controllers_stretch_bound_how_often_a_stream_is_detected():
    keys = simulate(KeyframeChooser(interval=6, min_interval=3), {"a": signals()}, frames=30)
    assert all(b - a >= 3 for a, b in zip(keys["a"], keys["a"][1:]))
    chooser = KeyframeChooser(interval=6, min_interval=2)
    chooser.stretch = 2.0  # the budget controller: the machine is behind, keyframes half as often
    keys = simulate(chooser, {"a": signals()}, frames=30)
    assert all(b - a == 4 for a, b in zip(keys["a"], keys["a"][1:]))


def test_adaptive_intervals_stretch_for_a_scene_where_keyframes_find_nothing_new():
    def calm(tick):  # every keyframe result: nothing started, nothing lost
        return signals(births=0, losses=0, keyframe=tick // 3)

    def busy(tick):  # every keyframe result starts tracks
        return signals(births=2, losses=1, keyframe=tick // 3)

    keys = simulate(KeyframeChooser(interval=2, adaptive=True, max_interval=12), {"calm": calm, "busy": busy},
                    frames=300, detect_frames=2)
    assert len(keys["busy"]) >= 2 * len(keys["calm"]) and len(keys["calm"]) >= 300 / 24


def test_bad_intervals_are_refused():
    with pytest.raises(ValueError):
        KeyframeChooser(interval=2, min_interval=3)


class GatedDetector(MotionDetector):
    """The motion detector, but each call waits for the test to open the gate."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Semaphore(0)
        self.calls: list[list[str]] = []

    def detect(self, frames):
        self.calls.append([f.stream for f in frames])
        assert self.gate.acquire(timeout=60), "the test never opened the gate"
        return super().detect(frames)


def frame(stream: str, index: int) -> Frame:
    import numpy as np

    return Frame(stream, index, index / 30, time.time(), np.zeros((48, 64, 3), np.uint8))


def test_the_engine_keeps_no_keyframe_waiting_behind_a_busy_detector():
    """Three live streams, a detector that takes one frame at a time, held inside its batch: only
    the first frames go to it, none queue behind it; once it is free, the next frame offered is taken,
    and while that one is held nothing else is."""
    inbox = Channel(64)
    detections = Channel(1 << 20, "detections", share=inbox)
    detector = GatedDetector()
    worker = DetectWorker(detector, detections.put, max_batch=1, max_wait_ms=0,
                          budget_ms=33)
    lanes = [Lane(n, build_tracker(TrackerConfig(motion="kalman"), 30.0), True, 5) for n in "abc"]
    engine = Engine(inbox, detections, lanes, worker, lambda item: None, late_after_s=0.0,
                    chooser=KeyframeChooser(interval=5))
    worker.start()

    def back() -> Detected:
        while True:
            item = detections.get(60)
            assert item is not None, "the detector's results never came back"
            if isinstance(item, Detected):
                engine._on_detected(item)
                return item

    try:
        for name in "abc":
            engine._on_input(frame(name, 0))
        # the first frames are in one batch, held by the gate; 20 more frames of each stream arrive
        for index in range(1, 21):
            for name in "bca":
                engine._on_input(frame(name, index))
        assert sum(lane.in_flight for lane in lanes) == 3  # the first frames only
        for _ in range(3):
            detector.gate.release()
        for _ in range(3):
            back()
        assert sum(lane.in_flight for lane in lanes) == 0 and detector.calls == [["a"], ["b"], ["c"]]
        worker.batcher.cost = DetectCost()
        worker.batcher.observe(1, 10_000.0)  # from here it is known to take 10 s a frame
        # free again: the next frame offered is taken; equal worth, so the first stream to offer one
        engine._on_input(frame("b", 21))
        assert engine.lanes["b"].in_flight == 1
        engine._on_input(frame("a", 21))
        engine._on_input(frame("c", 21))
        assert engine.lanes["a"].in_flight == engine.lanes["c"].in_flight == 0
        assert lanes[0].deferred_keyframes == 1  # a went past its interval (5) while the detector was held
    finally:
        detector.gate.release(8)
        worker.close(10)


def test_how_soon_the_detector_would_start_a_keyframe():
    worker = DetectWorker(MotionDetector(), lambda d: True, max_batch=2, max_wait_ms=0, budget_ms=33)
    assert worker.start_in_s() == 0.0  # idle
    worker._started, worker._busy = time.perf_counter(), 1
    assert worker.start_in_s() == math.inf  # busy, and its speed not known yet
    worker.batcher.observe(1, 10_000.0)  # a detector that takes 10 s a frame

    def left(waiting_s: float) -> bool:  # the rest of the batch in hand, whenever this runs, and what waits
        before = time.perf_counter()
        value = worker.start_in_s()
        after = time.perf_counter()
        return worker._started + 10 - after + waiting_s <= value <= worker._started + 10 - before + waiting_s

    assert left(0.0)
    worker._jobs.put(frame("a", 0))
    assert left(10.0)  # and a keyframe waiting
    worker._jobs.put(frame("b", 0))
    assert worker.start_in_s() == math.inf  # max_batch keyframes wait already


def test_a_stream_can_join_the_detectors_batch_only_if_its_next_keyframe_could_come_in_time():
    """What the batcher asks before it waits to fill a batch (`Engine.batch_can_grow`): a stream with
    a keyframe with the detector cannot add one, nor a stalled camera, nor one whose next frame comes
    after the wait; a file's schedule may at any frame."""
    worker = DetectWorker(MotionDetector(), lambda d: True, max_batch=4, max_wait_ms=10, budget_ms=33)
    # one frame a second, so that a slow machine's pauses between the lines below change nothing
    lanes = [Lane(n, build_tracker(TrackerConfig(motion="kalman"), 1.0), True, 5, period_s=1.0) for n in "ab"]
    inbox = Channel(8)
    engine = Engine(inbox, Channel(8, share=inbox), lanes, worker, lambda item: None, late_after_s=0.033,
                    chooser=KeyframeChooser(interval=5))
    assert worker.batcher.can_grow == engine.batch_can_grow
    chooser, now = engine.chooser, time.monotonic()
    assert chooser.offer("a", signals(), now=now) == "first"  # a's keyframe is in the batch
    assert not engine.batch_can_grow(now + 2.0)  # b has sent no frame yet: nothing to wait for
    assert chooser.offer("b", signals(), now=now) == "first"
    chooser.detected("b")  # b is free again; its next frame is due a period after its last
    assert not engine.batch_can_grow(now + 0.010)  # not within a 10 ms wait
    assert engine.batch_can_grow(now + 1.0)  # within a longer one
    # b's last frame came 10 s ago (3 periods make a stalled camera); the busy detector takes none
    assert chooser.offer("b", signals(), now=now - 10.0, start_in_s=math.inf) == ""
    assert not engine.batch_can_grow(now + 2.0)
    single = Engine(inbox, Channel(8, share=inbox), [Lane("cam", build_tracker(TrackerConfig(motion="kalman"), 30.0),
                                                          True, 5)], worker, lambda item: None, late_after_s=0.033)
    assert single.batch_can_grow(now)  # a live stream with a schedule of its own, none in flight
    single.lanes["cam"].in_flight = 1
    assert not single.batch_can_grow(now + 1.0)
    files = Engine(inbox, Channel(8, share=inbox), [Lane("file", build_tracker(TrackerConfig(motion="kalman"), 30.0),
                                                         False, 5)], worker, lambda item: None, late_after_s=0.033)
    files.lanes["file"].in_flight = 3
    assert files.batch_can_grow(now)  # a file's schedule sends keyframes whatever is in flight


class Queue:
    """A detector queue for the chooser alone: one keyframe at a time, `unit` seconds each, at most
    `cap` waiting (as `DetectWorker` with `max_batch` = cap); `t` is the time now."""

    def __init__(self, chooser: KeyframeChooser, unit: float, cap: int):
        self.chooser, self.unit, self.cap = chooser, unit, cap
        self.waiting: list[str] = []
        self.withdrawn: list[str] = []  # keyframes that gave their place, in order
        self.busy: tuple[str, float] | None = None  # the stream detected now, and when it ends
        self.t = 0.0

    def advance(self, t: float) -> None:
        """The detector's work up to `t`: keyframes done are reported to the chooser."""
        self.t = t
        while self.busy is not None and self.busy[1] <= t:
            name, end = self.busy
            self.chooser.detected(name)
            self.busy = (self.waiting.pop(0), end + self.unit) if self.waiting else None
        if self.busy is None and self.waiting:
            self.busy = (self.waiting.pop(0), t + self.unit)

    def submit(self, name: str) -> None:
        self.waiting.append(name)
        self.advance(self.t)

    def waiting_streams(self) -> list[str]:
        return list(self.waiting)

    def start_in_s(self, withdrawn: int = 0) -> float:
        waiting = len(self.waiting) - withdrawn
        if waiting >= self.cap:
            return math.inf
        return (max(0.0, self.busy[1] - self.t) if self.busy else 0.0) + waiting * self.unit

    def withdraw(self, name: str) -> bool:
        self.waiting.remove(name)
        self.withdrawn.append(name)
        return True


def in_step(streams: int, displace: bool, ticks: int = 100) -> tuple[dict, Queue]:
    """`streams` cameras at 10 fps whose frames come in step, in the same order every period; a
    detector that takes 20 ms a keyframe and queues at most 4. Returns each stream's keyframe ticks."""
    period, unit = 0.1, 0.02
    chooser = KeyframeChooser(interval=3)
    names = [f"s{i}" for i in range(streams)]
    for name in names:
        chooser.add(name, period)
    queue = Queue(chooser, unit, cap=4)
    keys = {name: [] for name in names}
    for tick in range(ticks):
        for k, name in enumerate(names):
            queue.advance(tick * period + 0.001 * k)
            if chooser.offer(name, signals(), start_in_s=queue.start_in_s(), now=queue.t, unit_s=unit,
                             queue=queue if displace else None):
                keys[name].append(tick)
                queue.submit(name)
    return keys, queue


@pytest.mark.parametrize("streams", [8, 12])
def test_cameras_in_step_each_get_keyframes_when_a_waiting_one_gives_its_place(streams):
    """Cameras whose frames come in step fill the detector's queue in the same order every period.
    Without giving up places, the camera offered last found the queue full at every frame: 1
    keyframe in 100 periods (the bench saw a stream detected on 1 frame of 120). A keyframe still
    waiting gives its place to a frame worth twice as much: every camera is then detected at least
    every other interval, and the detector does as many keyframes as before."""
    starved, _ = in_step(streams, displace=False)
    assert min(len(ticks) for ticks in starved.values()) <= 1
    keys, queue = in_step(streams, displace=True)
    assert all(len(ticks) >= 100 / 6 for ticks in keys.values())
    assert all(b - a <= 2 * 3 for ticks in keys.values() for a, b in zip(ticks, ticks[1:]))
    assert sum(map(len, keys.values())) >= sum(map(len, starved.values())) - streams
    assert queue.withdrawn  # places were given


def test_a_waiting_keyframe_gives_its_place_only_to_a_frame_worth_twice_as_much():
    chooser = KeyframeChooser(interval=5)
    for name in "abc":
        chooser.add(name, PERIOD)
        assert chooser.offer(name, signals(), now=0.0) == "first"
        chooser.detected(name)
    queue = Queue(chooser, unit=0.01, cap=1)
    queue.busy = ("x", 1.0)  # another stream's keyframe runs until t = 1 s
    assert chooser.offer("a", signals(), now=0.01, start_in_s=queue.start_in_s(), unit_s=0.01, queue=queue) == ""
    queue.busy = ("x", 0.02)
    assert chooser.offer("b", signals(), now=0.01, start_in_s=queue.start_in_s(), unit_s=0.01, queue=queue) == "spare"
    queue.waiting.append("b")  # b's keyframe waits, worth 1/5 when taken; the queue is full
    # c's next frame is worth 1/5 as well: not enough; the one after, 2/5: b's place is c's
    assert chooser.offer("c", signals(), now=0.01, start_in_s=queue.start_in_s(), unit_s=0.01, queue=queue) == ""
    assert chooser.offer("c", signals(), now=0.04, start_in_s=queue.start_in_s(), unit_s=0.01, queue=queue) == "spare"
    assert queue.waiting == [] and queue.withdrawn == ["b"]
    # b counts its frames from its keyframe before (frame 0): the one taken back, then one more
    assert chooser.offer("b", signals(), now=0.04, start_in_s=math.inf) == ""
    assert chooser.worth("b") == 3 / 5
    # a scene cut's or a first frame's keyframe never gives its place
    chooser.add("d", PERIOD)
    assert chooser.offer("d", signals(), now=0.05, start_in_s=math.inf) == "first"
    queue.waiting = ["d"]
    for k in range(1, 20):
        assert chooser.offer("a", signals(), now=0.05 + k * PERIOD, start_in_s=queue.start_in_s(), unit_s=0.01,
                             queue=queue) == ""
    assert queue.waiting == ["d"]


def test_the_engine_publishes_a_keyframe_taken_back_from_the_detectors_queue_by_motion():
    """A real engine and detector thread: with the detector held on one stream's keyframe and
    another's spare keyframe waiting, a third stream's frame worth twice as much takes that place;
    the keyframe taken back goes out at once by motion (`keyframe` false), its stream is free for
    its next keyframe, and the detector never sees it."""
    inbox = Channel(64)
    detections = Channel(1 << 20, "detections", share=inbox)
    detector = GatedDetector()
    worker = DetectWorker(detector, detections.put, max_batch=1, max_wait_ms=0, budget_ms=33)
    lanes = [Lane(n, build_tracker(TrackerConfig(motion="kalman"), 30.0), True, 5) for n in "abc"]
    published: list = []
    engine = Engine(inbox, detections, lanes, worker, published.append, late_after_s=60.0,
                    chooser=KeyframeChooser(interval=5))
    worker.start()

    def back() -> Detected:
        while True:
            item = detections.get(60)
            assert item is not None, "the detector's results never came back"
            if isinstance(item, Detected):
                engine._on_detected(item)
                return item

    try:
        for name in "abc":
            engine._on_input(frame(name, 0))
        detector.gate.release(3)
        for _ in range(3):
            back()
        worker.batcher.cost = DetectCost()
        worker.batcher.observe(1, 1.0)  # 1 ms a keyframe: a place in the queue starts within a period
        engine._on_input(frame("a", 1))  # to the detector, held there by the gate
        for _ in range(600):  # until the detector's thread has taken it from the queue
            if detector.calls[-1:] == [["a"]]:
                break
            time.sleep(0.05)
        assert detector.calls[-1] == ["a"]
        engine._on_input(frame("b", 1))  # a spare keyframe, worth 1/5: it waits in the queue (full)
        assert engine.lanes["b"].in_flight == 1 and worker.waiting_streams() == ["b"]
        engine._on_input(frame("c", 1))  # worth 1/5 too: not taken
        engine._on_input(frame("c", 2))  # worth 2/5: takes b's place
        assert engine.lanes["c"].in_flight == 1 and engine.lanes["b"].in_flight == 0
        assert worker.waiting_streams() == ["c"]
        # counted on the stream that gave its place, as its stats and metrics show it
        assert [lane.displaced_keyframes for lane in lanes] == [0, 1, 0]
        for lane in lanes:
            engine._advance(lane)
        out = {(r.frame.stream, r.frame.index): r.keyframe for r in published}
        assert out[("b", 1)] is False  # out by motion, not waiting for detections
        assert ("a", 1) not in out  # a's keyframe waits for its detections
        detector.gate.release(2)
        done = {back().frame.stream for _ in range(2)}
        assert done == {"a", "c"} and all("b" not in call for call in detector.calls[3:])
        for lane in lanes:
            engine._advance(lane)
        out = {(r.frame.stream, r.frame.index): r.keyframe for r in published}
        assert out[("a", 1)] is True and out[("c", 2)] is True and out[("c", 1)] is False
        assert all(lane.in_flight == 0 for lane in lanes)
    finally:
        detector.gate.release(8)
        worker.close(10)
