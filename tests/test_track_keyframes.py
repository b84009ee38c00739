"""The keyframe schedulers' decisions: fixed intervals and staggering, and the adaptive schedule
(stretching while the scene is calm, detecting sooner on a scene cut, weak tracks or untracked
motion), fed with a real tracker's signals where it matters."""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import pytest

from streamlens.config import KeyframeConfig
from streamlens.frame import Frame
from streamlens.graph.schedule.keyframes import (AdaptiveKeyframeScheduler, KeyframeScheduler, SceneCutDetector,
                                        build_scheduler, stagger_offsets)
from streamlens.track import TrackingSignals


def keyframes(scheduler, frames: int, signals=None, images=None) -> list[int]:
    """Frame indices the scheduler picks; `signals(index, keys)` gives the tracker's signals."""
    picked = []
    for index in range(frames):
        frame = Frame("cam1", index, None, 0.0, images[index]) if images is not None else None
        if scheduler.is_keyframe(frame, signals(index, picked) if signals else None):
            picked.append(index)
    return picked


def calm(index, picked, births_at_first: int = 3) -> TrackingSignals:
    """A scene where the first keyframe starts tracks and nothing changes after."""
    last = picked[-1] if picked else None
    births = births_at_first if last == 0 else 0
    return TrackingSignals(confidence=1.0, untracked_motion=0.0, births=births, losses=0, keyframe=last, tracks=3)


# -- fixed ---------------------------------------------------------------------------------------------

def test_fixed_interval_with_offset_and_the_shared_call():
    assert keyframes(KeyframeScheduler(3), 10) == [0, 3, 6, 9]
    assert keyframes(KeyframeScheduler(3, offset=1), 10) == [0, 1, 4, 7]
    assert keyframes(KeyframeScheduler(1), 4) == [0, 1, 2, 3]
    scheduler = KeyframeScheduler(2)   # the adaptive scheduler's call works too, and changes nothing
    assert keyframes(scheduler, 6, signals=lambda i, k: TrackingSignals(confidence=0.0)) == [0, 2, 4]
    with pytest.raises(ValueError):
        KeyframeScheduler(0)


def test_stagger_offsets_spread_streams_over_one_interval():
    assert stagger_offsets(6, 3) == [0, 2, 4]
    schedules = [keyframes(KeyframeScheduler(6, off), 13) for off in stagger_offsets(6, 3)]
    assert schedules == [[0, 6, 12], [0, 2, 8], [0, 4, 10]]


def test_build_scheduler_follows_the_keyframes_section():
    assert type(build_scheduler(KeyframeConfig(interval=5))) is KeyframeScheduler
    adaptive = build_scheduler(KeyframeConfig(interval=5, adaptive=True, max_interval=20), offset=2)
    assert isinstance(adaptive, AdaptiveKeyframeScheduler) and (adaptive.interval, adaptive.max_interval) == (5, 20)


# -- adaptive --------------------------------------------------------------------------------------

def test_a_calm_scene_stretches_the_interval_up_to_max_interval():
    scheduler = AdaptiveKeyframeScheduler(interval=4, max_interval=12)
    picked = keyframes(scheduler, 60, calm)
    gaps = np.diff(picked).tolist()
    assert gaps[:4] == [4, 6, 9, 12] and set(gaps[3:]) == {12}


def test_new_or_lost_tracks_bring_the_interval_back():
    def busy_after_30(index, picked):
        signals = calm(index, picked)
        if picked and picked[-1] >= 30:
            signals = replace(signals, births=1)
        return signals

    gaps = np.diff(keyframes(AdaptiveKeyframeScheduler(interval=4, max_interval=12), 70, busy_after_30)).tolist()
    assert 12 in gaps and gaps[-3:] == [4, 4, 4]


def test_weak_tracks_and_untracked_motion_ask_for_a_keyframe_sooner():
    def weak_from_10(index, picked):
        return replace(calm(index, picked), confidence=0.3 if index >= 10 else 1.0)

    scheduler = AdaptiveKeyframeScheduler(interval=8, max_interval=16)
    assert keyframes(scheduler, 17, weak_from_10) == [0, 8, 12, 16]   # no sooner than min_gap (4) apart
    assert scheduler.reason == "confidence"

    def motion_at_5(index, picked):
        return replace(calm(index, picked), untracked_motion=0.2 if index == 5 else 0.0)

    scheduler = AdaptiveKeyframeScheduler(interval=8, max_interval=16)
    assert keyframes(scheduler, 12, motion_at_5) == [0, 5]
    assert scheduler.reason == "untracked_motion"

    def cannot_tell(index, picked):  # kalman motion: NaN, never a reason to detect
        return replace(calm(index, picked), untracked_motion=float("nan"))

    assert keyframes(AdaptiveKeyframeScheduler(interval=8, max_interval=8), 12, cannot_tell) == [0, 8]


