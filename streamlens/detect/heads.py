"""Output decoders: a model's raw output tensor -> candidate boxes in input pixels, per image.

Known heads, told apart by the output's shape (N = anchor points of strides 8, 16, 32 at the input
size: 3549 at 416x416, 8400 at 640x640):
- `yolox`: [B, N, 5 + C], the raw YOLOX head. Per row cx, cy, w, h, objectness, C class scores;
  cx, cy = (raw + grid) * stride, w, h = exp(raw) * stride; score = objectness * class score.
- `yolov8`: [B, 4 + C, N], Ultralytics YOLOv5u/v8/11/12 heads: cx, cy, w, h in input pixels, then C
  class scores.
- `end2end`: [B, K, 6], heads that select their own boxes (YOLOv10, YOLO26 exported end to end):
  x1, y1, x2, y2 in input pixels, score, class. No NMS afterwards.

Each decoder keeps the boxes whose score is above `conf` (and whose class is wanted) and returns
`Candidates` in input pixels; NMS and the mapping to source pixels come after.

Example:
    >>> head = identify_head((1, 3549, 85), (416, 416), ultralytics=False, where="m.onnx")
    >>> head.name, head.num_classes
    ('yolox', 80)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DetectorError

STRIDES = (8, 16, 32)


@dataclass(slots=True)
class Candidates:
    """Boxes (N x 4 float32, x1 y1 x2 y2 in input pixels), scores (N float32) and class ids (N int64);
    from a `-seg` model also each box's mask logits (`mask_logits`, N x h x w float32, over the whole
    input at `mask_scale` cells per input pixel)."""

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    mask_logits: np.ndarray | None = None
    mask_scale: float = 1.0

    @staticmethod
    def empty() -> Candidates:
        return Candidates(np.empty((0, 4), np.float32), np.empty((0,), np.float32), np.empty((0,), np.int64))


def anchor_count(input_size: tuple[int, int], strides: tuple[int, ...] = STRIDES) -> int:
    """Anchor points of a stride-8/16/32 head at `input_size` (w, h).

    Example:
        >>> anchor_count((416, 416)), anchor_count((640, 640))
        (3549, 8400)
    """
    w, h = input_size
    return sum((w // s) * (h // s) for s in strides)


def _cxcywh_to_xyxy(cx, cy, w, h) -> np.ndarray:
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1).astype(np.float32, copy=False)


class Head:
    """Decodes one output tensor. `num_classes` is C; `needs_nms` is False for end-to-end heads."""

    name = "head"
    needs_nms = True

    def __init__(self, num_classes: int):
        self.num_classes = num_classes

    def decode(self, raw: np.ndarray, input_size: tuple[int, int], conf: float,
               wanted: np.ndarray | None = None) -> list[Candidates]:
        """One `Candidates` per image of the batch `raw`, for an input of `input_size` (w, h)."""
        return [self.decode_one(r, input_size, conf, wanted) for r in raw]

    def decode_one(self, raw: np.ndarray, input_size: tuple[int, int], conf: float,
                   wanted: np.ndarray | None) -> Candidates:
        raise NotImplementedError


class YoloxHead(Head):
    """The raw YOLOX head, [B, N, 5 + C]; grids are built once per input size."""

    name = "yolox"

    def __init__(self, num_classes: int):
        super().__init__(num_classes)
        self._grids: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def grid(self, input_size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """(grid N x 2 of cell x, y; stride N x 1) for `input_size` (w, h), row by row, stride 8 first."""
        if input_size not in self._grids:
            w, h = input_size
            grids, strides = [], []
            for s in STRIDES:
                ys, xs = np.meshgrid(np.arange(h // s), np.arange(w // s), indexing="ij")
                grids.append(np.stack([xs, ys], axis=-1).reshape(-1, 2))
                strides.append(np.full((grids[-1].shape[0], 1), s))
            self._grids[input_size] = (np.concatenate(grids).astype(np.float32),
                                       np.concatenate(strides).astype(np.float32))
        return self._grids[input_size]

    def decode_one(self, raw, input_size, conf, wanted) -> Candidates:
        rows = np.flatnonzero(raw[:, 4] > conf)  # score = objectness x class score <= objectness
        class_scores = raw[rows, 5:]
        class_ids = class_scores.argmax(axis=1)
        scores = raw[rows, 4] * class_scores[np.arange(len(rows)), class_ids]
        keep = scores > conf
        if wanted is not None:
            keep &= np.isin(class_ids, wanted)
        if not keep.any():
            return Candidates.empty()
        rows = rows[keep]
        grid, stride = self.grid(input_size)
        centre = (raw[rows, :2] + grid[rows]) * stride[rows]
        size = np.exp(raw[rows, 2:4]) * stride[rows]
        boxes = _cxcywh_to_xyxy(centre[:, 0], centre[:, 1], size[:, 0], size[:, 1])
        return Candidates(boxes, scores[keep].astype(np.float32), class_ids[keep].astype(np.int64))


class Yolov8Head(Head):
    """Ultralytics' anchor-free head, [B, 4 + C, N], boxes already decoded to input pixels."""

    name = "yolov8"

    def decode_one(self, raw, input_size, conf, wanted) -> Candidates:
        class_scores = raw[4:]
        best = class_scores.max(axis=0)
        keep = np.flatnonzero(best > conf)
        if keep.size == 0:
            return Candidates.empty()
        class_ids = class_scores[:, keep].argmax(axis=0)
        if wanted is not None:
            mask = np.isin(class_ids, wanted)
            keep, class_ids = keep[mask], class_ids[mask]
        cx, cy, w, h = raw[:4, keep]
        return Candidates(_cxcywh_to_xyxy(cx, cy, w, h), best[keep].astype(np.float32), class_ids.astype(np.int64))


class End2EndHead(Head):
    """Heads that pick their own boxes, [B, K, 6]: x1 y1 x2 y2 score class, in input pixels."""

    name = "end2end"
    needs_nms = False

    def decode_one(self, raw, input_size, conf, wanted) -> Candidates:
        class_ids = raw[:, 5].astype(np.int64)
        keep = raw[:, 4] > conf
        if wanted is not None:
            keep &= np.isin(class_ids, wanted)
        return Candidates(raw[keep, :4].astype(np.float32), raw[keep, 4].astype(np.float32), class_ids[keep])


def identify_head(shape: tuple, input_size: tuple[int, int], *, ultralytics: bool, end2end: bool = False,
                  where: str = "detector.model") -> Head:
    """The head whose output has `shape` for an input of `input_size` (w, h); a `DetectorError` if none fits.

    `ultralytics` (the model's metadata says it is an Ultralytics export) and `end2end` (its metadata
    says the head selects its own boxes) settle shapes that two heads could share.
    """
    n = anchor_count(input_size)
    if len(shape) == 3 and all(isinstance(d, int) for d in shape):
        _, rows, cols = shape
        if cols == 6 and (end2end or (ultralytics and rows != n)):
            return End2EndHead(0)
        if cols == n and rows > 4 and (ultralytics or rows != n):
            return Yolov8Head(rows - 4)
        if rows == n and cols > 5 and not ultralytics:
            return YoloxHead(cols - 5)
    raise DetectorError(f"{where}: output shape {list(shape)} fits no known head for input {input_size[0]}x"
                        f"{input_size[1]} (YOLOX [1, {n}, 5+C], YOLOv8 [1, 4+C, {n}], end-to-end [1, K, 6])")
