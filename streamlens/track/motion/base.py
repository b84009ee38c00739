"""What every motion model is: where the boxes of one frame went on the next.

A motion model is split in two, so that the tracker can replay motion when a late keyframe result
re-anchors its tracks (the frames after it are caught up from what was kept):
- `observe(frame)` keeps what the model needs of a frame (a small grey image, the decoder's motion
  vectors, or nothing) and returns it as the frame's *record*;
- `measure(previous, current, boxes)` says where `boxes` (on the previous frame) are on the current
  frame, from the two frames' records only. It is a pure function of its inputs.

Example:
    >>> import numpy as np
    >>> from streamlens.track.motion import KalmanOnly
    >>> estimate = KalmanOnly().measure(None, None, np.array([[0.0, 0.0, 10.0, 10.0]]))
    >>> bool(np.isnan(estimate.shift).all())  # no pixels: nothing measured, the filter predicts
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...frame import Frame
from ..kernels import moving_outside, sample_median


@dataclass(slots=True)
class MotionEstimate:
    """What a motion model measured between two frames, per box.

    - `shift` `(N, 2)`: how far the box's centre moved, source pixels; a row of NaN where the model
      could not tell (the tracker then keeps the Kalman prediction for that box);
    - `growth` `(N,)`: the factor its width and height changed by; NaN where not measured (a model
      that sees only translation);
    - `noise` `(N,)`: the standard deviation of a measured displacement, source pixels (it weighs the
      measurement against the box's predicted motion, and how fast its velocity follows);
    - `quality` `(N,)` 0 to 1: how well the model followed each box (the share of its points or
      vectors it could use); NaN when the model had nothing to go on this frame;
    - `untracked_motion`: the share of the frame outside every box that moved (camera motion
      discounted), 0 to 1; NaN when the model cannot tell. A hint that a new object appeared;
    - `camera` `(2,)`: how far the picture as a whole moved (the median motion over the frame: the
      background's, which a moving camera shifts), source pixels; NaN when the model cannot tell.
      The tracker moves every track by it, measured or not (camera motion compensation).
    """

    shift: np.ndarray
    growth: np.ndarray
    noise: np.ndarray
    quality: np.ndarray
    untracked_motion: float = float("nan")
    camera: np.ndarray = field(default_factory=lambda: np.full(2, np.nan))

    @classmethod
    def nothing(cls, count: int) -> MotionEstimate:
        """No measurement for any of `count` boxes."""
        return cls(shift=np.full((count, 2), np.nan), growth=np.full(count, np.nan), noise=np.ones(count),
                   quality=np.full(count, np.nan))


class MotionModel:
    """How a tracker moves its boxes from one frame to the next. One instance per stream."""

    #: the name used in the pipeline file (`tracker: {motion: NAME}`)
    name: str = ""
    #: whether the model measures anything from the frames (False: boxes move by prediction alone)
    sees_pixels: bool = True
    #: whether what it measures may overstate motion by a stream's own factor, which the tracker then
    #: learns from its keyframes (`scale.MotionScale`)
    learns_scale: bool = False

    def observe(self, frame: Frame) -> object | None:
        """What to keep of `frame` to measure motion into and out of it later."""
        raise NotImplementedError

    def measure(self, previous: object | None, current: object | None, boxes: np.ndarray,
                untracked: bool = True) -> MotionEstimate:
        """Where `boxes` `(N, 4)` of the previous frame are on the current one. `untracked=False`:
        leave `untracked_motion` unmeasured (a replay needs it only on its last frame)."""
        raise NotImplementedError


def inner_boxes(boxes: np.ndarray, keep: float) -> np.ndarray:
    """The central part of each box: `keep` of its width and height around its centre.

    Example:
        >>> inner_boxes(np.array([[0.0, 0.0, 10.0, 20.0]]), 0.5).tolist()
        [[2.5, 5.0, 7.5, 15.0]]
    """
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    half = (boxes[:, 2:] - boxes[:, :2]) * keep / 2
    return np.hstack([centre - half, centre + half])


#: for `moving_share`, a box grown by this share of its size on every side: its own edge often
#: moves with it
OUTSIDE_GROW = 0.1


def moving_share(points: np.ndarray, motion: np.ndarray, boxes: np.ndarray, min_motion: float,
                 camera: np.ndarray | None = None, step: int = 1) -> float:
    """Of every `step`-th sample point `(P, 2)` outside every box `(B, 4)` (each grown by
    `OUTSIDE_GROW`), the share whose motion `(P, 2)` differs from the camera's by at least
    `min_motion` pixels; the camera's motion is `camera`, else the median of the samples. 0 when
    no sample lies outside. Compiled (`kernels.moving_outside`): it runs on every frame.

    Example:
        >>> points = np.array([[5.0, 5.0]] * 2 + [[50.0, 50.0]] * 10)
        >>> motion = np.array([[9.0, 0.0]] * 2 + [[0.0, 0.0]] * 8 + [[5.0, 0.0]] * 2)
        >>> moving_share(points, motion, np.array([[0.0, 0.0, 10.0, 10.0]]), 1.0)
        0.2
    """
    points = np.ascontiguousarray(points, dtype=np.float32)
    motion = np.ascontiguousarray(motion, dtype=np.float32)
    if camera is None:
        camera = sample_median(motion, step)
    return moving_outside(points, motion, step, np.ascontiguousarray(boxes, dtype=np.float64), OUTSIDE_GROW,
                          camera, min_motion)


def median_rows(values: np.ndarray) -> np.ndarray:
    """The median along axis 1 of `values` `(B, K, ...)`, NaN ignored (NaN where a row has none):
    a sort instead of `np.nanmedian`, which is slow on many small rows.

    Example:
        >>> median_rows(np.array([[1.0, 5.0, np.nan, 2.0], [np.nan] * 4])).tolist()
        [2.0, nan]
    """
    ordered = np.sort(values, axis=1)  # NaN sort last
    count = (~np.isnan(values)).sum(axis=1, keepdims=True)
    low = np.take_along_axis(ordered, np.maximum((count - 1) // 2, 0), axis=1)
    high = np.take_along_axis(ordered, np.maximum(count // 2, 0), axis=1)
    return np.where(count > 0, (low + high) / 2, np.nan).squeeze(1)
