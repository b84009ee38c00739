"""Admission: what happens to a decoded frame before it joins the engine's inbox.

A source only decodes. Between it and the engine, each stream's frames pass one `Admission`, run
on that stream's own thread so that its work overlaps the engine's and the other streams':

1. a live frame already too old to be published within the budget (its source fell behind) goes
   no further (`Lane.too_old`, counted as `stale`), and the budget controller may shed the frame
   (counted as `shed`);
2. a file of a `reid.across` group waits for its turn in the group's merge by media time
   (graph/order.py `MediaOrder`: the group's results reach the linker in one order on every run);
3. what the keyframe schedule asks (`frame.scheduled`; the engine decides). A file (and a live
   stream with its own schedule) asks its scheduler,
   which reads the stream's tracking signals as they were when the lane last had no keyframe with
   the detector: while one is there, its result is not in the signals yet, and asking for another
   early would only pile work onto a busy detector. A file whose schedule reads the signals
   (`adaptive`) first waits until the engine has published its previous frame, so the signals are
   those after exactly that frame and its keyframes are the same on every run (its decoding still
   runs a frame ahead of the engine). A live stream of the shared schedule only marks scene cuts
   here; the engine chooses its keyframes (graph/schedule/chooser.py `KeyframeChooser`);
4. a keyframe's detector input made ahead, when the detector runs on an accelerator
   (`Detector.prepare_ahead`);
5. the tracker's per-frame work made ahead (`Tracker.prepare`: the motion model's observation).

The engine owns the lane; admission reads only what the engine publishes of it, `Lane.view` (a
read-only `LaneView`: keyframes in flight, a copy of the tracker's signals, the budget
controller's stretch and wait limit), and says once, when it is made, whether the lane's frames
are decided in order (`Lane.in_order`). What it decides is written on the frame: `scheduled` (the
schedule's answer), `scene_cut`, `prepared`, `observed`; the engine then decides the keyframe
(`Engine._is_keyframe`).

Example:
    >>> import numpy as np
    >>> from streamlens.config import TrackerConfig
    >>> from streamlens.track import build_tracker
    >>> from streamlens.graph.schedule.keyframes import KeyframeScheduler
    >>> lane = Lane("cam1", build_tracker(TrackerConfig(motion=None), 30), False, 3)
    >>> admit = Admission(lane, KeyframeScheduler(3))
    >>> frames = [Frame("cam1", i, i / 30, 0.0, np.zeros((8, 8, 3), np.uint8)) for i in range(7)]
    >>> [f.index for f in frames if admit(f) and f.scheduled]
    [0, 3, 6]
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..errors import StreamlensError
from ..frame import EndOfStream, Frame
from .channel import Channel, Credits
from .engine import Lane
from .schedule.keyframes import SceneCutDetector, thumbnail_step

log = logging.getLogger("streamlens")


class StreamStop(threading.Event):
    """What ends one stream's source: set when the run stops (`reason` "stopped"), or when the stream
    alone is removed from a running pipeline (graph/run/changes.py: `reason` "removed")."""

    reason = "stopped"


def run_source(source, admit: Admission, inbox: Channel, credits: Credits | None, stop: StreamStop,
               live: bool) -> None:
    """A source thread's body: decode, admit, and queue into the engine's inbox (a live stream
    drops its oldest frame when its share is full; a file waits), then its `EndOfStream`.
    `credits`: a file's (None: a live stream's frames take none).

    What goes wrong here is this stream's alone: it ends with reason `error` and one line naming
    it, the other streams go on, and the run exits non-zero at its end (`RunReport.incomplete`).
    A camera never gets here for its own trouble: it retries (sources/live.py)."""
    produced, reason, error = 0, "end", None
    try:
        for frame in source.frames(stop):
            if not admit(frame):
                continue
            if credits is not None and not credits.acquire(source.name):
                break  # aborted: the engine gives back no more credits
            frame.queued = time.perf_counter()
            if not inbox.put(frame, key=source.name, drop_oldest=live):
                break
            produced += 1
    except BaseException as e:  # noqa: BLE001 - any failure ends this stream, and only it
        reason = "error"
        error = str(e) if isinstance(e, StreamlensError) else f"{type(e).__name__}: {e}"
        log.warning("%s: %s; the other streams go on", source.name, error,
                    exc_info=None if isinstance(e, StreamlensError) else e)
    finally:
        source.close()
        if reason == "end" and stop.is_set():
            reason = stop.reason
        elif reason == "end" and source.incomplete:
            # the other streams go on; the run exits non-zero and names this input (RunReport.incomplete)
            reason, error = "truncated", source.incomplete
        inbox.put(EndOfStream(source.name, produced, reason, error), key=source.name)


class Admission:
    """One stream's admission (see the module's docstring). `schedule` is the stream's keyframe
    scheduler, or a `SceneCutDetector` for a live stream of the shared schedule; `prepare` makes a
    keyframe's detector input ahead (None: the engine's thread makes it); `shed` says whether the
    budget controller gives up the next frame (None: it never does)."""

    def __init__(self, lane: Lane, schedule, prepare: Callable[[Frame], None] | None = None,
                 shed: Callable[[], bool] | None = None, stopped: threading.Event | None = None):
        """`stopped`: set when the run ends, ending a wait for the engine."""
        self.lane = lane
        self.schedule = schedule
        self.prepare = prepare
        self.shed = shed
        self.stopped = stopped or threading.Event()
        self._cuts_only = isinstance(schedule, SceneCutDetector)
        lane.in_order = not lane.live and schedule is not None and schedule.reads_signals  # known here
        self._previous: int | None = None  # the index of the frame admitted before
        #: frames that came too late from the source (`Lane.too_old`) and went no further
        self.late_from_source = 0

    def __call__(self, frame: Frame) -> bool:
        """Make `frame` ready for the engine; False when it goes no further: too old already (a
        source that fell behind: counted in `late_from_source`), or shed."""
        view = self.lane.view
        if view.too_old(frame):
            self.late_from_source += 1
            return False
        if self.shed is not None and self.shed():
            return False
        if self.lane.order is not None:  # a file of a reid group: the group's frames by media time
            self.lane.order.take_turn(frame, self.stopped)
        if self._cuts_only:
            frame.scene_cut = self.schedule.is_cut(frame.grey_sample(thumbnail_step(frame.width)))
        else:
            if self.lane.in_order:
                self._wait_for_previous()
                self._previous = frame.index
                view = self.lane.view  # as the engine left it after the frame before
            self.schedule.stretch = view.stretch
            frame.scheduled = self.schedule.is_keyframe(frame, view.signals if view.in_flight == 0 else None)
            if frame.scheduled and self.prepare is not None:
                self.prepare(frame)
        self.lane.tracker.prepare(frame)
        return True

    def _wait_for_previous(self) -> None:
        """Until the engine has published the frame admitted before (or the lane or run ended)."""
        lane, previous = self.lane, self._previous
        if previous is None:
            return
        with lane.turn:
            while lane.published_index < previous and lane.open and not self.stopped.is_set():
                lane.turn.wait(0.1)  # a stop is seen within this long
