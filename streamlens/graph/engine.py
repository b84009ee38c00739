"""The engine: keyframes to the detector, every frame through its stream's tracker, in order.

    inbox (frames of every stream)
      -> one lane per stream: frames wait here in order
           keyframe    -> DetectWorker (its own thread: batches across streams) -> detections channel
           other frame -> tracker.propagate(frame) -> published at once
      -> a keyframe is published when its detections are back: tracker.update(frame, detections)

The detector never blocks the engine: while it works, other streams' frames keep flowing, and a
stream's own frames queue behind its keyframe. For a live stream a keyframe waits at most until
`frame.clock + late_after_s`; past that it is published by motion alone (it counts as a late
keyframe, and goes out with `keyframe: false`), the frames behind it flow on, and when the
detections do come the tracker applies them at that keyframe and replays the motion it stored for
the frames since (`Tracker.update` on an earlier frame), so a slow detector costs accuracy for a
moment, never latency. That replay (one tracker step per frame since the keyframe: tens of steps
when the detector is far behind) runs while the inbox is empty, `REPLAY_CHUNK` steps at a time;
what is left of it when the stream's own next frame comes is done then, before that frame. When
the detector's learnt speed says a live keyframe cannot be back by then, it does not wait at all.
A live stream has at most one keyframe with the detector: a keyframe due while the last one is
still there is deferred to the first frame after it comes back, so a detector slower than the
keyframes asked of it falls behind by at most one frame per stream.
With a `KeyframeChooser` (`keyframes.shared`, the default), the engine itself chooses the live
keyframes as frames arrive: whenever the detector can start one within a frame period
(`DetectWorker.start_in_s`: idle, or about to end the work it has), the stream whose next
keyframe is worth most gets it, so the detector stays busy on the streams that need it, and
no keyframe waits in its queue longer than a frame period. A keyframe still waiting there gives its
place to a frame worth far more (`KeyframeQueue`): it is taken back and goes out by motion.
A live frame older than its lane's limit when the engine comes to it (`Lane.too_old`: the
source's `max_staleness_ms`, or the budget controller's `max_wait_s`) is dropped before any work
and counted: as the engine's (`stale_dropped`: it grew old waiting here) or its source's
(`late_from_source`). The frames between two a lane takes (shed, or dropped on the way) count
towards its next keyframe, so keyframes keep their spacing in the source's frames.
Files wait for every keyframe: their results are exact and the same on every run.

The engine thread is the only writer of the lanes, their trackers, the `KeyframeChooser` and the
budget controller's settings. Other threads reach them through it: admission reads each lane's
`LaneView`, a read-only copy the engine publishes; the controller's rung and any other work
(`Engine.post`) come through its mailbox, a channel it waits on with the inbox. Results go to
`publish` (`ResultRoute.publish`, graph/publish/route.py); the detector's thread is in graph/schedule/detect_worker.py.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import supervision as sv

from ..memory import trim_soon
from ..frame import EndOfStream, Frame, FrameResult, MediaClock, StreamEnd
from ..track import Tracker
from ..track.base import confident
from .channel import Channel, ChannelClosed, get_any
from .order import MediaOrder
from .schedule.chooser import KeyframeChooser
from .schedule.detect_worker import Detected, DetectWorker, KeyframeQueue
from .schedule.regions import build_planner

#: tracker steps of a late keyframe's replay done at a time while the inbox is empty
REPLAY_CHUNK = 4


def too_old(frame: Frame, live: bool, limits: tuple[float | None, ...], now: float | None = None) -> bool:
    """Whether a live frame has waited longer than the least of `limits` (seconds; None: no limit)."""
    if not live:
        return False
    limits = [limit for limit in limits if limit is not None]
    return bool(limits) and (time.monotonic() if now is None else now) - frame.clock > min(limits)


@dataclass(frozen=True, slots=True)
class LaneView:
    """What a stream's admission (on its source thread) reads of its lane: a read-only copy that the
    engine makes anew (`Lane.publish_view`) whenever one of these changes on its thread.
    `in_flight`: keyframes with the detector; `signals`: a copy of the tracker's `TrackingSignals`
    after the newest frame the engine published (None: no tracker signals); `stretch`: the budget
    controller's factor on the keyframe intervals; `max_staleness_s`, `max_wait_s`: see `Lane`."""

    live: bool
    in_flight: int = 0
    signals: object = None
    stretch: float = 1.0
    max_staleness_s: float | None = None
    max_wait_s: float | None = None

    def too_old(self, frame: Frame, now: float | None = None) -> bool:
        """As `Lane.too_old`, by the limits of this view."""
        return too_old(frame, self.live, (self.max_staleness_s, self.max_wait_s), now)


