"""What every detector is: a batch of frames in, one `sv.Detections` per frame out."""

from __future__ import annotations

import supervision as sv

from ..frame import Frame


class Detector:
    """Finds objects on frames. `detect(frames)` takes a batch (frames may come from different
    streams and be of different sizes) and returns one `sv.Detections` per frame, in order, with
    boxes in source pixels, `confidence`, `class_id`, and the class names in `data["class_name"]`.
    `names` maps class ids to names. `close()` releases the model.

    `prepare(frame)` is optional: it does the frame's preprocessing now, on the calling thread
    (a source's decode thread, say), so that a later `detect()` with that frame only runs the model.
    It is safe to call from several threads at once; the input is kept on `frame.prepared`, so a
    frame prepared but never detected (a live frame dropped) takes its input with it. Detectors
    without a preprocessing step do nothing.

    Example:
        >>> Detector().prepare(None)   # the default: nothing to do
    """

    names: dict[int, str] = {}
    #: True when `prepare()` on another thread overlaps inference instead of competing with it for the
    #: CPU: the model runs on an accelerator. (On 2 CPU cores, YOLOX-Nano through onnxruntime,
    #: preprocessing on the decode thread made a detect-every-frame run of the 720p clip no faster, and
    #: slower in most paired runs: inference already keeps every core busy.) A runtime calls `prepare()`
    #: ahead only when this is True.
    prepare_ahead: bool = False
    #: the most frames one `detect()` call takes (None: any number; the runtime's `max_batch` holds)
    max_batch: int | None = None
    #: True when its detections carry instance masks (an Ultralytics `-seg` model or its export)
    gives_masks: bool = False

    def detect(self, frames: list[Frame]) -> list[sv.Detections]:
        raise NotImplementedError

    def prepare(self, frame: Frame) -> None:
        """Preprocess `frame` ahead of `detect()`, on this thread; the default does nothing."""

    def close(self) -> None:
        pass
