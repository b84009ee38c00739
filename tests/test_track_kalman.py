"""The box Kalman filter: its four 2x2 blocks give exactly the textbook 8x8 filter, time is in
seconds, and measured motion moves a box without lag."""

from __future__ import annotations

import numpy as np
import pytest

from streamlens.track.kalman import CROSS, POS, RATE, BoxKalmanFilter


def full_covariance(cov: np.ndarray) -> np.ndarray:
    """The 8x8 covariance the (N, 3, 4) blocks stand for."""
    out = np.zeros((len(cov), 8, 8))
    for k in range(4):
        out[:, k, k], out[:, k, k + 4], out[:, k + 4, k], out[:, k + 4, k + 4] = (
            cov[:, POS, k], cov[:, CROSS, k], cov[:, CROSS, k], cov[:, RATE, k])
    return out


def textbook_step(kf: BoxKalmanFilter, mean, cov, dt, measured):
    """Predict and update with full matrices (F, Q, H, R as the module describes them)."""
    size = np.maximum(mean[2:4], 1.0)
    scale = np.concatenate([size, size])
    f = np.eye(8)
    f[range(4), range(4, 8)] = dt
    q = np.diag(np.concatenate([(kf.position_noise * scale) ** 2, (kf.velocity_noise * scale) ** 2]) * dt)
    mean, cov = f @ mean, f @ cov @ f.T + q
    h = np.eye(4, 8)
    r = np.diag((kf.measurement_noise * np.concatenate([np.maximum(mean[2:4], 1.0)] * 2)) ** 2)
    gain = cov @ h.T @ np.linalg.inv(h @ cov @ h.T + r)
    return mean + gain @ (measured - h @ mean), (np.eye(8) - gain @ h) @ cov


