"""The items that travel through the graph: a decoded frame, its result, and the end of a stream.

One frame type goes from the source to the sinks: a `Frame` is decoded once, its pixels are never
copied on the way, and the detector, tracker and sinks all read the same array. Detections are
`supervision.Detections` (numpy arrays inside), the currency every stage speaks.

Example:
    >>> import numpy as np
    >>> f = Frame(stream="cam1", index=0, pts=0.0, ts=0.0, image=np.zeros((2, 4, 3), np.uint8))
    >>> (f.width, f.height)
    (4, 2)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import supervision as sv


@dataclass(slots=True, eq=False)
class Frame:
    """One decoded frame of one stream.

    `index` counts decoded frames from 0 (it keeps counting across loops of a file); `pts` is the
    presentation time in seconds (it restarts with each loop of a file); `ts` is the wall-clock time
    at which the frame became available (for a paced file: its scheduled time). `image` is HxWx3 BGR
    uint8. `timings` holds per-stage milliseconds, filled in as the frame travels.
    """

    stream: str
    index: int
    pts: float | None
    ts: float
    image: np.ndarray
    timings: dict[str, float] = field(default_factory=dict)
    #: the decoder's motion vectors for this frame, when the source exports them (else None)
    motion_vectors: np.ndarray | None = None
    #: whether the detector is to run on this frame (set by the keyframe schedule)
    keyframe: bool = False
    #: the detector's input made ahead by `Detector.prepare` on the decode thread (else None); it
    #: lives and dies with the frame, so a frame dropped before detection holds nothing elsewhere
    prepared: object = None

    @property
    def width(self) -> int:
        return int(self.image.shape[1])

    @property
    def height(self) -> int:
        return int(self.image.shape[0])


@dataclass(slots=True, eq=False)
class EndOfStream:
    """The last item a source emits. `frames` is how many frames it produced; `reason` is
    `"end"` (the input ended), `"stopped"` (the pipeline was asked to stop) or `"error"`."""

    stream: str
    frames: int
    reason: str = "end"
    error: str | None = None


@dataclass(slots=True, eq=False)
class FrameResult:
    """What the graph produces for one frame: the frame, the objects on it and how it got there.

    `seq` counts results per stream from 0 with no gaps; `keyframe` says whether the detector ran on
    this frame; `detections` carries boxes in source pixels, `tracker_id` (-1 when untracked) and the
    class names in `detections.data["class_name"]`.
    """

    frame: Frame
    seq: int
    keyframe: bool
    detections: sv.Detections


@dataclass(slots=True, eq=False)
class StreamEnd:
    """The result-side end of a stream: what sinks receive after a stream's last `FrameResult`."""

    stream: str
    seq: int
    frames: int
    reason: str = "end"


@dataclass(slots=True, eq=False)
class StatsReport:
    """A periodic report on one stream (about once a second), for sinks that ask for it."""

    stream: str
    values: dict


def empty_detections() -> sv.Detections:
    """Detections with no rows, with every field the graph relies on present."""
    det = sv.Detections(
        xyxy=np.empty((0, 4), np.float32),
        confidence=np.empty((0,), np.float32),
        class_id=np.empty((0,), np.int64),
        tracker_id=np.empty((0,), np.int64),
    )
    det.data["class_name"] = np.empty((0,), dtype=object)
    return det
