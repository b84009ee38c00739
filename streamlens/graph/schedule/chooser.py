"""The shared keyframe schedule of an engine's live streams: which stream's frame the detector takes next.

Files, and live streams with `keyframes.shared: false`, keep a schedule of their own
(graph/schedule/keyframes.py). Live streams of the shared schedule (the default) are decided in the engine,
frame by frame as they arrive, by one `KeyframeChooser`: the detector is the scarce resource, so
whenever it is about to be free the stream whose next keyframe is worth most gets it, no keyframe
waits behind a busy detector longer than a frame period, and a keyframe still waiting in the
detector's queue gives its place to a frame worth far more (`DetectorQueue`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol

from ...config import KeyframeConfig
from .keyframes import MAX_UNTRACKED_MOTION, MIN_CONFIDENCE, KeyframeResults

#: the tracker's signals raise a stream's worth at most this many times over
MAX_URGENCY = 4.0
#: a stream with no frame for this many of its frame periods (a camera that
#: stalled) does not hold the detector back from the others
STALL_PERIODS = 3.0
#: another stream's frame expected up to this share of its frame period after the
#: detector would start still counts against the frame in hand (frames of several cameras come in
#: bursts a few milliseconds wide; waiting that long for a better one costs the detector little)
ARRIVAL_SLACK = 0.25
#: a frame takes the place of a keyframe still waiting in the detector's queue when
#: it is worth at least this many times what that keyframe was worth when taken (twice: a keyframe
#: taken when due gives its place to a calm stream that has waited two intervals, and two streams
#: cannot take a place back and forth)
DISPLACE_RATIO = 2.0


@dataclass(eq=False)
class _Shared:
    """One stream's state in a `KeyframeChooser`."""

    period_s: float
    results: KeyframeResults  # its interval while the scene stays as it is, and its untracked motion
    since: int | None = None  # frames offered since its last keyframe (None: none yet)
    in_flight: bool = False  # its last keyframe is with the detector
    overdue: bool = False  # it is past its interval and has not been served yet
    seen: float = -math.inf  # when its newest frame was offered
    gap_s: float = 0.0  # the time to its next frame: its period, times one more than its newest skipped
    urgency: float = 1.0  # from its tracking signals, 1 to MAX_URGENCY
    deferred: int = 0  # times it went past its interval without a keyframe
    taken_worth: float = math.inf  # what its last keyframe was worth when taken (inf: a first frame, a cut)
    taken_since: int = 0  # frames between its last keyframe and the one before


class DetectorQueue(Protocol):
    """The detector's queue as the shared schedule sees it (the engine's `KeyframeQueue`)."""

    def waiting_streams(self) -> list[str]:
        """The streams whose keyframes wait in the queue, not started."""

    def start_in_s(self, withdrawn: int = 0) -> float:
        """Seconds until a keyframe submitted now would start, with `withdrawn` fewer waiting."""

    def withdraw(self, stream: str) -> bool:
        """Take the stream's waiting keyframe back (False: a batch took it meanwhile)."""


