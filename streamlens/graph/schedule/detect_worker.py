"""The detector on a thread of its own (`DetectWorker`), and what it sends back (`Detected`).

The engine hands it keyframes (`submit`, never waiting); its thread takes them in batches across
streams (graph/schedule/batcher.py), runs the detector, and delivers each keyframe's detections on a
channel the engine waits on with its inbox. It reports its load (`start_in_s`, `expected_s`) for
the engine's keyframe decisions, and a keyframe no batch has taken yet can be taken back
(`withdraw`; `KeyframeQueue` is that queue as the shared schedule sees it).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import supervision as sv

from ...frame import Frame
from ..channel import Channel, ChannelClosed
from .batcher import Batcher

#: the nice value of the detector's thread when it runs on the CPU beside live streams
DETECTOR_NICE = 10


@dataclass(slots=True, eq=False)
class Detected:
    """A keyframe back from the detector: its detections, or the error that stopped it, and how
    long it waited for its batch and the batch's detector call took (ms). The detector's thread
    writes nothing into the frame but to drop the model input made ahead for it (`prepared`, which
    nothing else reads then): a late keyframe is being published on the engine's meanwhile."""

    frame: Frame
    detections: sv.Detections | None
    error: BaseException | None = None
    batch_ms: float = 0.0
    detect_ms: float = 0.0


