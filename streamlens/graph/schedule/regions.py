"""Detection where things move: which part of a keyframe the detector looks at (`detector.regions`).

With `regions: motion`, each stream has a `RegionPlanner`. When the engine sends a keyframe to the
detector, the planner chooses what of it the detector sees:

- the whole frame on the stream's first keyframe, after a jump in its time stamps or a change of
  its size, and whenever `full_s` seconds of the stream have passed since the last whole frame, so
  that objects that came in and stood still where nothing was tracked are still found;
- otherwise one rectangle: every thumbnail cell whose grey level changed by more than
  `change_level` since the stream's previous keyframe (the scene-cut sample, which every source
  brings: see `Frame.grey_sample`), joined with every box the tracker still holds (objects that
  stopped moving, and lost tracks that may still be there: `Tracker.held_boxes`), grown by
  `margin` of the frame's shorter side on every side, clipped to the frame;
- the whole frame again when that rectangle covers more than `max_share` of it (a scene cut, a
  camera that moves, a busy scene: there is little to save);
- nothing (a rectangle of no area, the detector is not run and finds no box) when nothing changed
  and nothing is tracked.

The detector places the rectangle into its input as `InputSpec.region_geometry` says (at the whole
frame's scale, in a smaller input, for a model that runs at any size: `resize: bucket`) and maps
its boxes back to frame pixels. The difference is taken against the previous keyframe, not the
previous frame: whatever changed since the detector last looked is inside the rectangle, however
many frames ago it moved.

The constants are the point that tools/bench_regions.py's rule (F1 within 0.01 of whole keyframes on
every clip, the least detector time) chooses on all the shared clips; judged by leaving one clip out
the rule does not keep F1 on every clip, which is why `regions` is off by default
(tools/results/regions.md).

Example:
    >>> import numpy as np
    >>> from streamlens.frame import Frame
    >>> planner = RegionPlanner(full_s=10.0)
    >>> still = np.full((360, 640, 3), 80, np.uint8)
    >>> moved = still.copy(); moved[100:160, 300:380] = 200            # something came in
    >>> held = np.empty((0, 4), np.float32)
    >>> planner.plan(Frame("cam", 0, 0.0, 0.0, still), held), planner.reason  # the first: whole frame
    (None, 'first')
    >>> planner.plan(Frame("cam", 5, 0.2, 0.0, moved), held), planner.reason
    ((264, 64, 416, 196), 'motion')
    >>> planner.plan(Frame("cam", 10, 0.4, 0.0, moved), held), planner.reason  # nothing new, nothing held
    ((0, 0, 0, 0), 'empty')
"""

from __future__ import annotations

import math

import numpy as np

from ...frame import Frame
from ...pictures import thumbnail_step
from .keyframes import grey_thumbnail

#: a thumbnail cell (`THUMBNAIL_WIDTH`: about 1/64 of the frame's width, area-averaged) counts as changed when its grey
#: level moved by more than this (0-255) since the stream's previous keyframe
CHANGE_LEVEL = 12.0
#: the rectangle grows by this share of the frame's shorter side on every side (context: an object
#: near the edge of what the model sees can score otherwise than on the whole frame)
MARGIN = 0.1
#: past this share of the frame's area, the whole frame goes
MAX_SHARE = 0.6
#: the most seconds between two whole frames of a stream (`detector.region_full_s`)
FULL_S = 2.0
#: frames a second assumed for a stream whose frames carry no time stamps
DEFAULT_FPS = 30.0


