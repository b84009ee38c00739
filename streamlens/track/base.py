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
    #: a late keyframe's result is applied but the frames since are not all redone (see `catch_up`)
    catching_up = False

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


class PassThrough(Tracker):
    """`tracker: none`: the detector's boxes as they are (id -1), nothing between keyframes.

    Useful to check a detector on its own.

    Example:
        >>> import numpy as np
        >>> f = Frame("cam1", 0, 0.0, 0.0, np.zeros((4, 4, 3), np.uint8))
        >>> len(PassThrough().propagate(f))
        0
    """

    def update(self, frame: Frame, detections: sv.Detections, catch_up: bool = True) -> sv.Detections:
        detections.tracker_id = np.full(len(detections), -1, dtype=np.int64)
        return detections

    def propagate(self, frame: Frame) -> sv.Detections:
        return empty_detections()
