"""Motion models: how a tracker moves its boxes between keyframes.

- `kalman` (`KalmanOnly`): prediction only, no pixels;
- `flow` (`SparseFlow`): Lucas-Kanade optical flow of points inside each box;
- `mv` (`MotionVectors`): the H.264/HEVC decoder's own motion vectors, nearly free.

Example:
    >>> build_motion("flow").name
    'flow'
"""

from __future__ import annotations

from .base import MotionEstimate, MotionModel
from .flow import SparseFlow
from .kalman import KalmanOnly
from .vectors import MotionVectors

MOTION_MODELS = {"kalman": KalmanOnly, "flow": SparseFlow, "mv": MotionVectors}


def build_motion(name: str, untracked: bool = False) -> MotionModel:
    """A new motion model by its pipeline-file name (`kalman`, `flow` or `mv`). `untracked`: also
    measure motion outside the tracks (for an adaptive keyframe schedule; `kalman` cannot)."""
    try:
        model = MOTION_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown motion model {name!r} (expected one of: {', '.join(MOTION_MODELS)})") from None
    return model(untracked=untracked) if name != "kalman" else model()


__all__ = ["MotionModel", "MotionEstimate", "KalmanOnly", "SparseFlow", "MotionVectors", "MOTION_MODELS",
           "build_motion"]