class RegionPlanner:
    """Chooses the part of each keyframe of one stream that the detector sees (module docs).

    `plan(frame, held_boxes)` is called once per keyframe sent to the detector, in order, on the
    engine thread; it returns None (the whole frame) or (x1, y1, x2, y2) in whole source pixels,
    and says why in `reason` (first, full, size, time, wide, motion, empty). `counts` tallies the
    reasons over the stream's keyframes.
    """

    def __init__(self, full_s: float = FULL_S, *, change_level: float | None = None, margin: float | None = None,
                 max_share: float | None = None):
        """`change_level`, `margin`, `max_share`: None for the module's constants as they are now."""
        self.full_s = full_s
        self.change_level = CHANGE_LEVEL if change_level is None else change_level
        self.margin = MARGIN if margin is None else margin
        self.max_share = MAX_SHARE if max_share is None else max_share
        self.reason = ""
        self.counts: dict[str, int] = {}
        self._previous: np.ndarray | None = None  # the thumbnail of the last keyframe
        self._size: tuple[int, int] | None = None
        self._last_t: float | None = None  # media time of the last keyframe
        self._full_t = -math.inf  # media time of the last whole frame

    def plan(self, frame: Frame, held_boxes: np.ndarray) -> tuple[int, int, int, int] | None:
        """The region of `frame` for the detector (None: the whole frame). `held_boxes` `(N, 4)`:
        the boxes the stream's tracker holds, in source pixels."""
        thumb = grey_thumbnail(frame.grey_sample(thumbnail_step(frame.width)))
        previous, self._previous = self._previous, thumb
        size, self._size = self._size, (frame.width, frame.height)
        t = frame.pts if frame.pts is not None else frame.index / DEFAULT_FPS
        last_t, self._last_t = self._last_t, t
        region: tuple[int, int, int, int] | None = None
        if previous is None:
            reason = "first"
        elif size != (frame.width, frame.height) or previous.shape != thumb.shape:
            reason = "size"
        elif last_t is None or t < last_t:
            reason = "time"  # a file looping, a camera's clock restarting
        elif t - self._full_t >= self.full_s - 1e-6:
            reason = "full"
        else:
            region = self._changed(thumb, previous, held_boxes, frame.width, frame.height)
            if region is None:
                reason = "wide"
            else:
                reason = "motion" if region[2] > region[0] else "empty"
        if region is None:
            self._full_t = t
        self.reason = reason
        self.counts[reason] = self.counts.get(reason, 0) + 1
        return region

    def _changed(self, thumb: np.ndarray, previous: np.ndarray, held: np.ndarray, width: int,
                 height: int) -> tuple[int, int, int, int] | None:
        """The rectangle around the changed cells and the held boxes, grown and clipped; (0, 0, 0, 0)
        when there is neither; None when it is too wide to be worth it."""
        rows, cols = np.nonzero(np.abs(thumb - previous) > self.change_level)
        boxes = [np.asarray(held, np.float64).reshape(-1, 4)]
        if len(rows):
            cell_w, cell_h = width / thumb.shape[1], height / thumb.shape[0]
            boxes.append(np.array([[cols.min() * cell_w, rows.min() * cell_h,
                                    (cols.max() + 1) * cell_w, (rows.max() + 1) * cell_h]]))
        boxes = np.concatenate(boxes)
        if len(boxes) == 0:
            return (0, 0, 0, 0)
        grow = self.margin * min(width, height)
        x1 = max(0, math.floor(boxes[:, 0].min() - grow))
        y1 = max(0, math.floor(boxes[:, 1].min() - grow))
        x2 = min(width, math.ceil(boxes[:, 2].max() + grow))
        y2 = min(height, math.ceil(boxes[:, 3].max() + grow))
        if x2 <= x1 or y2 <= y1:  # held boxes outside the frame only
            return (0, 0, 0, 0)
        if (x2 - x1) * (y2 - y1) > self.max_share * width * height:
            return None
        return (x1, y1, x2, y2)


def build_planner(detector_cfg) -> RegionPlanner | None:
    """A stream's planner for a pipeline file's `detector` section (None: `regions: off`)."""
    if detector_cfg is None or detector_cfg.regions != "motion":
        return None
    return RegionPlanner(detector_cfg.region_full_s)