@dataclass(frozen=True, slots=True)
class Mail:
    """Work posted to the engine thread from another (`Engine.post`): `fn()` runs there."""

    fn: Callable[[], None]


@dataclass(frozen=True, slots=True)
class Control:
    """The budget controller's rung, as the engine applies it (`Engine.apply_control`)."""

    stretch: float
    wait: bool
    throughput: bool
    max_wait_s: float | None = None


@dataclass(eq=False)
class Lane:
    """One stream inside the engine. Every field is written on the engine thread only (`turn`
    guards what admission waits on); admission reads `view`, which the engine publishes."""

    name: str
    tracker: Tracker
    live: bool
    #: the most frames the schedule lets pass between keyframes: after a longer gap (a live source
    #: dropped the keyframe, or one was deferred) the next frame becomes one
    interval: int
    waiting: deque = field(default_factory=deque)
    #: keyframes whose detections are back and not yet applied, by frame index
    ready: dict = field(default_factory=dict)
    late: set = field(default_factory=set)  # indices of keyframes published before their detections
    #: live keyframes with the detector: until when each may wait for its detections (time.monotonic()),
    #: by frame index
    deadlines: dict = field(default_factory=dict)
    #: live keyframes put off because the stream's previous keyframe was still with the detector
    #: (shared schedule: times the stream went past its interval and waited for the detector)
    deferred_keyframes: int = 0
    #: live keyframes taken back from the detector's queue, their place given to a frame worth more
    #: (shared schedule, `KeyframeChooser._displace`); they went out by motion
    displaced_keyframes: int = 0
    #: a live frame that waited longer than this for the engine is dropped (None: never): the
    #: source's `max_staleness_ms`, and the budget controller's `max_wait_s` (`Engine.apply_control`)
    max_staleness_s: float | None = None
    max_wait_s: float | None = None
    #: seconds between the stream's frames (the shared schedule waits this long for its next one)
    period_s: float = 1 / 30
    #: live frames dropped for their age (`too_old`): those that grew old waiting for the engine
    #: (the engine did not keep up: the budget controller sheds for them), and those that came late
    #: from their source, dropped here (admission counts its own: `Admission.late_from_source`)
    stale_dropped: int = 0
    late_from_source: int = 0
    #: late keyframes whose detections came back older than the tracker's history (not applied)
    discarded_detections: int = 0
    #: live keyframes not waited for at all: the detector's learnt speed said they could not be back in time
    unwaited: int = 0
    seq: int = 0
    #: the index of the newest frame the engine took (None: none yet)
    last_index: int | None = None
    in_flight: int = 0  # keyframes with the detector now
    since_keyframe: int = 0
    #: the index of the newest keyframe whose detections the tracker has applied (None: none yet)
    detected_frame: int | None = None
    open: bool = True
    #: a file whose schedule reads the tracker's signals: its admission waits on `turn` until the
    #: engine has published the frame before (graph/admit.py); `published_index` is the newest one
    in_order: bool = False
    published_index: int = -1
    turn: threading.Condition = field(default_factory=threading.Condition)
    #: files of a `reid.across` group: their merge by media time (graph/order.py), else None
    order: MediaOrder | None = None
    #: the stream's media time (the one clock of the stream: its results carry it, `FrameResult.media_s`)
    clock: MediaClock = field(default_factory=MediaClock)
    #: the budget controller's factor on the keyframe intervals (live streams)
    stretch: float = 1.0
    #: what admission reads of the lane (`publish_view`)
    view: LaneView = None

    def __post_init__(self) -> None:
        self.publish_view()

    def publish_view(self) -> None:
        """Make `view` anew from the lane as it is now (on the engine thread)."""
        signals = self.tracker.signals
        self.view = LaneView(self.live, self.in_flight, None if signals is None else signals.copy(),
                             self.stretch, self.max_staleness_s, self.max_wait_s)

    def too_old(self, frame: Frame, now: float | None = None) -> bool:
        """Whether a frame of this lane is too old to go on: a live frame past the source's
        `max_staleness_ms` or the budget controller's `max_wait_s` (it could no longer be published
        within the budget)."""
        return too_old(frame, self.live, (self.max_staleness_s, self.max_wait_s), now)


