"""A Kalman filter for boxes, run on every track of a stream at once.

The state of a track is its box centre, width and height and their rates of change:
`[cx, cy, w, h, vx, vy, vw, vh]`, a constant-velocity model as in SORT, ByteTrack and BoT-SORT
(BoT-SORT's choice of width rather than aspect ratio: a box's width then follows the object, which
matters when a camera pans or an object turns).

Two choices make the filter behave the same whatever the frame rate and the keyframe interval:
- Time is in seconds and velocities in pixels per second. `predict(dt)` takes the time since the last
  step, so a 14 fps sequence, a 30 fps one, or a stream that dropped frames all move boxes the same.
- Process noise is a random walk: its variance grows in proportion to `dt`. The constants are
  ByteTrack's at 30 fps (position 1/20, velocity 1/160 of a box size per frame), restated per
  second: position 0.274 and velocity 1.03 box sizes per square root of a second.

Noise scales with the box: x and w with the box's width, y and h with its height, so a far small
pedestrian and a near large truck are held to the same relative precision. Measurement noise of a
detector's box (1/20 of a box size) is ByteTrack's. Three steps: `predict` (no measurement),
`update` (a detector's box: where the object is) and `move` (measured motion between two frames:
how far it went, see there).

With diagonal noise and each coordinate moved only by its own rate, the 8x8 covariance of this model
never couples different coordinates: it is four independent 2x2 blocks (a coordinate and its rate).
The filter keeps just those, `cov` `(N, 3, 4)` = position variance, position-rate covariance and rate
variance per coordinate, and runs in a dozen element-wise operations for all tracks; the result is
exactly the full filter's.

Example:
    >>> import numpy as np
    >>> kf = BoxKalmanFilter()
    >>> mean, cov = kf.initiate(np.array([[100.0, 50.0, 20.0, 40.0]]))
    >>> for t in range(1, 11):  # the box moves 30 px/s to the right, seen at 10 fps
    ...     mean, cov = kf.predict(mean, cov, 0.1)
    ...     mean, cov = kf.update(mean, cov, np.array([[100.0 + 3.0 * t, 50.0, 20.0, 40.0]]))
    >>> round(float(mean[0, 4]))  # it has learnt the velocity
    30
"""

from __future__ import annotations

import numpy as np

from .kernels import kalman_move

#: ByteTrack's per-frame noise at 30 fps, restated per second (see the module's docs)
POSITION_NOISE = 0.274   # box sizes per sqrt(second)
VELOCITY_NOISE = 1.03    # box sizes per second per sqrt(second)
MEASUREMENT_NOISE = 1 / 20   # box sizes
#: how unsure a new track is of its box (in measurement-noise units) and of its velocity (box sizes
#: per second; ByteTrack: 10 * 1/160 of a box size per frame at 30 fps)
INITIAL_POSITION_FACTOR = 2.0
INITIAL_VELOCITY = 1.875
#: width and height never shrink below this (pixels), so noise never collapses to zero
MIN_SIZE = 1.0

#: rows of a covariance `(N, 3, 4)`: per coordinate, var(position), cov(position, rate), var(rate)
POS, CROSS, RATE = 0, 1, 2


def xyxy_to_xywh(boxes: np.ndarray) -> np.ndarray:
    """Corner boxes `(x1, y1, x2, y2)` to centre boxes `(cx, cy, w, h)`.

    Example:
        >>> xyxy_to_xywh(np.array([[0.0, 0.0, 10.0, 20.0]])).tolist()
        [[5.0, 10.0, 10.0, 20.0]]
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    out = np.empty_like(boxes)
    out[:, 2:] = boxes[:, 2:] - boxes[:, :2]
    out[:, :2] = boxes[:, :2] + out[:, 2:] / 2
    return out


def xywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """Centre boxes `(cx, cy, w, h)` to corner boxes `(x1, y1, x2, y2)`.

    Example:
        >>> xywh_to_xyxy(np.array([[5.0, 10.0, 10.0, 20.0]])).tolist()
        [[0.0, 0.0, 10.0, 20.0]]
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    out = np.empty_like(boxes)
    out[:, :2] = boxes[:, :2] - boxes[:, 2:] / 2
    out[:, 2:] = out[:, :2] + boxes[:, 2:]
    return out


