"""`motion: flow`: sparse optical flow inside each box (pyramidal Lucas-Kanade on a small grey image).

Per frame the model keeps a small grey copy of the frame: the green channel (close to luma, and
grey is all Lucas-Kanade looks at) of every n-th pixel, n the smallest whole step that makes it at
most `work_width` wide (1280 -> 427, 1920 -> 480). Between two frames it follows a 3x3 grid of
points in the central part of each box (the part most likely to be the object, not the background
around it). A point Lucas-Kanade loses, or whose patch matches much worse than the others' of its
box (an error above twice their median: it slid onto an edge or was covered), is dropped. A box
moves by the median motion of its points (as in Kalal's Median Flow) and grows or shrinks as they
spread apart or draw together. A box with fewer than `MIN_POINTS` good points is not measured (the Kalman
prediction carries it). A coarse grid over the whole frame (`CAMERA_GRID`, or `BACKGROUND_GRID` when
untracked motion is measured too) is followed as well: the median motion of its good points is the
camera's (`MotionEstimate.camera`, BoT-SORT's global motion, translation only), by which the tracker
moves every track.

Choices, measured on the highway clip with tools/bench_track.py (agreement with the detector run
on every frame, and milliseconds): Lucas-Kanade's cost is mostly per point (about 3 us each here)
plus the image pyramids; a forward-backward check (Median Flow's) doubled it for no gain in
agreement, and a 4x4 grid or a 640-wide image (or a smoothed shrink instead of a pixel step)
agreed no better than 3x3 at about 430 wide.

Example:
    >>> import numpy as np
    >>> from streamlens.frame import Frame
    >>> rng = np.random.default_rng(0)
    >>> texture = (rng.random((120, 160)) * 255).astype(np.uint8)
    >>> image = np.dstack([np.kron(texture, np.ones((2, 2), np.uint8))] * 3)   # 320x240
    >>> moved = np.roll(image, 4, axis=1)                                      # 4 px to the right
    >>> model = SparseFlow()
    >>> a, b = (model.observe(Frame("cam", i, None, 0.0, im)) for i, im in enumerate([image, moved]))
    >>> estimate = model.measure(a, b, np.array([[100.0, 100.0, 140.0, 160.0]]))
    >>> estimate.shift.round(1).tolist(), estimate.growth.round(2).tolist()
    ([[4.0, 0.0]], [1.0])
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from ...frame import Frame
from .base import MotionEstimate, MotionModel, inner_boxes, median_rows, moving_share

#: the grey image flow runs on is at most this wide (a whole step of the frame's pixels)
WORK_WIDTH = 480
#: points per box: a GRID x GRID grid over the central INNER share of the box
GRID = 3
INNER = 0.6
#: Lucas-Kanade window (pixels of the work image) and pyramid levels above the image: this follows up
#: to about 15 work pixels (45 source pixels of a 1280-wide frame) a frame
WINDOW = 9
LEVELS = 2
#: a point whose patch error exceeds this many times the median error of its box's points is dropped
MAX_ERROR_RATIO = 2.0
MIN_POINTS = 3
#: a box may grow or shrink by at most this factor from one frame to the next
MAX_SCALE_STEP = 1.25
#: the whole-frame grid for untracked motion, and how far (work pixels) a point must move to count
BACKGROUND_GRID = (16, 9)
#: the whole-frame grid for the camera's motion alone: a median needs only a few dozen points
CAMERA_GRID = (8, 5)
MIN_BACKGROUND_MOTION = 1.0
#: the standard deviation of a box's median flow, work-image pixels (Lucas-Kanade is sub-pixel precise
#: on texture; some points sit on background). Measured on the highway clip: 0.5 to 2 agree about
#: equally with the detector; above 1 a new object's box (velocity not known yet) falls behind it.
NOISE = 1.0

_CRITERIA = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 10, 0.03)


@dataclass(slots=True)
class GreyFrame:
    """What the flow model keeps of a frame: its small grey image and its scale (1 / the step)."""

    grey: np.ndarray
    scale: float  # work pixels per source pixel


class SparseFlow(MotionModel):
    """Boxes follow the Lucas-Kanade flow of a grid of points inside them."""

    name = "flow"

    def __init__(self, work_width: int = WORK_WIDTH, grid: int = GRID, untracked: bool = False):
        self.work_width = work_width
        self.grid = grid
        #: follow a grid over the whole frame too, to measure `untracked_motion` (adaptive keyframes)
        self.untracked = untracked
        self._background: np.ndarray | None = None  # the whole-frame grid, work pixels
        self._background_shape: tuple[int, int] | None = None

    def observe(self, frame: Frame) -> GreyFrame | None:
        if frame.width == 0 or frame.height == 0:
            return None
        step = max(1, -(-frame.width // self.work_width))
        return GreyFrame(np.ascontiguousarray(frame.grey_sample(step)), 1.0 / step)

    def measure(self, previous: GreyFrame | None, current: GreyFrame | None, boxes: np.ndarray,
                untracked: bool = True) -> MotionEstimate:
        if previous is None or current is None or previous.grey.shape != current.grey.shape:
            return MotionEstimate.nothing(len(boxes))
        scale = current.scale
        box_points = _grid_points(inner_boxes(boxes, INNER), self.grid) * scale  # (B, G*G, 2)
        untracked = self.untracked and untracked
        background = self._background_points(current.grey.shape, BACKGROUND_GRID if self.untracked else CAMERA_GRID)
        start = np.concatenate([box_points.reshape(-1, 2), background]).astype(np.float32)
        end, good = _track_points(previous.grey, current.grey, start, len(boxes), self.grid ** 2)
        per_box = len(boxes) * self.grid ** 2
        motion = (end - start) / scale  # source pixels
        estimate = _move_boxes(boxes, box_points / scale, motion[:per_box], good[:per_box], self.grid)
        estimate.noise[:] = NOISE / scale
        bg_good = good[per_box:]
        if bg_good.sum() >= MIN_POINTS:
            estimate.camera = np.median(motion[per_box:][bg_good], axis=0)
        if untracked:
            estimate.untracked_motion = moving_share(background[bg_good], motion[per_box:][bg_good], boxes * scale,
                                                     MIN_BACKGROUND_MOTION / scale)
        return estimate

    def _background_points(self, shape: tuple[int, int], grid: tuple[int, int]) -> np.ndarray:
        if self._background_shape != shape:
            h, w = shape
            cols, rows = grid
            xs = (np.arange(cols) + 0.5) * w / cols
            ys = (np.arange(rows) + 0.5) * h / rows
            self._background = np.stack(np.meshgrid(xs, ys), axis=-1).reshape(-1, 2).astype(np.float32)
            self._background_shape = shape
        return self._background


def _grid_points(boxes: np.ndarray, grid: int) -> np.ndarray:
    """A `grid` x `grid` lattice of points inside each box: `(B, grid*grid, 2)`."""
    steps = (np.arange(grid) + 0.5) / grid
    fx, fy = np.meshgrid(steps, steps)
    fractions = np.stack([fx.ravel(), fy.ravel()], axis=1)  # (G*G, 2)
    size = boxes[:, 2:] - boxes[:, :2]
    return boxes[:, None, :2] + fractions[None] * size[:, None]


def _track_points(previous: np.ndarray, current: np.ndarray, start: np.ndarray, boxes: int,
                  per_box: int) -> tuple[np.ndarray, np.ndarray]:
    """Lucas-Kanade from `previous` to `current`; `(end points, mask of the points followed well)`.
    `start` holds `per_box` points of each of `boxes` boxes, then the whole-frame grid: each box's
    points, and the grid's, are judged against their own median error (a still background or a
    still object matches far better than a moving one, which must not lose its points for that)."""
    if len(start) == 0:
        return start, np.zeros(0, bool)
    end, found, error = cv2.calcOpticalFlowPyrLK(previous, current, start.reshape(-1, 1, 2), None,
                                                 winSize=(WINDOW, WINDOW), maxLevel=LEVELS, criteria=_CRITERIA)
    found = found.ravel().astype(bool)
    with np.errstate(invalid="ignore"):  # a point Lucas-Kanade lost may have a NaN error
        error = np.where(found, error.ravel(), np.nan)
        limit = np.zeros(len(found))
        split = boxes * per_box
        if boxes:
            limit[:split] = np.repeat(MAX_ERROR_RATIO * median_rows(error[:split].reshape(boxes, per_box)), per_box)
        rest = error[split:]
        if np.isfinite(rest).any():
            limit[split:] = MAX_ERROR_RATIO * np.nanmedian(rest)
        return end.reshape(-1, 2), found & (error <= limit)  # False where NaN


def _move_boxes(boxes: np.ndarray, points: np.ndarray, motion: np.ndarray, good: np.ndarray,
                grid: int) -> MotionEstimate:
    """Each box's shift (the median motion of its good points) and growth (how its points spread);
    boxes with too few good points are left unmeasured (NaN)."""
    count = len(boxes)
    good = good.reshape(count, grid * grid)
    estimate = MotionEstimate.nothing(count)
    estimate.quality[:] = good.mean(axis=1) if count else []
    rows = np.flatnonzero(good.sum(axis=1) >= MIN_POINTS)
    if len(rows):
        mask = good[rows, :, None]
        start = np.where(mask, points[rows], np.nan)
        end = start + np.where(mask, motion.reshape(count, grid * grid, 2)[rows], np.nan)
        estimate.shift[rows] = median_rows(end - start)
        estimate.growth[rows] = _median_growth(start, end)
    return estimate


def _median_growth(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per box, how much its points spread out (> 1) or drew together: the ratio of their mean
    distance to their centre after and before (NaN points ignored; 1 when they are too few or too
    close together to tell)."""
    valid = ~np.isnan(start[..., 0])
    count = np.maximum(valid.sum(axis=1), 1)[:, None]
    spreads = []
    for points in (start, end):
        filled = np.where(valid[..., None], points, 0.0)
        centre = filled.sum(axis=1, keepdims=True) / count[..., None]
        distance = np.hypot(*(filled - centre).transpose(2, 0, 1))
        spreads.append(np.where(valid, distance, 0.0).sum(axis=1) / count[:, 0])
    before, after = spreads
    usable = (before > 1.0) & (valid.sum(axis=1) >= MIN_POINTS)
    growth = np.where(usable, after / np.where(usable, before, 1.0), 1.0)
    return np.clip(growth, 1 / MAX_SCALE_STEP, MAX_SCALE_STEP)
