"""What every detector is: a batch of frames in, one `sv.Detections` per frame out."""

from __future__ import annotations

import supervision as sv

from ..frame import Frame


class Detector:
    """Finds objects on frames. `detect(frames)` takes a batch (frames may come from different
    streams and be of different sizes) and returns one `sv.Detections` per frame, in order, with
    boxes in source pixels, `confidence`, `class_id`, and the class names in `data["class_name"]`.
    `names` maps class ids to names. `close()` releases the model.
    """

    names: dict[int, str] = {}

    def detect(self, frames: list[Frame]) -> list[sv.Detections]:
        raise NotImplementedError

    def close(self) -> None:
        pass
