"""What every tracker is: per stream, detections in at keyframes, every live object out on every frame."""

from __future__ import annotations

import numpy as np
import supervision as sv

from ..frame import MIN_BOX_PX, WEAK, Frame, empty_detections


def clip_to_frame(xyxy: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """Boxes `(N, 4)` (x1, y1, x2, y2) clipped to a `width` x `height` frame, as float32, and a mask
    of those at least `MIN_BOX_PX` wide and high once clipped. A frame of unknown size (0 x 0)
    clips nothing.

    Example:
        >>> boxes, shown = clip_to_frame(np.array([[-5.0, 10.0, 20.0, 30.0], [-9.0, 0.0, 0.5, 8.0]]), 100, 50)
        >>> boxes.tolist(), shown.tolist()
        ([[0.0, 10.0, 20.0, 30.0], [0.0, 0.0, 0.5, 8.0]], [True, False])
    """
    boxes = np.array(xyxy, dtype=np.float32).reshape(-1, 4)
    if width > 1 and height > 1:
        np.maximum(boxes, 0.0, out=boxes)
        np.minimum(boxes, (width, height, width, height), out=boxes)
    shown = (boxes[:, 2] - boxes[:, 0] >= MIN_BOX_PX) & (boxes[:, 3] - boxes[:, 1] >= MIN_BOX_PX)
    return boxes, shown


def weak_mask(detections: sv.Detections) -> np.ndarray | None:
    """Which of `detections` are the detector's weak boxes (`WEAK`), or None when it reported none."""
    weak = detections.data.get(WEAK) if detections.data and len(detections) else None
    return None if weak is None else np.asarray(weak, bool)


def confident(detections: sv.Detections) -> sv.Detections:
    """`detections` without the detector's weak boxes (`WEAK`): what a keyframe may show, and what
    the stages that look at a keyframe's detections are given.

    Example:
        >>> d = sv.Detections(xyxy=np.array([[0.0, 0, 9, 9], [20, 0, 29, 9]]), confidence=np.array([0.8, 0.2]))
        >>> d.data[WEAK] = np.array([False, True])
        >>> kept = confident(d)
        >>> kept.confidence.tolist(), WEAK in kept.data
        ([0.8], False)
    """
    weak = weak_mask(detections)
    if weak is None:
        return detections
    kept = detections[~weak]
    kept.data.pop(WEAK, None)
    return kept



def untracked(detections: sv.Detections) -> sv.Detections:
    """Detections handed back as they are (but the weak ones), id -1 (a result a tracker could not apply)."""
    detections = confident(detections)
    detections.tracker_id = np.full(len(detections), -1, dtype=np.int64)
    return detections

class Tracker:
    """One instance per stream.

    `update(frame, detections)` runs on keyframes: it associates the detector's boxes with the
    tracks and returns the objects on this frame with their `tracker_id`; of the detector's weak
    boxes (`WEAK`) it shows none. `propagate(frame)` runs
    on the frames in between: it moves every live track by motion and returns them.

    `signals` tells an adaptive keyframe scheduler how sure the tracker is of the latest frame
    (`TrackingSignals`), or is None for a tracker that cannot say.

    `prepare(frame)` may be called first, on another thread (the source's): it does the part of
    the work that needs the frame alone, so that less is left for the one thread that tracks.
    """

    signals = None
    #: a late keyframe's result is applied but the frames since are not all redone (see `catch_up`)
    catching_up = False
    #: late updates not applied because they were older than the tracker's history
    stale_updates = 0
    #: the factor its motion model's shifts are taken at, where it learns one (`motion.scale`), else None
    motion_scale: float | None = None

    def prepare(self, frame: Frame) -> None:
        """Work ahead on `frame` alone, on any thread; the default does nothing."""

    def update(self, frame: Frame, detections: sv.Detections, catch_up: bool = True) -> sv.Detections:
        raise NotImplementedError

    def propagate(self, frame: Frame) -> sv.Detections:
        raise NotImplementedError

    def catch_up(self, max_steps: int | None = None) -> bool:
        """Redo up to `max_steps` frames of what a late `update(..., catch_up=False)` left; True when
        nothing is left. A tracker that never replays has nothing to do."""
        return True

    def forget(self) -> None:
        """Let go of what it keeps of the frames it saw: its stream ended (nothing, by default)."""

    def held_boxes(self) -> np.ndarray:
        """Every box the tracker still holds, `(N, 4)` x1 y1 x2 y2 in source pixels, whatever its
        track's state (lost ones too): where the detector must look again even if nothing there
        moves (`detector.regions`, graph/schedule/regions.py). The default holds none."""
        return np.empty((0, 4), np.float32)


class PassThrough(Tracker):
    """`tracker: none`: the detector's boxes (id -1), nothing between keyframes.

    Useful to check a detector on its own. Boxes are clipped to the frame, and those less than
    `MIN_BOX_PX` wide or high there are left out, as every tracker does.

    Example:
        >>> import numpy as np
        >>> f = Frame("cam1", 0, 0.0, 0.0, np.zeros((4, 4, 3), np.uint8))
        >>> len(PassThrough().propagate(f))
        0
    """

    def __init__(self):
        self._held = np.empty((0, 4), np.float32)

    def update(self, frame: Frame, detections: sv.Detections, catch_up: bool = True) -> sv.Detections:
        detections = confident(detections)
        boxes, shown = clip_to_frame(detections.xyxy, frame.width, frame.height)
        detections.xyxy = boxes
        if not shown.all():
            detections = detections[shown]
        detections.tracker_id = np.full(len(detections), -1, dtype=np.int64)
        self._held = np.asarray(detections.xyxy, np.float32).reshape(-1, 4)
        return detections

    def held_boxes(self) -> np.ndarray:
        """The last keyframe's boxes."""
        return self._held

    def propagate(self, frame: Frame) -> sv.Detections:
        return empty_detections()