def engine_mailbox(inbox: Channel) -> Channel:
    """The engine's mailbox: a channel the engine waits on with `inbox`, holding at most one item
    per key (a newer one replaces it), so a post never waits."""
    return Channel(1, "mail", share=inbox)


class Engine:
    """Runs the lanes of every stream on one thread (see the module's docstring)."""

    def __init__(self, inbox: Channel, detections: Channel, lanes: list[Lane], worker: DetectWorker,
                 publish: Callable[[FrameResult | StreamEnd], None], late_after_s: float,
                 on_detected: Callable[[Detected], None] | None = None, chooser: KeyframeChooser | None = None,
                 on_keyframe: Callable[[Frame, sv.Detections, sv.Detections], None] | None = None,
                 mail: Channel | None = None, regions=None):
        """`publish`: where each result and stream end goes (`ResultRoute.publish`, graph/publish/route.py);
        `mail`: the engine's mailbox, made with `Channel(share=inbox)` (default: one of its own):
        `Mail` and `Control` items posted there run on the engine thread before its next input;
        `regions`: the `detector` section, whose `regions` key gives each stream a `RegionPlanner`
        (graph/schedule/regions.py) that chooses what of its keyframes the detector sees (None: whole frames)."""
        self.on_detected = on_detected  # told of every keyframe back from the detector, late ones too
        #: told of every keyframe whose detections the tracker applied (late ones too, when applied):
        #: the frame, the detector's boxes on it and the tracked objects they gave
        self.on_keyframe = on_keyframe
        self.chooser = chooser  # the shared schedule of the live streams (None: each its own)
        if chooser is not None:
            for lane in lanes:
                if lane.live:
                    chooser.add(lane.name, lane.period_s)
        self.inbox = inbox
        #: where `worker` delivers: made with `Channel(share=inbox)`, so the engine waits on both at once
        self.detections = detections
        #: the lanes by stream: a snapshot replaced whole when a stream is added, so that the detector's
        #: thread (`batch_can_grow`) reads it as it is while the engine thread changes it
        self.lanes: Mapping[str, Lane] = MappingProxyType({lane.name: lane for lane in lanes})
        self.worker = worker
        worker.batcher.can_grow = self.batch_can_grow
        #: the detector's queue, whose waiting keyframes give their place to frames worth more
        self.queue = KeyframeQueue(worker, self._taken_back)
        self.publish = publish
        self.late_after_s = late_after_s
        self._wait_s = late_after_s  # as configured
        self._gaps = {lane.name: lane.interval for lane in lanes}  # as configured
        self.mail = mail if mail is not None else engine_mailbox(inbox)
        #: per stream, the planner of its keyframes' regions (absent: the detector sees whole frames)
        self.regions = {lane.name: p for lane in lanes if (p := build_planner(regions)) is not None}
        self._regions = regions  # for the planners of streams added later
        self._control = Control(1.0, True, False)  # the budget controller's rung as last applied
        #: go on with no stream open: the last one was removed (graph/run/changes.py), more may be added
        self.hold_open = False
        self._ending = False  # `end_when_empty()`: the run is ending, hold no more

    def end_when_empty(self) -> None:
        """The run is ending (on the engine thread): once no stream is open, `run()` returns."""
        self._ending = True
        self.hold_open = False

    def add_lane(self, lane: Lane) -> None:
        """A stream added while running (on the engine thread): its lane joins the others, the
        shared schedule when live, and the budget controller's rung as last applied."""
        self.lanes = MappingProxyType({**self.lanes, lane.name: lane})
        self._gaps[lane.name] = lane.interval
        planner = build_planner(self._regions)
        if planner is not None:
            self.regions[lane.name] = planner
        if self.chooser is not None and lane.live:
            self.chooser.add(lane.name, lane.period_s)
        self._rung(lane, self._control.stretch, self._control.max_wait_s)
        self.hold_open = False

    def post(self, fn: Callable[[], None], key: str = "mail") -> None:
        """Run `fn()` on the engine thread, from any thread, never waiting: a newer post under the
        same `key` replaces one not yet taken."""
        self.mail.put(Mail(fn), key=key, drop_oldest=True)

    def control(self, order: Control) -> None:
        """The budget controller's rung, from any thread: posted to the engine's mailbox (a newer
        rung replaces one not yet applied), and applied on the engine thread (`apply_control`)."""
        self.mail.put(order, key="control", drop_oldest=True)

    def apply_control(self, stretch: float, wait: bool, throughput: bool, max_wait_s: float | None = None) -> None:
        """The budget controller's rung (graph/overload/control.py), applied to what the engine owns (on its
        thread): its live lanes' longest gap and the shared schedule (x `stretch`; a live stream with
        a schedule of its own reads it in its lane's view), whether live keyframes wait for their
        detections, whether the detector batches for throughput (budget lifted; the detector's
        thread reads it), and how long a live frame may have waited when the engine comes to it
        (`Lane.max_wait_s`)."""
        self._control = Control(stretch, wait, throughput, max_wait_s)
        if self.chooser is not None:
            self.chooser.stretch = stretch
        for lane in self.lanes.values():
            self._rung(lane, stretch, max_wait_s)
        self.late_after_s = self._wait_s if wait else 0.0
        self.worker.batcher.budget_ms = None if throughput else self.worker.budget_ms

    def _rung(self, lane: Lane, stretch: float, max_wait_s: float | None) -> None:
        """A live lane's share of the controller's rung: its longest gap as configured x `stretch`,
        and the wait limit."""
        if lane.live:
            lane.interval = max(1, round(self._gaps[lane.name] * stretch))
            lane.stretch, lane.max_wait_s = stretch, max_wait_s
            lane.publish_view()

    def _on_mail(self, item: Mail | Control) -> None:
        if isinstance(item, Control):
            self.apply_control(item.stretch, item.wait, item.throughput, item.max_wait_s)
        else:
            item.fn()

    def run(self) -> None:
        """Until every stream has ended (or the inbox is closed). Raises what the detector raised."""
        self.worker.start()
        try:
            while self.hold_open or any(lane.open for lane in self.lanes.values()):
                replaying = next((lane for lane in self.lanes.values() if lane.open and lane.tracker.catching_up),
                                 None)
                try:
                    item = get_any([self.mail, self.detections, self.inbox], 0.0 if replaying else self._wait())
                except ChannelClosed:
                    return
                if isinstance(item, (Mail, Control)):
                    self._on_mail(item)
                elif isinstance(item, Detected):
                    self._on_detected(item)
                elif item is not None:
                    self._on_input(item)
                elif replaying is not None:  # nothing waiting: a little of a late keyframe's replay
                    replaying.tracker.catch_up(REPLAY_CHUNK)
                for lane in self.lanes.values():
                    self._advance(lane)
        finally:
            # an abort (the inbox closed and emptied) does not wait for a batch in hand: the
            # detector's thread ends by itself once it finds the inbox closed
            self.worker.close(0.0 if self.inbox.closed else None)

    def batch_can_grow(self, until: float) -> bool:
        """Whether a keyframe could still join the detector's batch by `until` (time.monotonic()),
        asked from the detector's thread (graph/schedule/batcher.py). A file, or a live stream with a schedule
        of its own and no keyframe in flight, may send one at any frame; the shared schedule's
        streams answer for themselves (`KeyframeChooser.joinable_by`). A stream added or removed
        meanwhile is read next time (`lanes` is a snapshot)."""
        if any(lane.open and (not lane.live or (self.chooser is None and not lane.in_flight))
               for lane in self.lanes.values()):
            return True
        return self.chooser is not None and self.chooser.joinable_by(until)

    def open_streams(self) -> list[Lane]:
        return [lane for lane in self.lanes.values() if lane.open]

    def _wait(self) -> float | None:
        """Seconds until the first live keyframe that waits for its detections becomes late."""
        deadlines = [lane.deadlines.get(lane.waiting[0].index, 0.0) for lane in self.lanes.values()
                     if lane.live and lane.waiting and isinstance(lane.waiting[0], Frame)
                     and lane.waiting[0].keyframe and lane.waiting[0].index not in lane.ready]
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _on_input(self, item: Frame | EndOfStream) -> None:
        lane = self.lanes[item.stream]
        if isinstance(item, Frame):
            now = time.perf_counter()
            queued_s = now - (item.queued if item.queued is not None else now)
            if lane.too_old(item):  # too old to be worth anything live; the schedule catches up below
                # most of its age spent waiting for the engine: the engine did not keep up; otherwise
                # it came late from its source (a decoder behind its clock)
                if 2 * queued_s >= time.monotonic() - item.clock:
                    lane.stale_dropped += 1
                else:
                    lane.late_from_source += 1
                return
            # the frames between this one and the lane's last (dropped on the way, or shed) count
            # towards its next keyframe: keyframes keep their spacing in time when frames are shed
            skipped = max(0, item.index - lane.last_index - 1) if lane.last_index is not None else 0
            lane.last_index = item.index
            item.timings["queue"] = queued_s * 1000
            item.keyframe = self._is_keyframe(lane, item, skipped)
            lane.since_keyframe = 0 if item.keyframe else lane.since_keyframe + 1
            if item.keyframe:
                lane.in_flight += 1
                lane.publish_view()
                if lane.live:  # wait for the detections only if they can be back in time
                    deadline = item.clock + self.late_after_s
                    in_time = time.monotonic() + self.worker.expected_s() <= deadline
                    lane.deadlines[item.index] = deadline if in_time else 0.0
                    lane.unwaited += not in_time
                planner = self.regions.get(lane.name)
                if planner is not None:
                    item.region = planner.plan(item, lane.tracker.held_boxes())
                    if item.region is not None:
                        item.prepared = None  # made ahead for the whole frame
                self.worker.submit(item)
        lane.waiting.append(item)

    def _is_keyframe(self, lane: Lane, frame: Frame, skipped: int) -> bool:
        """Whether the detector runs on `frame`: the one place this is decided. A live stream of the
        shared schedule asks the `KeyframeChooser` (`frame.scene_cut`: what admission saw); any
        other takes what its schedule asked at admission (`frame.scheduled`), and also detects on a
        frame `interval` frames past its last keyframe (the scheduled one was dropped on the way),
        but never while a live stream's last keyframe is still with the detector (deferred).
        `skipped`: the stream's frames since its last that never reached the engine."""
        if lane.live and self.chooser is not None:
            # a keyframe whose region was planned keeps its place: its planner has moved on from it
            chosen = bool(self.chooser.offer(lane.name, lane.tracker.signals, cut=frame.scene_cut,
                                             start_in_s=self.worker.start_in_s(), skipped=skipped,
                                             unit_s=self.worker.unit_s(),
                                             queue=None if self.regions else self.queue))
            lane.deferred_keyframes = self.chooser.deferred(lane.name)
            return chosen
        scheduled = frame.scheduled
        if lane.live:
            lane.since_keyframe += skipped
        if not (scheduled or lane.since_keyframe >= lane.interval):
            return False
        if lane.live and lane.in_flight:  # the detector still has this stream's last keyframe
            frame.prepared = None  # an input made ahead for it is not needed
            lane.deferred_keyframes += scheduled
            return False
        return True

    def _taken_back(self, frame: Frame) -> None:
        """A keyframe taken back from the detector's queue (its place went to a frame worth more):
        it goes out by motion like the frames between keyframes."""
        lane = self.lanes[frame.stream]
        frame.keyframe, frame.prepared = False, None
        lane.displaced_keyframes += 1
        lane.in_flight -= 1
        lane.deadlines.pop(frame.index, None)
        lane.late.discard(frame.index)  # published already, by motion: no detections will come
        lane.publish_view()

    def _on_detected(self, done: Detected) -> None:
        if done.error is not None:
            raise done.error
        lane = self.lanes[done.frame.stream]
        lane.in_flight -= 1
        if self.chooser is not None:
            self.chooser.detected(lane.name)
        if self.on_detected is not None:
            self.on_detected(done)
        key = done.frame.index
        if key in lane.late:  # the tracker rewinds to that frame, applies them; the motion since is replayed
            lane.late.discard(key)  # when the inbox is empty, or by the tracker before this stream's next frame
            stale = lane.tracker.stale_updates
            objects = lane.tracker.update(done.frame, done.detections, catch_up=False)
            if lane.tracker.stale_updates == stale:  # applied, not too old for its history
                lane.detected_frame = max(done.frame.index, lane.detected_frame or 0)
                if self.on_keyframe is not None:
                    self.on_keyframe(done.frame, confident(done.detections), objects)
            else:
                lane.discarded_detections += 1
        elif lane.open:  # not published yet: its timings are still the engine's to fill in
            done.frame.timings["batch"], done.frame.timings["detect"] = done.batch_ms, done.detect_ms
            lane.ready[key] = done.detections
        lane.publish_view()

    def _advance(self, lane: Lane) -> None:
        """Publish the lane's frames in order, as far as their detections allow."""
        while lane.waiting:
            head = lane.waiting[0]
            if isinstance(head, EndOfStream):
                lane.waiting.popleft()
                self._end(lane, head)
                return
            keyframe = head.keyframe and head.index in lane.ready
            if head.keyframe and not keyframe:
                if not (lane.live and time.monotonic() >= lane.deadlines.get(head.index, 0.0)):
                    return  # wait for the detector
                lane.late.add(head.index)  # out by motion now; its detections are applied when they come
            lane.deadlines.pop(head.index, None)
            lane.waiting.popleft()
            started = time.perf_counter()
            if keyframe:
                found = lane.ready.pop(head.index)
                detections = lane.tracker.update(head, found)
                lane.detected_frame = head.index
                if self.on_keyframe is not None:
                    self.on_keyframe(head, confident(found), detections)
            else:
                detections = lane.tracker.propagate(head)
            head.timings["track"] = (time.perf_counter() - started) * 1000
            head.timings.setdefault("detect", 0.0)
            self.publish(FrameResult(head, lane.seq, keyframe, detections, lane.detected_frame,
                                     media_s=lane.clock(head)))
            lane.seq += 1
            lane.publish_view()  # the tracker's signals after this frame
            if lane.order is not None:
                lane.order.published(lane.name)
            if lane.in_order:
                with lane.turn:
                    lane.published_index = head.index
                    lane.turn.notify_all()

    def _end(self, lane: Lane, end: EndOfStream) -> None:
        with lane.turn:
            lane.open = False
            lane.turn.notify_all()
        if lane.order is not None:
            lane.order.ended(lane.name)
        if self.chooser is not None:
            self.chooser.remove(lane.name)
        lane.ready.clear()
        lane.late.clear()
        lane.deadlines.clear()
        lane.tracker.forget()
        self.publish(StreamEnd(lane.name, lane.seq, lane.seq, end.reason, detail=end.error))
        lane.seq += 1
        if not self._ending:
            trim_soon()  # the stream's frames and buffers: back to the system, not kept by the heap
        if end.reason == "removed" and not self.open_streams() and not self._ending:
            self.hold_open = True  # the last stream was taken away, not ended: the run waits for more


__all__ = ["Control", "Detected", "DetectWorker", "Engine", "Lane", "LaneView", "Mail", "engine_mailbox", "too_old"]
