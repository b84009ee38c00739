"""Each track's newest mask, carried to every frame of the track and put into its results.

`MaskBook` is what both mask stages share (SAM's, streamlens/segment/stage.py, and the detector's,
`DetectorMaskStage` below): `learn(stream, track, mask)` keeps a fresh mask (made for the track's box
on some keyframe), `attach(result)` gives a result whose tracked objects carry their track's mask
moved and scaled to their box on this frame (`BoxMask.follow`), in `detections.data["masks"]`
(a `BoxMask` or None per object), and, unless `output` is `none`, the contract's form of it in
`detections.data["mask"]` (COCO polygons or COCO RLE: streamlens/segment/masks.py). Tracks not seen
for `FORGET_AFTER_S` of media time are forgotten (streamlens/secondary/worker.py `LastSeen`).

Example:
    >>> import numpy as np
    >>> from streamlens.frame import Frame, FrameResult, empty_detections
    >>> book = MaskBook("polygon")
    >>> det = empty_detections()
    >>> result = FrameResult(Frame("cam1", 0, 0.0, 0.0, np.zeros((8, 8, 3), np.uint8)), 0, False, det)
    >>> book.attach(result) is result    # nothing known: the same result
    True
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np

from ..frame import FrameResult, track_labels
from ..graph.publish.stage import Stage
from ..secondary.worker import FORGET_AFTER_S, LastSeen
from .masks import BoxMask


def wire_form(mask: BoxMask, output: str, width: int, height: int):
    """What an object's `mask` is in results for `output` (polygon, rle): see the module's docstring."""
    return mask.polygons() if output == "polygon" else mask.rle(height, width)


class MaskBook:
    """Every stream's tracks' newest masks (see the module's docstring). Used on the engine's thread.
    `on_forget(stream, track)`: called for each track forgotten, long unseen."""

    def __init__(self, output: str = "polygon", on_forget=None):
        self.output = output
        self.on_forget = on_forget
        self._masks: dict[str, dict[int, BoxMask]] = defaultdict(dict)  # stream -> track -> newest mask
        self._seen = LastSeen()

    def learn(self, stream: str, track: int, mask: BoxMask) -> None:
        self._masks[stream][track] = mask

    def attach(self, result: FrameResult, untracked: list | None = None) -> FrameResult:
        """`result` with each tracked object's mask (see the module); `untracked`: masks of its
        objects that no track carries (the detector's own, with `tracker: none`), one per object or None."""
        det = result.detections
        stream, t = result.frame.stream, result.media_s
        masks = self._masks.get(stream, {})
        ids = det.tracker_id.tolist() if det.tracker_id is not None and len(det) else [-1] * len(det)
        shown: list = [None] * len(ids)
        for i, track in enumerate(ids):
            if track < 0:
                shown[i] = untracked[i] if untracked is not None else None
                continue
            self._seen.see(stream, track, t)
            mask = masks.get(track)
            if mask is not None:
                shown[i] = mask.follow(det.xyxy[i])
        for track in self._seen.sweep(stream, t):  # tracks long unseen
            masks.pop(track, None)
            if self.on_forget is not None:
                self.on_forget(stream, track)
        if not any(m is not None for m in shown):
            return result
        data = {**det.data, "masks": _column(shown)}
        if self.output != "none":
            width, height = result.frame.width, result.frame.height
            data["mask"] = _column([None if m is None else wire_form(m, self.output, width, height) for m in shown])
        return replace(result, detections=replace(det, data=data))

    def forget(self, stream: str) -> None:
        self._masks.pop(stream, None)
        self._seen.forget(stream)


def _column(values: list) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


class DetectorMaskStage(Stage):
    """Masks as the detector gives them (an Ultralytics `-seg` model: `detections.data["masks"]`, a
    `BoxMask` per box), with no `segment.model`: on each keyframe the tracker applied, each tracked
    object takes the mask of the detector's box it rests on (the one it overlaps most, IoU >= 0.5),
    and carries it like a SAM mask until the next. A result stage (graph/publish/stages.py)."""

    offers = True

    def __init__(self, output: str = "polygon", classes: list[str] | None = None):
        self.book = MaskBook(output)
        self.classes = None if classes is None else frozenset(classes)
        self.made = 0  # masks taken from the detector

    def offer(self, frame, found, tracked) -> None:
        from ..track.matching import box_iou

        masks = found.data.get("masks") if found is not None else None
        if masks is None or tracked.tracker_id is None or not len(tracked) or not len(found):
            return
        iou = box_iou(tracked.xyxy, found.xyxy)
        best = iou.argmax(1)
        labels = track_labels(tracked)[1]
        for i, track in enumerate(tracked.tracker_id.tolist()):
            k = int(best[i])
            if track < 0 or iou[i, k] < 0.5 or masks[k] is None:
                continue
            if self.classes is not None and str(labels[i]) not in self.classes:
                continue
            self.book.learn(frame.stream, track, masks[k])
            self.made += 1

    def process(self, result: FrameResult, messages: list) -> tuple[FrameResult, list]:
        det = result.detections
        untracked = det.data.get("masks") if det.tracker_id is None or (det.tracker_id < 0).all() else None
        return self.book.attach(result, None if untracked is None else list(untracked)), messages

    def stream_ended(self, stream: str) -> None:
        self.book.forget(stream)

    def stats(self) -> dict:
        return {"source": "detector", "masks": self.made}


__all__ = ["MaskBook", "DetectorMaskStage", "wire_form", "FORGET_AFTER_S"]