def test_a_scene_cut_is_a_keyframe_at_once():
    images = [smooth_scene(3)] * 7 + [smooth_scene(4)] * 9
    scheduler = AdaptiveKeyframeScheduler(interval=5, max_interval=5)
    assert keyframes(scheduler, 16, calm, images) == [0, 5, 7, 12]
    assert scheduler.reason == "interval"


def smooth_scene(seed: int, height: int = 360, width: int = 640) -> np.ndarray:
    """A random but smooth picture (neighbouring pixels alike, as in real footage)."""
    coarse = np.random.default_rng(seed).integers(0, 255, (height // 20 + 2, width // 20 + 2, 3)).astype(np.float32)
    smooth = cv2.resize(coarse, (width + 40, height + 40), interpolation=cv2.INTER_CUBIC)[20:-20, 20:-20]
    return smooth.clip(0, 255).astype(np.uint8)


def test_scene_cuts_are_not_motion():
    """A truck entering a still scene, or a slow pan, is no cut; a jump to another scene is."""
    cuts = SceneCutDetector()
    scene = smooth_scene(1)
    assert not cuts.is_cut(scene)
    moved = scene.copy()
    moved[100:200, 100:300] = 255                       # a big white truck comes in
    assert not cuts.is_cut(moved)
    assert not cuts.is_cut(np.roll(moved, 3, axis=1))   # the camera pans a little
    assert cuts.is_cut(smooth_scene(2))                 # another scene


def test_the_adaptive_schedule_with_a_real_tracker():
    """Signals straight from a KeyframeTracker: a calm scene stretches the interval; a newcomer
    (a new track at a keyframe) brings it back."""
    import supervision as sv

    from streamlens.track import KeyframeTracker

    def scene(index):
        boxes = [[10 + index, 10, 50 + index, 90]] + ([[300, 100, 340, 180]] if index >= 40 else [])
        d = sv.Detections(xyxy=np.array(boxes, np.float32), confidence=np.full(len(boxes), 0.9, np.float32),
                          class_id=np.zeros(len(boxes), np.int64))
        d.data["class_name"] = np.array(["person"] * len(boxes), dtype=object)
        return d

    tracker, scheduler = KeyframeTracker("kalman", 30), AdaptiveKeyframeScheduler(interval=3, max_interval=9)
    blank = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (240, 400, 3))
    picked = []
    for index in range(60):
        frame = Frame("cam1", index, index / 30, 0.0, blank)
        if scheduler.is_keyframe(frame, tracker.signals):
            picked.append(index)
            tracker.update(frame, scene(index))
        else:
            tracker.propagate(frame)
    gaps = np.diff(picked).tolist()
    assert max(gaps) == 9
    after_newcomer = [g for k, g in zip(picked, gaps) if k >= 40]
    assert after_newcomer[0] <= 9 and 3 in after_newcomer


def test_steady_untracked_motion_does_not_ask_for_keyframes_again_and_again():
    """Motion the detector already saw and left alone (a class it does not report, say) is the
    baseline; only new motion on top of it brings a keyframe early."""
    from types import SimpleNamespace

    from streamlens.graph.schedule.keyframes import AdaptiveKeyframeScheduler

    s = AdaptiveKeyframeScheduler(interval=10, max_interval=10)
    signals = SimpleNamespace(confidence=1.0, untracked_motion=0.2, births=1, losses=0, keyframe=None)
    keys = []
    for index in range(30):
        if s.is_keyframe(None, signals):
            keys.append(index)
            signals.keyframe = index  # the tracker applied it: 20% of the frame still moves, untracked
        if index == 24:
            signals.untracked_motion = 0.3  # something new comes in
    assert keys == [0, 10, 20, 25], (keys, s.reason)
    assert s.reason == "untracked_motion"


def test_a_stretch_widens_both_schedules_and_holds_back_early_keyframes():
    fixed = KeyframeScheduler(interval=4)
    fixed.stretch = 2.0
    assert keyframes(fixed, 24) == [0, 8, 16]
    adaptive = AdaptiveKeyframeScheduler(interval=4, max_interval=12)
    adaptive.stretch = 2.0
    # weak tracks ask at once when unstretched (after min_gap, 2); stretched, not before half the
    # stretched interval: 4 while it is 4, then 6 and 9 as the calm scene stretches it (x1.5 each)
    weak = lambda index, picked: replace(calm(index, picked), confidence=0.2)  # noqa: E731
    assert keyframes(adaptive, 20, weak) == [0, 4, 10, 19]
    assert keyframes(AdaptiveKeyframeScheduler(interval=4, max_interval=12), 8, weak) == [0, 2, 4, 6]


def test_the_longest_gap_follows_the_adaptive_schedule():
    from streamlens.graph.schedule.keyframes import longest_gap

    assert longest_gap(KeyframeConfig(interval=5)) == 5
    assert longest_gap(KeyframeConfig(interval=5, adaptive=True, max_interval=15)) == 15
