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


def to_detections(found: Candidates, geometry: Geometry, names: dict[int, str], *, iou: float,
                  apply_nms: bool = True, max_det: int = 300, agnostic: bool = False) -> sv.Detections:
    """NMS (class-aware, or across classes with `agnostic`, unless the head already chose its
    boxes), then boxes in source pixels.

    Boxes under `MIN_BOX_PX` wide or high once clipped to the frame (they lay in the padding, or
    on its edge) are dropped: every box leaves the detector with a positive area.
    """
    if len(found.scores) == 0:
        return empty_detections()
    if apply_nms:
        classes = np.zeros_like(found.class_ids) if agnostic else found.class_ids
        keep = nms(found.boxes, found.scores, classes, iou, max_det)
    else:
        keep = np.argsort(-found.scores, kind="stable")[:max_det]
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
    return detections
