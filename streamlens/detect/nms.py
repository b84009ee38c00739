"""Class-aware non-maximum suppression in numpy: boxes of different classes never suppress each other.

Greedy NMS, as torchvision's `batched_nms` does it: boxes are visited by falling score, and each kept
box removes the boxes of its class that overlap it by more than `iou` (intersection over union,
continuous coordinates, no +1). Classes are kept apart by shifting each class's boxes to its own
region of the plane, so one pass handles every class. With `across`, a kept box also removes the
boxes of other classes that overlap it by more than `across` (one object the model scored as two
classes; `detector.agnostic_nms: auto`).

Example:
    >>> boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [0, 0, 10, 10]], np.float32)
    >>> scores = np.array([0.9, 0.8, 0.7], np.float32)
    >>> class_ids = np.array([0, 0, 1])
    >>> nms(boxes, scores, class_ids, iou=0.5).tolist()   # the 2nd box is a duplicate; the 3rd is another class
    [0, 2]
    >>> nms(boxes, scores, class_ids, iou=0.5, across=0.7).tolist()   # the 3rd is the 1st seen as another class
    [0]
"""

from __future__ import annotations

import numpy as np


def nms(boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, iou: float,
        max_det: int = 300, across: float | None = None) -> np.ndarray:
    """Indices of the boxes (N x 4, x1 y1 x2 y2) kept, best score first, at most `max_det`; `across`:
    the overlap above which a box of another class is removed too (None: never)."""
    if len(boxes) == 0:
        return np.empty((0,), np.int64)
    boxes = np.asarray(boxes, np.float64)  # float64: the class shifts must not cost precision
    classes = np.asarray(class_ids)
    if across is None:  # each class in a region of its own: no overlap across classes
        span = float(boxes.max() - min(0.0, float(boxes.min()))) + 1.0
        boxes = boxes + (classes.astype(np.float64) * span)[:, None]
    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1).clip(0) * (y2 - y1).clip(0)
    order = np.argsort(-np.asarray(scores, np.float32), kind="stable")
    keep: list[int] = []
    while order.size and len(keep) < max_det:
        best, rest = order[0], order[1:]
        keep.append(int(best))
        w = (np.minimum(x2[best], x2[rest]) - np.maximum(x1[best], x1[rest])).clip(0)
        h = (np.minimum(y2[best], y2[rest]) - np.maximum(y1[best], y1[rest])).clip(0)
        inter = w * h
        union = areas[best] + areas[rest] - inter
        overlap = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        limit = iou if across is None else np.where(classes[rest] == classes[best], iou, across)
        order = rest[overlap <= limit]
    return np.asarray(keep, np.int64)
