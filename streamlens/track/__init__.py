"""Trackers: ids that stay with objects, and boxes on the frames between keyframes.

- `KeyframeTracker` (`tracker: {motion: kalman | flow | mv}`): ByteTrack-style association on
  keyframes, every object carried by motion in between, late keyframe results caught up;
- `PassThrough` (`tracker: none`): the detector's boxes as they are, id -1, nothing in between.

Example:
    >>> from streamlens.config import TrackerConfig
    >>> tracker = build_tracker(TrackerConfig(motion="mv"), fps=30, detector_conf=0.3)
    >>> type(tracker).__name__, tracker.high_score, tracker.new_track_score, tracker.motion.name
    ('KeyframeTracker', 0.3, 0.3, 'mv')
    >>> type(build_tracker(TrackerConfig(motion=None), fps=30)).__name__
    'PassThrough'
"""

from __future__ import annotations

from ..config import TrackerConfig
from .base import PassThrough, Tracker
from .motion import build_motion
from .tracker import KeyframeTracker, TrackingSignals


def build_tracker(cfg: TrackerConfig, fps: float | None, *, detector_conf: float | None = None,
                  adaptive: bool = False) -> Tracker:
    """One tracker for one stream.

    `fps` is the stream's frame rate when known (used when frames carry no time stamps).
    `detector_conf` is the detector's confidence threshold: unless the pipeline file sets
    `tracker.high_score` / `new_track_score`, every box the detector reports is confident and may
    start a track (the user's `conf` says what an object is; the tracker's own 0.3 / 0.5 assume a
    detector that reports everything down to 0.1). `adaptive`: the keyframe schedule is adaptive, so
    the motion model also measures motion outside the tracks (a little more work per frame).
    """
    if cfg.motion is None:
        return PassThrough()
    return KeyframeTracker(build_motion(cfg.motion, untracked=adaptive), fps, **tracker_options(cfg, detector_conf))


def weak_floor(cfg: TrackerConfig | None) -> float | None:
    """The score down to which a pipeline's detector reports boxes for this tracker's second stage
    (`tracker.low_score`); None without a tracker (`tracker: none`).

    Example:
        >>> weak_floor(TrackerConfig(motion="mv")), weak_floor(TrackerConfig(motion=None))
        (0.1, None)
    """
    if cfg is None or cfg.motion is None:
        return None
    return cfg.low_score


def tracker_options(cfg: TrackerConfig, detector_conf: float | None = None) -> dict[str, float | bool]:
    """`KeyframeTracker` keyword arguments from the `tracker` section: the confident scores default
    to the detector's `conf`, the rest are the section's (its defaults are config/tracker.py's).

    Example:
        >>> options = tracker_options(TrackerConfig(motion="kalman", lost_s=3.0), detector_conf=0.25)
        >>> options  # doctest: +NORMALIZE_WHITESPACE
        {'high_score': 0.25, 'new_track_score': 0.25, 'low_score': 0.1, 'lost_s': 3.0, 'coast_s': 0.0,
         'appearance': False}
    """
    options: dict[str, float | bool] = {}
    high = cfg.high_score if cfg.high_score is not None else detector_conf
    if high is not None:
        options["high_score"] = high
        options["new_track_score"] = cfg.new_track_score if cfg.new_track_score is not None else high
    elif cfg.new_track_score is not None:
        options["new_track_score"] = cfg.new_track_score
    options["low_score"] = cfg.low_score if high is None else min(cfg.low_score, high)
    options["lost_s"], options["coast_s"], options["appearance"] = cfg.lost_s, cfg.coast_s, cfg.appearance
    return options


__all__ = ["Tracker", "PassThrough", "KeyframeTracker", "TrackingSignals", "build_tracker", "tracker_options",
           "weak_floor"]
