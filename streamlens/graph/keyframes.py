"""Which frames the detector sees: a per-stream keyframe schedule.

Two schedulers with the same face, `is_keyframe(frame=None, signals=None)`, called once per frame in
order (`build_scheduler` picks one from the `keyframes` section of a pipeline file):

- `KeyframeScheduler`: a fixed `interval`, every N-th frame of a stream; `offset` staggers streams so
  their keyframes do not all land on the same tick and pile up in the detector.
- `AdaptiveKeyframeScheduler` (`adaptive: true`): the same schedule, but it detects sooner when the
  scene asks for it (a scene cut, tracks the motion model no longer follows, motion where no track
  is), and later, up to `max_interval`, while keyframes find the scene unchanged.

Both have a `stretch` factor (1.0) on their intervals: the budget controller widens the intervals of
live streams with it when the machine falls behind (see `streamlens.graph.control`).

Files use those per-stream schedules: their keyframes are the same on every run. Live streams
(`keyframes.shared: true`, the default) share one `KeyframeChooser` instead, in the engine: the
detector is the scarce resource, so whenever it is about to be free the stream whose next keyframe
is worth most gets it, and no keyframe waits behind a busy detector longer than a frame period.

Example:
    >>> s = KeyframeScheduler(interval=3, offset=1)
    >>> [s.is_keyframe() for _ in range(8)]
    [True, True, False, False, True, False, False, True]
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol

import cv2
import numpy as np

from ..config import KeyframeConfig
from ..frame import THUMBNAIL_WIDTH, Frame, thumbnail_step

#: adaptive: detect at once when the tracks' mean motion confidence falls below this (0 to 1)
MIN_CONFIDENCE = 0.5
#: adaptive: detect at once when more than this share of the frame outside every track moves
MAX_UNTRACKED_MOTION = 0.03
#: adaptive: after a keyframe that found nothing new and lost nothing, the interval grows by this factor
STRETCH = 1.5
#: shared schedule: the tracker's signals raise a stream's worth at most this many times over
MAX_URGENCY = 4.0
#: shared schedule: a stream with no frame for this many of its frame periods (a camera that
#: stalled) does not hold the detector back from the others
STALL_PERIODS = 3.0
#: shared schedule: another stream's frame expected up to this share of its frame period after the
#: detector would start still counts against the frame in hand (frames of several cameras come in
#: bursts a few milliseconds wide; waiting that long for a better one costs the detector little)
ARRIVAL_SLACK = 0.25
#: shared schedule: a frame takes the place of a keyframe still waiting in the detector's queue when
#: it is worth at least this many times what that keyframe was worth when taken (twice: a keyframe
#: taken when due gives its place to a calm stream that has waited two intervals, and two streams
#: cannot take a place back and forth)
DISPLACE_RATIO = 2.0
#: scene cuts: the mean absolute difference (0-255) of two consecutive thumbnails that counts as a cut
CUT_DIFFERENCE = 30.0


class KeyframeScheduler:
    """Decides, frame by frame, whether the detector runs. The first frame of a stream always
    is a keyframe (a tracker knows nothing before it); the next one is frame `offset` (when
    non-zero), and from there every `interval`-th frame."""

    def __init__(self, interval: int = 1, offset: int = 0):
        if interval < 1:
            raise ValueError("interval must be >= 1")
        self.interval = interval
        self._countdown = 0  # frames until the next keyframe
        self._offset = offset % interval
        #: why the last keyframe was chosen (for logs and tests)
        self.reason = ""
        #: a factor on the interval: the budget controller's, set by admission from its lane's view
        self.stretch = 1.0

    def is_keyframe(self, frame: Frame | None = None, signals=None) -> bool:
        """Call once per frame, in order. `frame` and `signals` are accepted and ignored, so the
        runtime calls every scheduler the same way."""
        if self._countdown == 0:
            self.reason = "first" if not self.reason else "interval"
            self._countdown = max(1, round(self.interval * self.stretch)) - 1
            if self._offset:  # the first keyframe is shifted only once
                self._countdown, self._offset = self._offset - 1, 0
            return True
        self._countdown -= 1
        return False


class AdaptiveKeyframeScheduler:
    """A keyframe schedule that follows the scene.

    On each frame, in this order:
    1. the first frame of a stream is a keyframe;
    2. a scene cut (the frame's thumbnail differs wholly from the previous one) is a keyframe;
    3. at least `min_gap` frames after the last keyframe (half the interval, so one restless track
       cannot make the detector run on every frame), the tracker's `signals` may ask for one: the
       tracks' motion confidence fell below `min_confidence`, or the share of the frame outside
       every track that moves grew by more than `max_untracked_motion` since the last keyframe
       result (something new may have come in; motion the detector already saw and left alone,
       such as objects of classes it does not report, does not ask again and again);
    4. otherwise a keyframe comes when `current` frames have passed since the last one. `current`
       starts at `interval`; each keyframe result that started no track and lost none (a stable
       scene) stretches it by half, up to `max_interval`; any other sends it back to `interval`.

    `signals` is the tracker's `TrackingSignals` after the previous frame (None: no tracker, and no
    adaptation beyond scene cuts). `offset` staggers the first keyframes as `KeyframeScheduler` does.

    Example:
        >>> from types import SimpleNamespace as Signals
        >>> s = AdaptiveKeyframeScheduler(interval=2, max_interval=6)
        >>> signals = Signals(confidence=1.0, untracked_motion=0.0, births=0, losses=0, keyframe=None)
        >>> keys = []
        >>> for index in range(20):
        ...     if s.is_keyframe(None, signals):      # then the tracker applies the keyframe's result:
        ...         keys.append(index)
        ...         signals.keyframe, signals.births = index, 3 if index == 0 else 0  # new tracks only at first
        >>> keys                                      # 2 apart, then a calm scene stretches it to 3, 5, 6
        [0, 2, 5, 10, 16]
        >>> signals.confidence = 0.2                  # motion no longer follows the tracks
        >>> [s.is_keyframe(None, signals) for _ in range(2)], s.reason
        ([True, True], 'confidence')
    """

    def __init__(self, interval: int = 1, max_interval: int = 15, offset: int = 0, *,
                 min_confidence: float = MIN_CONFIDENCE, max_untracked_motion: float = MAX_UNTRACKED_MOTION,
                 cut_difference: float = CUT_DIFFERENCE):
        if interval < 1 or max_interval < interval:
            raise ValueError("need 1 <= interval <= max_interval")
        self.interval, self.max_interval = interval, max_interval
        self.min_gap = max(1, interval // 2)
        self.min_confidence, self.max_untracked_motion = min_confidence, max_untracked_motion
        self._results = KeyframeResults(interval, max_interval)
        #: why the last keyframe was chosen: first, scene_cut, confidence, untracked_motion, interval
        self.reason = ""
        self._cuts = SceneCutDetector(cut_difference)
        self._since: int | None = None  # frames since the last keyframe
        self._offset = offset % interval
        #: a factor on `current`: the budget controller's, set by admission from its lane's view; while
        #: above 1, nothing comes early before half the stretched interval
        self.stretch = 1.0

    #: its choices read the tracker's signals: a file's frame is decided only once the one before it
    #: is tracked (graph/admit.py), so its keyframes are the same on every run
    reads_signals = True

    @property
    def current(self) -> int:
        """Frames between keyframes while the scene stays as it is."""
        return self._results.current

    def is_keyframe(self, frame: Frame | None = None, signals=None) -> bool:
        """Call once per frame, in order, before the frame is tracked."""
        cut = frame is not None and self._cuts.is_cut(frame.grey_sample(thumbnail_step(frame.width)))
        self._results.learn(signals)
        reason = self._reason(cut, signals)
        if reason:
            self.reason, self._since = reason, 0
            return True
        self._since += 1
        return False

    def _reason(self, cut: bool, signals) -> str:
        if self._since is None:
            return "first"
        if cut:
            return "scene_cut"
        due = self._offset or round(self.current * self.stretch)
        if self._since + 1 >= due:
            self._offset = 0
            return "interval"
        # stretched (the machine is behind), nothing comes early before half the stretched interval
        early = self.min_gap if self.stretch <= 1 else max(self.min_gap, round(self.current * self.stretch / 2))
        if signals is None or self._since + 1 < early:
            return ""
        if signals.confidence < self.min_confidence:
            return "confidence"
        if signals.untracked_motion - self._results.untracked_baseline > self.max_untracked_motion:  # not NaN
            return "untracked_motion"
        return ""


class KeyframeResults:
    """What a schedule learns from each keyframe result the tracker applied (`signals.keyframe`
    moved on): the untracked motion just after it, from which new motion is measured, and the
    interval: `current` grows by `STRETCH` per result that started no track and lost none (a stable
    scene), up to `max_interval`, and any other result sends it back to `interval`.

    Example:
        >>> from types import SimpleNamespace as Signals
        >>> results = KeyframeResults(interval=4, max_interval=10)
        >>> for k in range(4): results.learn(Signals(keyframe=k, births=0, losses=0, untracked_motion=0.01))
        >>> results.current, results.untracked_baseline
        (10, 0.01)
    """

    def __init__(self, interval: int, max_interval: int):
        self.interval, self.max_interval = interval, max_interval
        self.current = interval
        self.untracked_baseline = 0.0
        self._seen: int | None = None

    def learn(self, signals) -> None:
        """Call with the tracker's signals (None: no tracker) as often as wanted: each keyframe
        result counts once."""
        if signals is None or signals.keyframe is None or signals.keyframe == self._seen:
            return
        self._seen = signals.keyframe
        if signals.untracked_motion == signals.untracked_motion:  # not NaN
            self.untracked_baseline = signals.untracked_motion
        if signals.births == 0 and signals.losses == 0:
            self.current = min(self.max_interval, math.ceil(self.current * STRETCH))
        else:
            self.current = self.interval


class SceneCutDetector:
    """Tells a scene cut from a frame's thumbnail: the mean absolute difference of its grey image
    (luma, or the green channel), shrunk to `THUMBNAIL_WIDTH` pixels wide, from the previous frame's.
    A cut changes nearly every thumbnail pixel; motion, even a pan over the same scene, changes few
    of them, and little. `is_cut` takes a grey image (a sample of every few pixels is plenty: the
    runtime passes `Frame.grey_sample(thumbnail_step(width))`, about twice the thumbnail's width, which
    it then halves by area averaging: about 0.05 ms on a 720p frame; a frame from a decode worker
    brings that sample made already, see `YuvPicture`) or a BGR one.

    Example:
        >>> cuts = SceneCutDetector()
        >>> dark, bright = np.full((72, 128, 3), 20, np.uint8), np.full((72, 128, 3), 200, np.uint8)
        >>> [cuts.is_cut(image) for image in (dark, dark, bright, bright)]
        [False, False, True, False]
    """

    def __init__(self, difference: float = CUT_DIFFERENCE):
        self.difference = difference
        self._previous: np.ndarray | None = None

    def is_cut(self, image: np.ndarray) -> bool:
        if image is None or image.size == 0:
            return False
        thumbnail = grey_thumbnail(image[:, :, 1] if image.ndim == 3 else image)
        previous, self._previous = self._previous, thumbnail
        if previous is None or previous.shape != thumbnail.shape:
            return False
        return float(np.abs(thumbnail - previous).mean()) > self.difference


def grey_thumbnail(grey: np.ndarray) -> np.ndarray:
    """`grey` shrunk to about THUMBNAIL_WIDTH wide by area averaging (a small shift changes it little)."""
    width = min(THUMBNAIL_WIDTH, grey.shape[1])
    height = max(1, round(grey.shape[0] * width / grey.shape[1]))
    return cv2.resize(np.ascontiguousarray(grey), (width, height), interpolation=cv2.INTER_AREA).astype(np.float32)


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
    displaced: int = 0  # its keyframes that gave their place in the detector's queue to one worth more


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

    def displaced(self, name: str) -> int:
        """How many of the stream's keyframes gave their place in the detector's queue to one worth more."""
        return self._streams[name].displaced if name in self._streams else 0

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
        The detector's batch stops waiting to fill when none could (graph/batcher.py). Read from the
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
        waiting = [(self._streams[w].taken_worth, w) for w in queue.waiting_streams() if w != name and w in self._streams]
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
        v.displaced += 1
        return True

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


def build_scheduler(cfg: KeyframeConfig, offset: int = 0) -> KeyframeScheduler | AdaptiveKeyframeScheduler:
    """The scheduler for a pipeline file's `keyframes` section, for one stream."""
    if cfg.adaptive:
        return AdaptiveKeyframeScheduler(cfg.interval, cfg.max_interval, offset)
    return KeyframeScheduler(cfg.interval, offset)


def longest_gap(cfg: KeyframeConfig) -> int:
    """The most frames a schedule lets pass between two keyframes (before any stretch)."""
    return cfg.max_interval if cfg.adaptive else cfg.interval


def stagger_offsets(interval: int, streams: int) -> list[int]:
    """Offsets that spread `streams` keyframe schedules evenly over one interval."""
    return [(i * interval) // max(streams, 1) for i in range(streams)]
