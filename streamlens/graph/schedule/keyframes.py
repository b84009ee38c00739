"""Which frames the detector sees: a per-stream keyframe schedule.

Two schedulers with the same face, `is_keyframe(frame=None, signals=None)`, called once per frame in
order (`build_scheduler` picks one from the `keyframes` section of a pipeline file):

- `KeyframeScheduler`: a fixed `interval`, every N-th frame of a stream; `offset` staggers streams so
  their keyframes do not all land on the same tick and pile up in the detector.
- `AdaptiveKeyframeScheduler` (`adaptive: true`): the same schedule, but it detects sooner when the
  scene asks for it (a scene cut, tracks the motion model no longer follows, motion where no track
  is), and later, up to `max_interval`, while keyframes find the scene unchanged.

Both have a `stretch` factor (1.0) on their intervals: the budget controller widens the intervals of
live streams with it when the machine falls behind (see `streamlens.graph.overload.control`).

Files use those per-stream schedules: their keyframes are the same on every run. Live streams
(`keyframes.shared: true`, the default) share one `KeyframeChooser` instead, in the engine
(graph/schedule/chooser.py), which reads the `KeyframeResults` and the signal thresholds defined here.

Example:
    >>> s = KeyframeScheduler(interval=3, offset=1)
    >>> [s.is_keyframe() for _ in range(8)]
    [True, True, False, False, True, False, False, True]
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from ...config import KeyframeConfig
from ...frame import Frame
from ...pictures import THUMBNAIL_WIDTH, thumbnail_step

#: adaptive: detect at once when the tracks' mean motion confidence falls below this (0 to 1)
MIN_CONFIDENCE = 0.5
#: adaptive: detect at once when more than this share of the frame outside every track moves
MAX_UNTRACKED_MOTION = 0.03
#: adaptive: after a keyframe that found nothing new and lost nothing, the interval grows by this factor
STRETCH = 1.5
#: scene cuts: the mean absolute difference (0-255) of two consecutive thumbnails that counts as a cut
CUT_DIFFERENCE = 30.0


class KeyframeScheduler:
    """Decides, frame by frame, whether the detector runs. The first frame of a stream always
    is a keyframe (a tracker knows nothing before it); the next one is frame `offset` (when
    non-zero), and from there every `interval`-th frame."""

    #: its choices do not wait for the tracker's signals (see AdaptiveKeyframeScheduler)
    reads_signals = False

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

    #: its choices do not wait for the tracker's signals (see AdaptiveKeyframeScheduler)
    reads_signals = False

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