class DetectWorker:
    """The detector on a thread of its own: `submit(frame)` never waits; each keyframe comes back
    through `deliver(Detected(...))`. Batches gather keyframes of every stream, no more than the
    detector runs in one call (its `max_batch`: a model exported with a fixed batch of 1 runs one
    frame a call, and a batch of four would hold the first keyframe's detections back for the
    other three's inference); `max_batch` keyframes may still wait their turn, one call each.

    `low_priority` (Linux) runs that thread at nice `DETECTOR_NICE`: a detector on the CPU then takes
    the cores only when decoding, tracking and publishing leave them idle, so a busy machine makes
    keyframes late (their frames go out by motion) instead of making every frame late. (With
    onnxruntime that covers the inference when it runs on the calling thread, `threads: 1`.) It
    stays there while the budget controller sheds frames: back at normal priority, the shared
    schedule kept it as busy as it could be and it took the cores from the frames it should have
    served (tools/results/overload.md)."""

    def __init__(self, detector, deliver: Callable[[Detected], bool], *, max_batch: int,
                 max_wait_ms: float, budget_ms: float | None, low_priority: bool = False):
        self.detector = detector
        self.low_priority = low_priority
        self.deliver = deliver
        self.batches = 0
        self._busy = 0  # keyframes in the batch being detected now
        self._started = 0.0  # when that batch started (time.perf_counter())
        self._jobs = Channel(capacity=1 << 16, name="keyframes")
        #: keyframes that may wait for the detector (`start_in_s`), whatever it runs in one call
        self.places = max_batch
        self.batcher = Batcher(self._jobs, max_batch=self.per_call(detector, max_batch), max_wait_ms=max_wait_ms,
                               budget_ms=budget_ms)
        self.budget_ms = budget_ms  # as configured (the budget controller may lift it: `Engine.apply_control`)
        self._thread = threading.Thread(target=self._run, name="detector", daemon=True)

    @staticmethod
    def per_call(detector, max_batch: int) -> int:
        """The most keyframes a batch holds: `max_batch`, or fewer where the detector runs fewer in one call."""
        most = detector.max_batch
        return min(max_batch, most) if isinstance(most, int) and most >= 1 else max_batch

    def start(self) -> None:
        self._thread.start()

    def submit(self, frame: Frame) -> None:
        frame.submitted = time.perf_counter()
        self._jobs.put(frame, key=frame.stream)

    def waiting_streams(self) -> list[str]:
        """The streams whose keyframes wait in the queue, not yet taken into a batch."""
        return self._jobs.waiting_keys()

    def withdraw(self, stream: str) -> Frame | None:
        """Take the stream's oldest keyframe back out of the queue, if no batch has taken it yet
        (None otherwise): its place goes to a keyframe worth more (`KeyframeChooser`)."""
        return self._jobs.take_back(stream)

    def expected_s(self) -> float:
        """Seconds until the detections of a keyframe submitted now would be back: the keyframes
        ahead of it and itself, at the detector's learnt speed. Until it has timed a batch: 0.0 for
        a keyframe that has the detector to itself, `math.inf` for one with others ahead of it (at
        a start every live stream's first frame is a keyframe: each was waited for behind all those
        before it, and every frame of its stream behind it)."""
        cost, ahead = self.batcher.cost, self._jobs.depth() + self._busy
        if not cost.known:
            return math.inf if ahead else 0.0
        return cost.estimate(ahead + 1) / 1000

    def unit_s(self) -> float:
        """Seconds the detector takes for one keyframe alone, at its learnt speed (`math.inf` until
        it has timed a batch)."""
        cost = self.batcher.cost
        return cost.estimate(1) / 1000 if cost.known else math.inf

    def start_in_s(self, withdrawn: int = 0) -> float:
        """Seconds until a keyframe submitted now would start: the rest of the batch in hand and
        the keyframes waiting (less `withdrawn` of them), at the detector's learnt speed (0.0 when
        idle). `math.inf` when `max_batch` keyframes (as configured) wait already, or while the first
        batch runs untimed."""
        waiting, busy = max(0, self._jobs.depth() - withdrawn), self._busy
        if waiting >= self.places:
            return math.inf
        if not (waiting or busy):
            return 0.0
        cost = self.batcher.cost
        if not cost.known:
            return math.inf
        left = self._started + cost.estimate(busy) / 1000 - time.perf_counter() if busy else 0.0
        return max(0.0, left) + (cost.estimate(waiting) / 1000 if waiting else 0.0)

    def close(self, timeout: float | None = None) -> bool:
        """Finish the batch in hand, then stop; frames not started are dropped. Waits at most
        `timeout` seconds (None: for the batch to end); returns whether the thread has ended."""
        self._jobs.close(discard=True)
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait up to `timeout` seconds for the detector's thread to end (after `close`)."""
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """Whether the detector's thread is still running (inside a batch, after a timed-out close)."""
        return self._thread.is_alive()

    def _run(self) -> None:
        if self.low_priority and sys.platform.startswith("linux"):
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), DETECTOR_NICE)
            except OSError:
                pass
        while True:
            try:
                batch = self.batcher.next_batch().items
            except ChannelClosed:
                return
            self._started = started = time.perf_counter()
            self._busy = len(batch)
            try:
                found = self.detector.detect(batch)
            except BaseException as e:  # noqa: BLE001 - handed to the engine, which fails the run
                self.deliver(Detected(batch[0], None, e))
                return
            finally:
                self._busy = 0
            ms = (time.perf_counter() - started) * 1000
            self.batcher.observe(len(batch), ms)
            self.batches += 1
            for frame, detections in zip(batch, found):
                waited = (started - (frame.submitted or started)) * 1000
                if not self.deliver(Detected(frame, detections, batch_ms=waited, detect_ms=ms)):
                    return


@dataclass(frozen=True, slots=True)
class KeyframeQueue:
    """The detector's queue as the shared schedule sees it (`chooser.DetectorQueue`): a keyframe
    taken back from it (`withdraw`) is handed to `taken_back`, on the engine thread."""

    worker: DetectWorker
    taken_back: Callable[[Frame], None]

    def waiting_streams(self) -> list[str]:
        return self.worker.waiting_streams()

    def start_in_s(self, withdrawn: int = 0) -> float:
        return self.worker.start_in_s(withdrawn)

    def withdraw(self, stream: str) -> bool:
        frame = self.worker.withdraw(stream)
        if frame is None:
            return False
        self.taken_back(frame)
        return True
