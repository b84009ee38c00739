"""Candidates in model-input pixels -> one `sv.Detections` in source pixels: NMS, mapping, names.

Example:
    >>> from streamlens.detect.heads import Candidates
    >>> from streamlens.detect.preprocess import letterbox_geometry
    >>> geometry = letterbox_geometry((1280, 720), (416, 416), center=False)
    >>> found = Candidates(np.array([[13.0, 13.0, 26.0, 26.0]], np.float32), np.array([0.9], np.float32),
    ...                    np.array([2]))
    >>> det = to_detections(found, geometry, {2: "car"}, iou=0.45)
    >>> det.xyxy.tolist(), det.data["class_name"].tolist()
    ([[40.0, 40.0, 80.0, 80.0]], ['car'])
"""

from __future__ import annotations

import numpy as np
import supervision as sv

from ..frame import MIN_BOX_PX, empty_detections
from .heads import Candidates
from .nms import nms
from .preprocess import Geometry


#: `agnostic_nms: auto` (with a tracker): of two boxes of different classes that overlap by more than
#: this, only the better one stays: one object the model scored as two classes (a van as car and as
#: truck overlap by IoU 0.75 to 0.99 on the shared highway clip; two vehicles side by side by up to
#: about 0.5). Two objects of two classes seldom overlap that much, a rider on a motorbike say, which
#: NMS across classes at `iou` (0.45: `agnostic_nms: true`) would make one box.
SAME_OBJECT_IOU = 0.7


def to_detections(found: Candidates, geometry: Geometry, names: dict[int, str], *, iou: float,
                  apply_nms: bool = True, max_det: int = 300, agnostic: bool | str = False) -> sv.Detections:
    """NMS, then boxes in source pixels, best score first. Boxes of one class suppress each other above
    `iou` (unless the head already chose its boxes); boxes of two classes with `agnostic` True above
    `iou` too (one box per place), with "auto" above `SAME_OBJECT_IOU` (one box per object seen as
    two classes), with False never.

    Boxes under `MIN_BOX_PX` wide or high once clipped to the frame (they lay in the padding, or
    on its edge) are dropped: every box leaves the detector with a positive area.
    """
    if len(found.scores) == 0:
        return empty_detections()
    if apply_nms:  # one pass: within each class at `iou`, across classes at `across`
        classes = np.zeros_like(found.class_ids) if agnostic is True else found.class_ids
        across = SAME_OBJECT_IOU if agnostic == "auto" else None
        keep = nms(found.boxes, found.scores, classes, iou, max_det, across=across)
    else:  # the head chose its boxes per class: only the pass across classes is left
        keep = np.argsort(-found.scores, kind="stable")[:max_det]
        if agnostic is not False and len(keep) > 1:
            across = iou if agnostic is True else SAME_OBJECT_IOU
            keep = keep[nms(found.boxes[keep], found.scores[keep], found.class_ids[keep], 1.0, across=across)]
    xyxy = geometry.to_source(found.boxes[keep])
    inside = (xyxy[:, 2] - xyxy[:, 0] >= MIN_BOX_PX) & (xyxy[:, 3] - xyxy[:, 1] >= MIN_BOX_PX)
    keep, xyxy = keep[inside], xyxy[inside]
    class_id = found.class_ids[keep].astype(np.int64)
    detections = sv.Detections(
        xyxy=xyxy,
        confidence=found.scores[keep].astype(np.float32),
        class_id=class_id,
        tracker_id=np.full(len(keep), -1, dtype=np.int64),
    )
    detections.data["class_name"] = np.array([names.get(int(c), str(int(c))) for c in class_id], dtype=object)
    if found.has_masks:  # a `-seg` model: each box's mask, cut at its box, in source pixels
        from ..segment.masks import from_logits

        # frame pixel x is input pixel (x - origin) * scale + pad (a region's origin: `Geometry`),
        # and mask cell k times that
        k, (ox, oy), (width, height) = found.mask_scale, geometry.origin, geometry.source_size
        sx, sy = geometry.scale_x, geometry.scale_y
        masks = from_logits(found.logits_of(keep), xyxy, (sx * k, sy * k), ox + width, oy + height,
                            offset=((geometry.pad_x - ox * sx) * k, (geometry.pad_y - oy * sy) * k), margin=0.0)
        detections.data["masks"] = np.empty(len(masks), dtype=object)
        detections.data["masks"][:] = masks
    return detections
