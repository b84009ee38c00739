"""The tracker's per-frame step, compiled (track/kernels.py: step_rows, carry_tracks, in_view_rows,
shown_boxes), gives exactly what its numpy formulation gives: the boxes every subscriber receives
must not move by a bit because the arithmetic was compiled. The numpy code below is the tracker's
as it was before (commit fb6f9ad), kept here as the reference."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from streamlens.frame import MIN_BOX_PX
from streamlens.track.kalman import MIN_SIZE, BoxKalmanFilter, xywh_to_xyxy
from streamlens.track.kernels import carry_tracks, in_view_rows, shown_boxes, step_rows
from streamlens.track.tracker import TrackingSignals
from streamlens.track.tracks import CONFIRMED, LOST, MIN_VISIBLE, REMOVED, TENTATIVE


def _tracks(rng: np.random.Generator, n: int, width: int, height: int):
    """`n` tracks: boxes inside, across the edges of and outside a frame, every state, lost ones
    missing for a while."""
    means = np.zeros((n, 8))
    means[:, 0] = rng.uniform(-0.2 * width, 1.2 * width, n)
    means[:, 1] = rng.uniform(-0.2 * height, 1.2 * height, n)
    means[:, 2] = rng.choice([0.5, 1.0, 3.0, 40.0, 200.0], n) * rng.uniform(0.8, 1.2, n)
    means[:, 3] = rng.choice([0.5, 1.0, 3.0, 40.0, 200.0], n) * rng.uniform(0.8, 1.2, n)
    means[:, 4:] = rng.normal(0, 30, (n, 4))
    covs = rng.uniform(0.1, 50.0, (n, 3, 4))
    states = rng.choice([TENTATIVE, CONFIRMED, LOST, REMOVED], n).astype(np.int8)
    born = rng.uniform(0.0, 5.0, n)
    last_seen = born + rng.uniform(0.0, 3.0, n)
    return means, covs, states, born, last_seen


def _coasting(states, last_seen, born, now, keep_s):
    return (states == LOST) & (now - last_seen <= np.minimum(keep_s, last_seen - born))


@pytest.mark.parametrize("seed", range(12))
def test_the_compiled_step_is_the_numpy_arithmetic_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    width, height = 1280, 720
    n = int(rng.integers(0, 12))
    means, covs, states, born, last_seen = _tracks(rng, n, width, height)
    now, follow_s = 6.0, float(rng.choice([0.4, 1.0, 10.0]))

    # which tracks motion follows, a lost box holding its size, the followed boxes
    shown = (states == TENTATIVE) | (states == CONFIRMED) | _coasting(states, last_seen, born, now, follow_s)
    expected_means = means.copy()
    expected_means[states == LOST, 6:8] = 0.0
    visible = np.flatnonzero(shown)
    held, followed, boxes = step_rows(means, states, last_seen, born, now, follow_s)
    assert np.array_equal(held, expected_means) and np.array_equal(followed, visible)
    assert np.array_equal(boxes, xywh_to_xyxy(expected_means[visible, :4]))

    # what a motion model measured: shifts and growths, some not measured (NaN), a camera or none
    v = len(visible)
    shift = rng.normal(0, 5, (v, 2))
    shift[rng.random(v) < 0.3] = np.nan
    growth = np.where(rng.random(v) < 0.5, np.nan, rng.uniform(0.9, 1.1, v))
    noise = np.full(v, 2.0)
    quality = np.where(rng.random(v) < 0.3, np.nan, rng.uniform(0, 1.5, v))
    camera = np.full(2, np.nan) if seed % 3 == 0 else rng.normal(0, 3, 2)
    gain = 1.0 if seed % 2 else 0.8
    dt, horizon, lost_s = 1 / 30, 10 / 30, 2.0
    travel = rng.normal(0, 10, (n, 2))
    motion_quality = rng.uniform(0, 1, n)
    decay = math.exp(-dt / lost_s)
    kalman = BoxKalmanFilter()

    # the numpy formulation (fb6f9ad's MotionEstimate.rescale and deltas, the tracker's _move, MotionScale.travelled)
    scaled, cam = (shift * gain, camera * gain) if gain != 1.0 else (shift, camera)
    delta = np.full((n, 4), np.nan)
    delta[visible] = np.concatenate([scaled, expected_means[visible, 2:4] * (growth[:, None] - 1.0)], axis=1)
    sigma = np.ones(n)
    sigma[visible] = noise
    has_camera = bool(np.isfinite(cam).all())
    if has_camera:
        delta[:, :2] -= cam
    ref_means, ref_covs = kalman.move(expected_means, covs, delta, dt, sigma, horizon)
    if has_camera:
        ref_means[:, :2] += cam
    step = np.full_like(travel, np.nan)
    stepped = ref_means[:, :2] - expected_means[:, :2]
    step[visible] = np.where(np.isfinite(shift), shift, stepped[visible] / gain)
    ref_travel = travel + step
    ref_quality = motion_quality.copy()
    ref_quality[visible] = np.where(np.isfinite(quality), np.minimum(quality, 1.0), ref_quality[visible] * decay)

    out = carry_tracks(held, covs, followed, shift, growth, noise, quality, camera, gain, dt, horizon,
                       kalman.position_noise, kalman.velocity_noise, MIN_SIZE, travel, motion_quality, decay, True)
    for got, want in zip(out, (ref_means, ref_covs, ref_travel, ref_quality)):
        assert np.array_equal(got, want, equal_nan=True)
    kept = carry_tracks(held, covs, followed, shift, growth, noise, quality, camera, gain, dt, horizon,
                        kalman.position_noise, kalman.velocity_noise, MIN_SIZE, travel, motion_quality, decay, False)[2]
    assert np.array_equal(kept, travel)  # a model that learns no factor leaves travel as it was

    # which boxes stay in view (TrackTable.in_view)
    centre, half = means[:, :2], means[:, 2:4] / 2
    seen = np.minimum(centre + half, (width, height)) - np.maximum(centre - half, 0.0)
    in_view = (seen >= MIN_BOX_PX).all(axis=1) & (seen.prod(axis=1) >= MIN_VISIBLE * means[:, 2] * means[:, 3])
    assert np.array_equal(in_view_rows(means, width, height, MIN_BOX_PX, MIN_VISIBLE), in_view)

    # what is shown, clipped to the frame (KeyframeTracker.objects_of, base.clip_to_frame)
    coast_s = float(rng.choice([0.0, 0.5, 2.0]))
    rows = (states == CONFIRMED) | (states == TENTATIVE) | _coasting(states, last_seen, born, now, coast_s)
    clipped = np.array(xywh_to_xyxy(means[:, :4]), np.float32)
    np.maximum(clipped, 0.0, out=clipped)
    np.minimum(clipped, (width, height, width, height), out=clipped)
    big = (clipped[:, 2] - clipped[:, 0] >= MIN_BOX_PX) & (clipped[:, 3] - clipped[:, 1] >= MIN_BOX_PX)
    got_boxes, got_rows, any_shown = shown_boxes(means, states, last_seen, born, now, coast_s, width, height,
                                                 MIN_BOX_PX)
    assert any_shown == bool(rows.any())
    assert np.array_equal(got_rows, rows & big) and np.array_equal(got_boxes[got_rows], clipped[rows & big])


def test_the_kernels_number_the_states_as_the_track_table_does():
    from streamlens.track import kernels

    assert (kernels._TENTATIVE, kernels._CONFIRMED, kernels._LOST) == (TENTATIVE, CONFIRMED, LOST)


def test_a_box_that_is_not_finite_is_out_of_view_as_numpy_says():
    means = np.array([[np.nan, 10.0, 5.0, 5.0, 0, 0, 0, 0], [np.inf, 10.0, 5.0, 5.0, 0, 0, 0, 0],
                      [50.0, 10.0, np.inf, 5.0, 0, 0, 0, 0], [50.0, 10.0, 5.0, 5.0, 0, 0, 0, 0]])
    assert in_view_rows(means, 100, 100, MIN_BOX_PX, MIN_VISIBLE).tolist() == [False, False, False, True]


def test_the_signals_an_admission_reads_are_a_copy_of_every_field():
    signals = TrackingSignals(confidence=0.4, untracked_motion=0.2, births=3, losses=2, keyframe=17, tracks=5)
    assert all(getattr(signals, f.name) != f.default for f in dataclasses.fields(TrackingSignals))
    copy = signals.copy()
    assert copy == signals and copy is not signals
    signals.births = 9  # the tracker goes on; the copy an admission holds does not change
    assert copy.births == 3


def test_a_lost_track_is_followed_and_shown_up_to_its_limit_and_no_longer():
    """Lost 0.5 s at a limit of 0.5 s: still followed and shown; a moment longer, or lost longer than
    it had been seen before, not (the limits are inclusive, as the numpy formulation's `<=`)."""
    means = np.tile([[100.0, 100.0, 20.0, 20.0, 0, 0, 0, 0]], (3, 1))
    states = np.array([LOST, LOST, LOST], np.int8)
    last_seen = np.array([5.5, 5.25, 5.5])
    born = np.array([4.0, 4.0, 5.25])  # the third was seen for 0.25 s before it was lost
    _, followed, _ = step_rows(means, states, last_seen, born, 6.0, 0.5)
    _, rows, _ = shown_boxes(means, states, last_seen, born, 6.0, 0.5, 640, 480, MIN_BOX_PX)
    assert followed.tolist() == [0] and rows.tolist() == [True, False, False]
