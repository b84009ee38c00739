"""Snapshots: a JPEG of an object for its `object_start` and `object_end` events (`analytics.snapshots`).

`kind: crop` is the object's box with a margin (`padding`, a share of the box's size), cut from the
frame: for `object_start` the frame it first appears on, for `object_end` the frame where its score
was highest (a copy of that crop is kept while the track lives, so ending costs nothing more).
`kind: frame` is the whole annotated frame (boxes, labels, lines and zones); for `object_end`, the
frame of its best score, kept by reference (frames are never written to, so no copy is made).

The JPEG is made once, on the engine's thread when the event is published; every sink reads the
same bytes (the zmq sink as the event's third part, the mqtt sink on its snapshot topic). With
`path`, it is also written to `<path>/<stream>/<event>-<id>-<seq>.jpg`; a write that fails (a full
disk) is told once in the log and the event goes out without its `path`.

Example:
    >>> import numpy as np
    >>> from streamlens.config.model import SnapshotConfig
    >>> from streamlens.frame import Frame
    >>> shots = Snapshots(SnapshotConfig(), "cam1")
    >>> frame = Frame("cam1", 3, 0.1, 0.0, np.full((120, 160, 3), 200, np.uint8))
    >>> shots.seen(7, frame, [40, 30, 80, 90])
    >>> shot = shots.take({"event": "object_end", "object": {"id": 7, "label": "car"}}, 12, frame)
    >>> shot.kind, shot.frame, shot.jpeg[:2]
    ('crop', 3, b'\\xff\\xd8')
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..frame import Snapshot
from ..sinks.draw import FrameAnnotator, encode_jpeg

log = logging.getLogger("streamlens")


def crop(image: np.ndarray, box, padding: float) -> np.ndarray | None:
    """`box` (x1, y1, x2, y2) of `image` grown by `padding` of its width and height on each side,
    clipped to the image; None when nothing of it is inside."""
    height, width = image.shape[:2]
    x1, y1, x2, y2 = (float(v) for v in box)
    dx, dy = (x2 - x1) * padding, (y2 - y1) * padding
    left, top = max(0, int(x1 - dx)), max(0, int(y1 - dy))
    right, bottom = min(width, int(np.ceil(x2 + dx))), min(height, int(np.ceil(y2 + dy)))
    if right <= left or bottom <= top:
        return None
    return image[top:bottom, left:right]


class Snapshots:
    """One stream's snapshots under `cfg` (a `SnapshotConfig`). The runtime tells it each frame's
    best views (`seen`) and asks it for an event's picture (`take`); `draw(image, detections,
    analytics)` makes the annotated frame for `kind: frame`."""

    def __init__(self, cfg, stream: str, draw=None):
        self.cfg = cfg
        self.stream = stream
        self.draw = draw
        self.events = frozenset(cfg.events)
        self.classes = None if cfg.classes is None else frozenset(cfg.classes)
        self._best: dict[int, tuple] = {}  # track id -> (frame index, crop or (image, detections, analytics))
        self._folder = None if cfg.path is None else Path(cfg.path) / stream
        self._write_failed = False
        self.written = 0
        self.failed = 0

    @classmethod
    def for_stream(cls, cfg, stream: str, width: int, height: int) -> Snapshots:
        """`stream`'s snapshots, its frames `width` x `height`: `kind: frame` draws them as the
        video sink does (`sinks.draw.FrameAnnotator`)."""
        return cls(cfg, stream, FrameAnnotator((width, height)).annotate if cfg.kind == "frame" else None)

    def wants(self, label: str) -> bool:
        """Whether objects of `label` get snapshots."""
        return self.classes is None or label in self.classes

    def seen(self, track_id: int, frame, box, detections=None, analytics=None) -> None:
        """`track_id` is at its best on `frame` (a `Frame`; its box `box`): keep what its
        `object_end` will show."""
        if "object_end" not in self.events:
            return
        if self.cfg.kind == "crop":
            part = crop(frame.image, box, self.cfg.padding)
            if part is not None:
                self._best[track_id] = (frame.index, part.copy())
        else:
            self._best[track_id] = (frame.index, (frame.image, detections, analytics))

    def take(self, body: dict, seq: int, frame, detections=None, analytics=None) -> Snapshot | None:
        """The snapshot for event `body` (numbered `seq`) on `frame` (a `Frame`, its pixels read
        only when this event gets a snapshot), or None when it gets none."""
        kind, obj = body["event"], body["object"]
        if kind == "object_end":
            kept = self._best.pop(obj["id"], None)
        if kind not in self.events or not self.wants(obj["label"]):
            return None
        index = frame.index
        if kind == "object_end":
            if kept is None:
                return None
            index, kept = kept
            picture = kept if self.cfg.kind == "crop" else self._drawn(*kept)
        elif self.cfg.kind == "crop":
            picture = crop(frame.image, obj["box"], self.cfg.padding)
        else:
            picture = self._drawn(frame.image, detections, analytics)
        if picture is None:
            return None
        try:
            jpeg = encode_jpeg(picture, self.cfg.quality)
        except ValueError:
            return None
        return Snapshot(jpeg, self.cfg.kind, index, self._write(f"{kind}-{obj['id']}-{seq}.jpg", jpeg))

    def forget(self) -> None:
        """The stream ended: drop every kept view."""
        self._best.clear()

    def _drawn(self, image: np.ndarray, detections, analytics) -> np.ndarray:
        if self.draw is None or detections is None:
            return image
        return self.draw(image, detections, analytics)

    def _write(self, name: str, jpeg: bytes) -> str | None:
        if self._folder is None:
            return None
        path = self._folder / name
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            path.write_bytes(jpeg)
        except OSError as e:
            self.failed += 1
            if not self._write_failed:
                self._write_failed = True
                log.warning("snapshots of %s: cannot write %s: %s (events go out without their file; "
                            "told once)", self.stream, path, e.strerror or e)
            return None
        self.written += 1
        return str(path)


__all__ = ["Snapshots", "crop"]
