"""How far a stream's measured motion overstates (or understates) what its objects moved, learned from
its keyframes.

The decoder's motion vectors (`motion: mv`) do not say which reference frame a block came from
(FFmpeg exports only whether it was a past or a future one). An encoder with several reference
frames (x264's default `ref=3`; many software encoders) predicts some blocks from two or three
frames back, and their vectors read two or three frames' motion as one. The median of a box's
vectors is robust to a few of them, not to a steady share: on the shared highway clip (x264,
`ref=3`) the vectors read about 15% too far, and at 20 frames from a keyframe the boxes agreed with
the detector's at F1 0.44; the factor learned there is 0.87 (F1 0.63), on the same clip encoded with
one reference frame 1.005 (tools/results/mv_encoders.md).

Each keyframe tells how far the stream's objects really moved: a track matched on two keyframes
moved from the first detection to the second, and the tracker summed what the model measured in
between (`travel`). Each such match gives a factor (the detected displacement along the measured
one, over the measured one's length); `MotionScale` keeps the median of the stream's latest
`MATCHES`, drawn towards 1 while there are few (a median of `n` counts `n / (n + PRIOR_MATCHES)`),
and the tracker multiplies every later measurement by it. The median, not a mean: a match whose
box slipped off its object between keyframes (a walker's box left on the floor) says nothing of
the encoder. A stream whose encoder uses one reference frame and no B-frames learns a factor near 1
and keeps its boxes as they were; with B-frames the vectors tend to read short (their distance to the
reference is a guess, `sources.motion_vectors.ReferenceDistance`) and the factor is above 1.

Example:
    >>> scale = MotionScale()
    >>> scale.gain
    1.0
    >>> for _ in range(50):   # vectors read 20 px where the detector saw 16 px
    ...     scale.learn(np.array([[20.0, 0.0]]), np.array([[16.0, 0.0]]))
    >>> round(scale.gain, 2)    # 0.8, drawn a little towards 1 by the prior
    0.83
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: a match counts only when the measured travel since the track's last detection is at least this
#: long (source pixels): the detector's own jitter, a pixel or two of a box's centre, would
#: otherwise read as a scale
MIN_TRAVEL_PX = 6.0
#: a match whose measured travel and detected displacement differ by more than this factor either
#: way (or point apart) is a mismatch (an id that went to another object), not a scale: left out
MAX_RATIO = 3.0
#: the factor is the median of the latest this many matches' factors
MATCHES = 256
#: until then, it is drawn towards 1 as if this many matches had said 1
PRIOR_MATCHES = 10
#: a detection within this share of the frame's width (height) of its left or right (top or
#: bottom) edge may be cut by it (a detector's box stops a few pixels short of the edge): no anchor
EDGE = 0.02
#: the factor stays within these bounds
LOW, HIGH = 0.5, 1.5


class MotionScale:
    """The factor between the motion measured on a stream and the motion its keyframes show."""

    def __init__(self, enabled: bool = True):
        #: False: `learn` does nothing and the factor stays 1 (a motion model that does not learn one)
        self.enabled = enabled
        self._ratios: deque[float] = deque(maxlen=MATCHES)
        #: the factor now (1 until matches say otherwise)
        self.gain = 1.0
        #: matches that counted
        self.matches = 0

    @staticmethod
    def anchors(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
        """Where travel is measured from: the centres of `boxes` `(N, 4)`, NaN for a box at the
        frame's edge (cut by it, its centre moves with what is cut, not with the object)."""
        centres = (boxes[:, :2] + boxes[:, 2:]) / 2
        margin_x, margin_y = EDGE * width, EDGE * height
        cut = ((boxes[:, 0] <= margin_x) | (boxes[:, 1] <= margin_y) | (boxes[:, 2] >= width - margin_x)
               | (boxes[:, 3] >= height - margin_y))
        centres[cut] = np.nan
        return centres

    def learn(self, travel: np.ndarray, moved: np.ndarray) -> None:
        """Add matched tracks: what the model measured since each one's last detection, `travel`
        `(M, 2)`, and how far its detections moved, `moved` `(M, 2)`, in source pixels. A NaN row of
        either (a track only predicted for a while; a detection at the frame's edge) is not counted."""
        if not self.enabled:
            return
        travel = np.asarray(travel, np.float64).reshape(-1, 2)
        moved = np.asarray(moved, np.float64).reshape(-1, 2)
        squared = (travel * travel).sum(axis=1)
        along = (travel * moved).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = along / squared
        use = np.isfinite(ratio) & (squared >= MIN_TRAVEL_PX ** 2) & (ratio > 1 / MAX_RATIO) & (ratio < MAX_RATIO)
        if not use.any():
            return
        self._ratios.extend(ratio[use].tolist())
        self.matches += int(use.sum())
        count = len(self._ratios)
        median = float(np.median(np.fromiter(self._ratios, float, count)))
        self.gain = min(HIGH, max(LOW, 1.0 + (median - 1.0) * count / (count + PRIOR_MATCHES)))