class KeyframeChooser:
    """One keyframe schedule for the live streams of an engine: which stream's frame goes to the
    detector next, by what each is worth.

    The engine `offer`s each live frame as it arrives, with its stream's tracking signals (after
    the stream's previous frame), whether the frame is a scene cut, and how soon the detector
    could start on it (`start_in_s`: 0 when idle). The frame becomes a keyframe when
    1. it is its stream's first, or a scene cut (then even if the detector is busy); or
    2. the detector can start on it within one frame period of its stream, its stream has no
       keyframe with the detector, at least `min_interval` frames have passed since its stream's
       last keyframe, and every other stream whose next frame is expected by the time the
       detector would start (its last frame's time plus its period times one more than the
       frames that frame skipped: a stream shed, or on keyframes only, comes that much later;
       less `ARRIVAL_SLACK` of a period) and is worth more could still start within its own frame
       period after this one (`unit_s`, the detector's time per keyframe, apart). A frame is never taken at the cost of
       a better one that comes a moment later, and never passed over while the detector has room
       for both (frames of many cameras come in bursts: a detector that took only the best of each
       burst would sit idle). A stream that has sent no frame for `STALL_PERIODS` times that long
       is not waited for; or
    3. the detector cannot start on it within the period, but could if one of the keyframes waiting
       in its queue, not started (`queue`), gave its place: then the one worth least gives it when
       this frame is worth at least `DISPLACE_RATIO` times what that one was worth when taken, and
       the conditions of 2. hold at the start it would get. The keyframe taken back goes out by
       motion, and its stream counts its frames since its keyframe before. Frames of several
       cameras come in step: without this, the streams offered first in each burst fill the queue
       and the one offered last finds it full at every frame.

    Worth: frames since the stream's last keyframe over its `interval` (1.0: due as a fixed
    schedule would have it), times an urgency from its tracking signals: confidence under 1
    (motion no longer follows the tracks: +1 at `MIN_CONFIDENCE`) and untracked motion grown since
    the last keyframe result (+1 at `MAX_UNTRACKED_MOTION`), at most `MAX_URGENCY` in all. With
    `adaptive`, a stream whose keyframes find nothing new (no track started, none lost) sees its
    interval stretched by `STRETCH` per such keyframe, up to `max_interval`, and reset by any other.
    So the detector runs as often as it can, on the streams that need it first; no keyframe waits
    in a busy one's queue longer than a frame period (it would come back stale): a stream past its
    interval waits for its turn (counted in `deferred`).

    Frames of a stream that were never offered (shed by the budget controller, or dropped on the
    way: `offer(..., skipped=n)`) count as frames since its last keyframe, so shedding frames leaves
    its keyframes as far apart in the source's frames (in time) as they were.

    `stretch` (set by the budget controller when the machine falls behind) multiplies both bounds:
    a stream is due after `interval x stretch` frames and gets no keyframe before
    `min_interval x stretch` (at least 2 frames apart once stretched), so the detector's load falls
    gently, and by as much as the controller asks.

    Example:
        >>> from types import SimpleNamespace as Signals
        >>> calm = Signals(confidence=1.0, untracked_motion=0.0, births=1, losses=0, keyframe=None)
        >>> chooser = KeyframeChooser(interval=4)
        >>> for name in ("a", "b"): chooser.add(name, period_s=1 / 30)
        >>> [chooser.offer(name, calm, now=0.0) for name in ("a", "b")]   # first frames
        ['first', 'first']
        >>> chooser.detected("a"); chooser.detected("b")
        >>> weak = Signals(confidence=0.5, untracked_motion=0.0, births=1, losses=0, keyframe=None)
        >>> [chooser.offer(name, signals, now=0.01, start_in_s=0.1)     # the detector is busy
        ...  for name, signals in (("a", calm), ("b", weak))]
        ['', '']
        >>> chooser.worth("a"), chooser.worth("b")                       # b's tracks drift: b first
        (0.5, 1.0)
        >>> chooser.offer("a", calm, now=0.05)                           # b's next frame is due now
        ''
        >>> chooser.offer("b", weak, now=0.05)                           # before its 4th frame
        'spare'
    """

    def __init__(self, interval: int = 1, *, adaptive: bool = False, max_interval: int | None = None,
                 min_interval: int = 1, min_confidence: float = MIN_CONFIDENCE,
                 max_untracked_motion: float = MAX_UNTRACKED_MOTION):
        if interval < 1 or not 1 <= min_interval <= interval:
            raise ValueError("need 1 <= min_interval <= interval")
        self.interval, self.min_interval = interval, min_interval
        #: without `adaptive` the interval never stretches: its longest is itself
        self.max_interval = max(interval, max_interval or interval) if adaptive else interval
        self.min_confidence, self.max_untracked_motion = min_confidence, max_untracked_motion
        #: a factor on every stream's interval: the budget controller's, set by the engine (see the class docs)
        self.stretch = 1.0
        self._streams: dict[str, _Shared] = {}

    def add(self, name: str, period_s: float) -> None:
        """A live stream, and the time between its frames (seconds)."""
        self._streams[name] = _Shared(period_s, KeyframeResults(self.interval, self.max_interval), gap_s=period_s)

    def remove(self, name: str) -> None:
        self._streams.pop(name, None)

    def detected(self, name: str) -> None:
        """The detector is done with the stream's keyframe (its detections are back, or it failed)."""
        if name in self._streams:
            self._streams[name].in_flight = False

    def deferred(self, name: str) -> int:
        """How many times the stream went past its interval and waited for the detector."""
        return self._streams[name].deferred if name in self._streams else 0

    def pace(self) -> float | None:
        """How far apart the detector's keyframes come, over what the scene asks: each stream's last
        two keyframes' frames apart over its interval, the mean over the streams (1.0: on schedule;
        3.0: every third keyframe due, the stretch the detector delivers); None before any has two."""
        gaps = [s.taken_since / s.results.current for s in list(self._streams.values()) if s.taken_since]
        return sum(gaps) / len(gaps) if gaps else None

    def worth(self, name: str) -> float:
        """What detecting the stream's next frame is worth (see the class docs), by its signals at
        its last offer; inf before its first."""
        s = self._streams[name]
        if s.since is None:
            return math.inf
        return (s.since + 1) / s.results.current * s.urgency

    def offer(self, name: str, signals=None, *, cut: bool = False, start_in_s: float = 0.0,
              now: float | None = None, skipped: int = 0, unit_s: float = math.inf,
              queue: DetectorQueue | None = None) -> str:
        """Whether the stream's frame now arriving is a keyframe: why it is ("first", "scene_cut",
        "interval" when due, "spare" before its time), or "" when it is not. `signals`: the stream's
        tracking signals (None: no tracker); `start_in_s`: seconds until the detector could start
        on a keyframe given now (`math.inf`: it cannot take one); `skipped`: the stream's frames
        since its last offer that were never offered (shed by the budget controller, or dropped on
        the way): they count as frames since its last keyframe, so shedding frames leaves the
        keyframes as far apart in time as they were; `unit_s`: the detector's learnt time for one
        more keyframe (`math.inf`: unknown), by which a frame worth less than one expected from
        another stream is still taken when the detector has room for both within a frame period;
        `queue`: the detector's queue, whose waiting keyframes may give their place to this frame
        (None: none does). The other streams are judged by their signals at their own last offer."""
        now = time.monotonic() if now is None else now
        s = self._streams[name]
        s.seen, s.gap_s = now, (skipped + 1) * s.period_s
        if s.since is not None:
            s.since += skipped
        if signals is not None:
            self._learn(s, signals)
        worth = self.worth(name)
        reason = ""
        if s.since is None:
            reason = "first"
        elif cut:
            reason = "scene_cut"
        elif not s.in_flight and s.since + 1 >= self._floor(s):
            if start_in_s <= s.period_s:
                taken = self._room(name, worth, now, start_in_s, unit_s)
            else:
                taken = queue is not None and self._displace(name, worth, now, unit_s, queue)
            if taken:
                reason = "interval" if s.since + 1 >= s.results.current * self.stretch else "spare"
        if reason:
            s.taken_worth = worth if reason in ("interval", "spare") else math.inf
            s.taken_since, s.since, s.in_flight, s.overdue = s.since or 0, 0, True, False
            return reason
        s.since += 1
        if not s.overdue and s.since >= s.results.current * self.stretch:
            s.overdue = True
            s.deferred += 1
        return ""

    def joinable_by(self, until: float) -> bool:
        """Whether a stream could still bring the detector a keyframe by `until` (time.monotonic()):
        one with no keyframe in flight, not stalled, past its fewest frames between keyframes, whose
        next frame is expected by then (less `ARRIVAL_SLACK` of a period): what `_expected` yields.
        The detector's batch stops waiting to fill when none could (graph/schedule/batcher.py). Read from the
        detector's thread: a stream added or removed meanwhile makes it answer True."""
        try:
            return any(True for _ in self._expected(None, time.monotonic(), until))
        except RuntimeError:  # the streams changed while it looked
            return True

    def _floor(self, s: _Shared) -> float:
        """The fewest frames between two of a stream's keyframes (scene cuts aside)."""
        if self.stretch <= 1.0:
            return self.min_interval
        return max(2, round(self.min_interval * self.stretch))

    def _room(self, name: str, worth: float, now: float, start_in_s: float, unit_s: float) -> bool:
        """Whether the detector may take the stream's frame now: every other stream expected by the
        time the detector would start (see `_expected`) that is worth more could still start within
        its frame period after it (each one keyframe of `unit_s` later), or none is worth more."""
        better = sorted(s.period_s for s, other in self._expected(name, now, now + start_in_s) if other > worth)
        return all(start_in_s + (rank + 1) * unit_s <= period for rank, period in enumerate(better))

    def _displace(self, name: str, worth: float, now: float, unit_s: float, queue: DetectorQueue) -> bool:
        """Whether the stream's frame takes the place of the keyframe waiting in the detector's queue
        that was worth least when taken (see the class docs, 3.); that keyframe is then taken back."""
        waiting = [(self._streams[w].taken_worth, w) for w in queue.waiting_streams()
                   if w != name and w in self._streams]
        if not waiting:
            return False
        least, victim = min(waiting)
        if worth < DISPLACE_RATIO * least:
            return False
        start = queue.start_in_s(1)
        if start > self._streams[name].period_s or not self._room(name, worth, now, start, unit_s):
            return False
        if not queue.withdraw(victim):  # a batch took it meanwhile
            return False
        v = self._streams[victim]
        v.in_flight, v.overdue = False, False
        v.since = v.taken_since + 1 + v.since  # its frames since its keyframe before, the one taken back too
        return True  # the engine counts it (`Lane.displaced_keyframes`) as it takes it back

    def _expected(self, name: str | None, now: float, start: float):
        """Every stream but `name` whose next frame is expected by `start` and could become a
        keyframe, with what that frame is worth."""
        for other, s in self._streams.items():
            # a stream shed 1 in 2, or on keyframes only, comes less often (`gap_s`)
            if other == name or s.in_flight or now - s.seen > STALL_PERIODS * s.gap_s:
                continue
            if s.seen + s.gap_s - s.period_s * ARRIVAL_SLACK > start:  # it would come after the detector started
                continue
            if s.since is not None and s.since + 1 < self._floor(s):
                continue
            yield s, self.worth(other)

    def _learn(self, s: _Shared, signals) -> None:
        """The stream's keyframe results (its interval, when adaptive) and the urgency of its signals."""
        s.results.learn(signals)
        boost = 0.0
        if signals.confidence < 1.0:
            boost += (1.0 - signals.confidence) / max(1e-6, 1.0 - self.min_confidence)
        grown = signals.untracked_motion - s.results.untracked_baseline
        if grown > 0:  # False for NaN
            boost += grown / self.max_untracked_motion
        s.urgency = min(MAX_URGENCY, 1.0 + boost)


def build_chooser(cfg: KeyframeConfig) -> KeyframeChooser | None:
    """The shared schedule of a pipeline file's live streams (None: `keyframes.shared: false`)."""
    if not cfg.shared:
        return None
    return KeyframeChooser(cfg.interval, adaptive=cfg.adaptive, max_interval=cfg.max_interval,
                           min_interval=cfg.min_interval)
