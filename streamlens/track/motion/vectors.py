"""`motion: mv`: the motion vectors the H.264/HEVC decoder already computed, nearly free.

The source exports them (`FileSource(export_mvs=True)`: FFmpeg's `flags2=+export_mvs`, side data
`MOTION_VECTORS`, see `streamlens.sources.motion_vectors`) as `Frame.motion_vectors`,
a float32 array with one row per coded block: `x, y, dx, dy` = the block's centre on this frame and
how far its content moved per decoded frame, in source pixels (sub-pixel precision). When frames
were dropped between two the tracker sees (`max_fps`), the motion is multiplied by the gap.

A box moves by the median motion of the vectors whose blocks came from its central part on the
previous frame (a box's rim is often background). The encoder chose each vector to compress well,
not to follow the object, so single vectors lie (flat areas, blocks predicted from two or three
frames back); the median of many does not. It grows or shrinks as the vectors that moved with that
median spread out or draw together (`INLIER_PX`, `MAX_GROWTH`; a box with too few keeps the size
the Kalman filter predicts). A frame without vectors (an I-frame, or a source that does not export
them), a box with fewer than `MIN_VECTORS`, or one whose central part has vectors from the past for
fewer than `MIN_COVERAGE` of its blocks (the rest coded without one: the few left are often the
background seen through it) falls back to the Kalman prediction. The measurement is
fused with the box's predicted motion by their uncertainties (`NOISE`, see `BoxKalmanFilter.move`).
An encoder with several reference frames makes the vectors of a steady share of blocks read two or
three frames' motion as one (FFmpeg does not say which reference a block used): the tracker
learns, per stream, the factor its keyframes show and takes the shifts at it (`learns_scale`,
`scale.py`).

The median of the whole frame's vectors (an even sample of about `UNTRACKED_SAMPLE`) is the camera's
motion (`MotionEstimate.camera`: the background fills most of a frame); the tracker moves every track
by it, those it cannot measure too. A frame without vectors repeats the frame before's camera motion
(a pan does not stop for an I-frame). With `untracked=True`, the vectors outside every box that move
differently from it measure `untracked_motion`.

Example:
    >>> from streamlens.frame import Frame
    >>> blocks = [(x, y) for x in range(8, 320, 16) for y in range(8, 240, 16)]
    >>> vectors = np.array([(x, y, 5.0, 0.0) if 100 <= x < 160 and 100 <= y < 160 else (x, y, 0.0, 0.0)
    ...                     for x, y in blocks], np.float32)   # a 60x60 object moved 5 px right
    >>> frame = Frame("cam1", 1, None, 0.0, np.zeros((240, 320, 3), np.uint8), motion_vectors=vectors)
    >>> model = MotionVectors()
    >>> model.measure(None, model.observe(frame), np.array([[95.0, 100.0, 155.0, 160.0]])).shift.tolist()
    [[5.0, 0.0]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...frame import Frame
from ...sources.motion_vectors import vectors_from_side_data
from ..kernels import box_motion, field_of, order_vectors, sample_median
from .base import MotionEstimate, MotionModel, moving_share

#: the central share of a box whose vectors count
INNER = 0.6
#: a box needs at least this many vectors to be measured
MIN_VECTORS = 2
#: ... and vectors for at least this share of the blocks of its central part: where an object moves
#: fast, or turns, the encoder codes most of its blocks without a vector from the past (intra, or
#: from a future frame in a B-frame), and the few left are often the background seen through it,
#: whose zero motion would stop the box. Below it the box is not measured: the Kalman prediction
#: carries it
MIN_COVERAGE = 0.3
#: blocks per square pixel expected in a box where every block is coded with a vector (16x16 blocks)
BLOCK_AREA = 256.0
#: how far (source pixels) a block outside every box must move to count as untracked motion
MIN_BACKGROUND_MOTION = 1.0
#: about how many vectors (of some 3,600 on a 720p frame) measure `untracked_motion`
UNTRACKED_SAMPLE = 1024
#: a box's growth is measured on the vectors within this many source pixels of its median motion
#: (those that moved with the object: a vector from a block two frames back, or from the background,
#: would read as a spread); 4 quarter pixels, the vectors' precision
INLIER_PX = 1.0
#: a box may grow or shrink by at most this factor from one frame to the next (as with `flow`)
MAX_GROWTH = 1.25
#: the standard deviation of a box's median vector, source pixels: vectors are quarter-pixel precise
#: but chosen to compress, block by block, and some point two or three frames back. Measured on the
#: highway clip: 1 to 5 px agree about equally with the detector; above 3 a new object's box (whose
#: velocity is not known yet) starts to fall behind it.
NOISE = 3.0


@dataclass(slots=True)
class VectorField:
    """What the mv model keeps of a frame: its motion vectors ordered by the whole pixel column each
    block was at on the previous frame (left to right), so the vectors of a box are found by bisection."""

    index: int           # the frame's index
    start: np.ndarray    # (N, 2) float32 x, y of each block on the previous frame, in the order of `column`
    motion: np.ndarray   # (N, 2) float32 dx, dy per decoded frame
    column: np.ndarray | None = None  # (N,) int16: start x truncated to whole pixels, ascending
    camera: np.ndarray | None = None  # the median motion of the whole frame, once measured

    def sort(self) -> None:
        """Order the vectors by `column` (compiled: a counting sort)."""
        self.start, self.motion, self.column = order_vectors(np.ascontiguousarray(self.start, np.float32),
                                                             np.ascontiguousarray(self.motion, np.float32))


class MotionVectors(MotionModel):
    """Boxes follow the median of the decoder's motion vectors inside them."""

    name = "mv"
    learns_scale = True  # blocks predicted from two or three frames back read as one (scale.py)

    def __init__(self, untracked: bool = False):
        #: measure `untracked_motion` too (for an adaptive keyframe schedule)
        self.untracked = untracked

    def observe(self, frame: Frame) -> VectorField:
        vectors = frame.motion_vectors
        if vectors is None:  # an I-frame, or a source without vectors: kept for its index
            vectors = np.empty((0, 4), np.float32)
        elif vectors.dtype.names:  # FFmpeg's raw records from a source that did not convert them
            vectors = vectors_from_side_data(vectors)
        return VectorField(frame.index, *field_of(vectors))

    def measure(self, previous, current: VectorField | None, boxes: np.ndarray,
                untracked: bool = True) -> MotionEstimate:
        # vectors give motion per decoded frame; frames dropped on the way (max_fps) moved too
        frames = max(1, current.index - previous.index) if isinstance(previous, VectorField) and current else 1
        if current is None or len(current.motion) == 0:
            estimate = MotionEstimate.nothing(len(boxes))
            if isinstance(previous, VectorField) and previous.camera is not None:
                estimate.camera = previous.camera * frames
                if current is not None:
                    current.camera = previous.camera
            return estimate
        if current.column is None:  # a field made elsewhere: order it by whole pixel columns now
            current.sort()
        boxes = np.ascontiguousarray(boxes, dtype=np.float64)
        shift, quality, growth = box_motion(current.start, current.motion, current.column, boxes, INNER,
                                            MIN_VECTORS, BLOCK_AREA, INLIER_PX, MAX_GROWTH, MIN_COVERAGE)
        if frames > 1:
            shift *= frames
            growth **= frames
        # the camera's motion and the untracked share: an even sample of about UNTRACKED_SAMPLE vectors
        step = max(1, len(current.start) // UNTRACKED_SAMPLE)
        if current.camera is None:  # the same for every box: kept for a replay over this frame
            current.camera = sample_median(current.motion, step)
        estimate = MotionEstimate(shift=shift, growth=growth, noise=np.full(len(boxes), NOISE),
                                  quality=quality, camera=current.camera * frames)
        if self.untracked and untracked:
            estimate.untracked_motion = moving_share(current.start, current.motion, boxes, MIN_BACKGROUND_MOTION,
                                                     current.camera, step)
        return estimate
