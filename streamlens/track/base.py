"""What every tracker is: per stream, detections in at keyframes, every live object out on every frame."""

from __future__ import annotations

import numpy as np
import supervision as sv

from ..frame import Frame, empty_detections


class Tracker:
    """One instance per stream.

    `update(frame, detections)` runs on keyframes: it associates the detector's boxes with the
    tracks and returns the objects on this frame with their `tracker_id`. `propagate(frame)` runs
    on the frames in between: it moves every live track by motion and returns them.

    `signals` tells an adaptive keyframe scheduler how sure the tracker is of the latest frame
    (`TrackingSignals`), or is None for a tracker that cannot say.

    `prepare(frame)` may be called first, on another thread (the source's): it does the part of
    the work that needs the frame alone, so that less is left for the one thread that tracks.
    """

    signals = None

    def prepare(self, frame: Frame) -> None:
        """Work ahead on `frame` alone, on any thread; the default does nothing."""

    def update(self, frame: Frame, detections: sv.Detections) -> sv.Detections:
        raise NotImplementedError

    def propagate(self, frame: Frame) -> sv.Detections:
        raise NotImplementedError


class PassThrough(Tracker):
    """`tracker: none`: the detector's boxes as they are (id -1), nothing between keyframes.

    Useful to check a detector on its own.

    Example:
        >>> import numpy as np
        >>> f = Frame("cam1", 0, 0.0, 0.0, np.zeros((4, 4, 3), np.uint8))
        >>> len(PassThrough().propagate(f))
        0
    """

    def update(self, frame: Frame, detections: sv.Detections) -> sv.Detections:
        detections.tracker_id = np.full(len(detections), -1, dtype=np.int64)
        return detections

    def propagate(self, frame: Frame) -> sv.Detections:
        return empty_detections()