def test_the_blocks_are_the_full_filter():
    rng = np.random.default_rng(0)
    kf = BoxKalmanFilter()
    boxes = rng.uniform([50, 50, 10, 20], [500, 300, 80, 160], (5, 4))
    mean, cov = kf.initiate(boxes)
    full_mean, full_cov = mean[0].copy(), full_covariance(cov)[0]
    for step in range(12):
        dt = [1 / 30, 1 / 14, 0.2][step % 3]
        seen = boxes + rng.normal(0, 2, boxes.shape) + step * np.array([3.0, -1.0, 0.2, 0.4])
        mean, cov = kf.predict(mean, cov, dt)
        mean, cov = kf.update(mean, cov, seen)
        full_mean, full_cov = textbook_step(kf, full_mean, full_cov, dt, seen[0])
        np.testing.assert_allclose(mean[0], full_mean, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(full_covariance(cov)[0], full_cov, rtol=1e-9, atol=1e-9)


def test_velocity_is_per_second_whatever_the_frame_rate():
    kf = BoxKalmanFilter()
    for fps in (10, 30):
        mean, cov = kf.initiate(np.array([[100.0, 100.0, 20.0, 40.0]]))
        for i in range(1, 3 * fps):
            mean, cov = kf.predict(mean, cov, 1 / fps)
            mean, cov = kf.update(mean, cov, np.array([[100.0 + 60.0 * i / fps, 100.0, 20.0, 40.0]]))
        assert mean[0, 4] == pytest.approx(60.0, abs=2.0), fps


def test_measured_motion_moves_a_new_box_without_lag():
    """A new track knows no velocity; measured displacements move it all the same, and teach it."""
    kf = BoxKalmanFilter()
    mean, cov = kf.initiate(np.array([[100.0, 100.0, 40.0, 40.0]]))
    for _ in range(10):
        mean, cov = kf.move(mean, cov, np.array([[4.0, 0.0, np.nan, np.nan]]), 1 / 30, np.array([1.0]))
    assert mean[0, 0] == pytest.approx(140.0, abs=1.5)
    assert mean[0, 4] == pytest.approx(120.0, abs=10.0)           # 4 px a frame at 30 fps
    assert mean[0, 2:4].tolist() == pytest.approx([40.0, 40.0])   # size not measured: predicted


def test_measured_motion_is_fused_with_the_prediction_coordinate_by_coordinate():
    """`move` (compiled) against the fusion it stands for, written out with numpy: unmeasured
    coordinates are predicted; a measured displacement and the predicted one (velocity x dt) are
    combined by their variances, and so are the velocity and the measured displacement over dt."""
    rng = np.random.default_rng(1)
    kf = BoxKalmanFilter()
    mean, cov = kf.initiate(rng.uniform([50, 50, 10, 20], [500, 300, 80, 160], (6, 4)))
    mean[:, 4:] = rng.normal(0, 30, (6, 4))
    delta = rng.normal(0, 3, (6, 4))
    delta[rng.random((6, 4)) < 0.3] = np.nan
    noise = rng.uniform(0.5, 4, 6)
    for dt in (1 / 30, 0.2):
        got_mean, got_cov = kf.move(mean, cov, delta, dt, noise)
        predicted_mean, predicted_cov = kf.predict(mean, cov, dt)
        scale = np.tile(np.maximum(mean[:, 2:4], 1.0), 2)
        rate_var = predicted_cov[:, RATE]
        expected, observed = dt * mean[:, 4:], noise[:, None] ** 2
        expected_var = dt ** 2 * rate_var + dt * kf.position_noise ** 2 * scale ** 2
        fused = expected + expected_var / (expected_var + observed) * (delta - expected)
        gain = rate_var / (rate_var + observed / dt ** 2)
        want_mean = np.concatenate([mean[:, :4] + fused, mean[:, 4:] + gain * (delta / dt - mean[:, 4:])], axis=1)
        want_cov = np.stack([predicted_cov[:, POS], (1 - gain) * predicted_cov[:, CROSS], (1 - gain) * rate_var], axis=1)
        measured = np.isfinite(delta)
        want_mean = np.where(np.tile(measured, 2), want_mean, predicted_mean)
        want_mean[:, 2:4] = np.maximum(want_mean[:, 2:4], 1.0)
        want_cov = np.where(measured[:, None, :], want_cov, predicted_cov)
        np.testing.assert_allclose(got_mean, want_mean, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(got_cov, want_cov, rtol=1e-12, atol=1e-9)
    # no time passed: nothing to fuse, the prediction (which does not move) stands
    same_mean, _ = kf.move(mean, cov, delta, 0.0, noise)
    np.testing.assert_allclose(same_mean, kf.predict(mean, cov, 0.0)[0])


def test_across_a_gap_velocity_carries_a_box_only_the_horizon():
    """Ten seconds with nothing measured and a horizon of 0.4 s: the box moves 0.4 s at its velocity,
    not 10 s, while its uncertainty grows over the whole gap (more than over 0.4 s alone)."""
    kf = BoxKalmanFilter()
    mean, cov = kf.initiate(np.array([[100.0, 100.0, 40.0, 40.0]]))
    mean[0, 4:] = [30.0, -10.0, 0.0, 0.0]
    nothing = np.full((1, 4), np.nan)
    gap_mean, gap_cov = kf.move(mean, cov, nothing, 10.0, 1.0, horizon=0.4)
    short_mean, short_cov = kf.move(mean, cov, nothing, 0.4, 1.0)
    np.testing.assert_allclose(gap_mean, short_mean)
    np.testing.assert_allclose(gap_mean[0, :2], [112.0, 96.0])
    assert np.all(gap_cov[0, POS] > short_cov[0, POS]) and np.all(gap_cov[0, RATE] > short_cov[0, RATE])
    # a step within the horizon is the plain prediction
    np.testing.assert_allclose(kf.move(mean, cov, nothing, 0.2, 1.0, horizon=0.4)[0], kf.predict(mean, cov, 0.2)[0])
