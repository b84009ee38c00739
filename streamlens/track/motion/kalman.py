"""`motion: kalman`: no pixels; between keyframes each box moves by its Kalman prediction alone.

The cheapest model, and the only one where there are no images (replaying MOTChallenge detections).
It suits objects that move steadily in front of a fixed camera; it drifts when they turn, stop or
when the camera moves.

Example:
    >>> import numpy as np
    >>> model = KalmanOnly()
    >>> model.observe(None) is None
    True
    >>> model.measure(None, None, np.zeros((2, 4))).quality.tolist()
    [nan, nan]
"""

from __future__ import annotations

import numpy as np

from .base import MotionEstimate, MotionModel


class KalmanOnly(MotionModel):
    """Measures nothing: the tracker's Kalman filter predicts every box."""

    name = "kalman"
    sees_pixels = False

    def observe(self, frame) -> None:
        return None

    def measure(self, previous, current, boxes: np.ndarray, untracked: bool = True) -> MotionEstimate:
        return MotionEstimate.nothing(len(boxes))