class BoxKalmanFilter:
    """Constant-velocity Kalman filter on `(cx, cy, w, h)` for many boxes at once.

    Every method takes and returns stacked arrays: means `(N, 8)` and covariances `(N, 3, 4)` (see
    the module's docs); inputs are never modified.
    """

    def __init__(self, position_noise: float = POSITION_NOISE, velocity_noise: float = VELOCITY_NOISE,
                 measurement_noise: float = MEASUREMENT_NOISE):
        self.position_noise = position_noise
        self.velocity_noise = velocity_noise
        self.measurement_noise = measurement_noise

    def initiate(self, boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """New tracks from measured boxes `(N, 4)` in `(cx, cy, w, h)`: at rest, unsure of velocity."""
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        mean = np.concatenate([boxes, np.zeros_like(boxes)], axis=1)
        scale = _box_scale(boxes)
        cov = np.zeros((len(boxes), 3, 4))
        cov[:, POS] = (INITIAL_POSITION_FACTOR * self.measurement_noise * scale) ** 2
        cov[:, RATE] = (INITIAL_VELOCITY * scale) ** 2
        return mean, cov

    def predict(self, mean: np.ndarray, cov: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """Move every box `dt` seconds ahead."""
        if len(mean) == 0:
            return mean, cov
        scale_sq = _box_scale(mean) ** 2
        mean = mean.copy()
        mean[:, :4] += dt * mean[:, 4:]
        pos, cross, rate = cov[:, POS], cov[:, CROSS], cov[:, RATE]
        cov = np.stack([pos + dt * (2 * cross + dt * rate) + dt * self.position_noise ** 2 * scale_sq,
                        cross + dt * rate,
                        rate + dt * self.velocity_noise ** 2 * scale_sq], axis=1)
        np.maximum(mean[:, 2:4], MIN_SIZE, out=mean[:, 2:4])
        return mean, cov

    def update(self, mean: np.ndarray, cov: np.ndarray, boxes: np.ndarray,
               noise_factor: float | np.ndarray = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Correct every box with a measured box `(N, 4)` in `(cx, cy, w, h)`.

        `noise_factor` multiplies the measurement noise's standard deviation: a scalar, one value per
        box `(N,)`, or one per box and coordinate `(N, 4)`. A very large factor on a coordinate means
        "not measured" (the measurement of that coordinate is all but ignored).
        """
        if len(mean) == 0:
            return mean, cov
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        factor = np.asarray(noise_factor, dtype=np.float64)
        factor = factor[:, None] if factor.ndim == 1 else factor
        measurement_var = (self.measurement_noise * factor) ** 2 * _box_scale(mean) ** 2
        pos, cross, rate = cov[:, POS], cov[:, CROSS], cov[:, RATE]
        innovation_var = pos + measurement_var
        gain_pos, gain_rate = pos / innovation_var, cross / innovation_var
        innovation = boxes - mean[:, :4]
        mean = np.concatenate([mean[:, :4] + gain_pos * innovation, mean[:, 4:] + gain_rate * innovation], axis=1)
        cov = np.stack([(1 - gain_pos) * pos, (1 - gain_pos) * cross, rate - gain_rate * cross], axis=1)
        np.maximum(mean[:, 2:4], MIN_SIZE, out=mean[:, 2:4])
        return mean, cov

    def distance(self, mean: np.ndarray, cov: np.ndarray, boxes: np.ndarray) -> np.ndarray:
        """The squared Mahalanobis distance `(N, M)` of every measured box `(M, 4)` in `(cx, cy, w, h)`
        from every box's prediction (`mean`, `cov`: N tracks): how many standard deviations of what
        the filter expects (its uncertainty of where the box is, plus a detector's own noise) the box
        is away, summed over the four coordinates. A box the filter knows little about (a new track's
        velocity, a long time since its last measurement) is far from few boxes.

        Example:
            >>> kf = BoxKalmanFilter()
            >>> mean, cov = kf.initiate(np.array([[100.0, 50.0, 20.0, 40.0]]))
            >>> near, far = kf.distance(mean, cov, np.array([[102.0, 50, 20, 40], [140.0, 50, 20, 40]]))[0]
            >>> bool(near < 1 < 100 < far)
            True
        """
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        variance = cov[:, POS] + (self.measurement_noise * _box_scale(mean)) ** 2  # (N, 4)
        offset = boxes[None, :, :] - mean[:, None, :4]
        return (offset ** 2 / variance[:, None, :]).sum(axis=2)

    def move(self, mean: np.ndarray, cov: np.ndarray, delta: np.ndarray, dt: float,
             noise: float | np.ndarray = 1.0, horizon: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Move every box `dt` seconds ahead by measured motion: `delta` `(N, 4)` is how far each
        coordinate (cx, cy, w, h) moved, NaN where it was not measured (those coordinates are predicted
        as by `predict`); `noise` the standard deviation of a measured displacement, pixels (per box).

        A measured displacement is relative to where the box was, so it is fused with the predicted
        displacement (velocity x dt), not with the predicted position: the uncertainty of where the box
        was is common to both and must not make the measurement look better than it is (fusing "last
        box + displacement" as an absolute measurement lets the box fall further behind at every step
        while the velocity is still unknown). A new track, whose velocity is unknown, follows the
        measurement; a steady one smooths it a little. The velocity is corrected by the measured
        displacement over `dt` in the same way. (Compiled, `kernels.kalman_move`: it runs every frame.)

        `horizon` (seconds, default `dt`) bounds how far the velocity is carried forward: across a
        longer step (a gap in the stream) a box moves by velocity x `horizon` while its uncertainty
        grows over the whole `dt`. Constant velocity is a guess for a fraction of a second, not for
        the length of an outage.
        """
        mean = np.ascontiguousarray(mean, dtype=np.float64)
        if len(mean) == 0:
            return mean, cov
        noise = (np.full(len(mean), noise, dtype=np.float64) if np.ndim(noise) == 0
                 else np.ascontiguousarray(noise, dtype=np.float64))
        return kalman_move(mean, np.ascontiguousarray(cov, dtype=np.float64),
                           np.ascontiguousarray(delta, dtype=np.float64), float(dt),
                           float(dt if horizon is None else horizon), noise,
                           float(self.position_noise), float(self.velocity_noise), MIN_SIZE)


def _box_scale(state: np.ndarray) -> np.ndarray:
    """Per box, the size each coordinate's noise scales with: `(w, h, w, h)`."""
    size = np.maximum(state[:, 2:4], MIN_SIZE)
    return np.concatenate([size, size], axis=1)
