"""Output decoders: a model's raw output tensor -> candidate boxes in input pixels, per image.

Known heads, told apart by the output's shape (N = anchor points of strides 8, 16, 32 at the input
size: 3549 at 416x416, 8400 at 640x640):
- `yolox`: [B, N, 5 + C], the raw YOLOX head. Per row cx, cy, w, h, objectness, C class scores;
  cx, cy = (raw + grid) * stride, w, h = exp(raw) * stride; score = objectness * class score.
- `yolov8`: [B, 4 + C, N], Ultralytics YOLOv5u/v8/11/12 heads: cx, cy, w, h in input pixels, then C
  class scores. A `-seg` model's ([B, 4 + C + M, N], then M mask coefficients) comes with a second
  output, its prototypes [B, M, H/4, W/4] (M = 32): each box's mask logits are its coefficients times
  the prototypes (`mask_logits`), worked out only for the boxes NMS keeps.
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


def mask_logits(coefficients, prototypes):
    """A `-seg` model's mask logits, K x h x w, for K boxes' mask coefficients (K x M) and the image's
    prototypes (M x h x w): the coefficients times the prototypes, over the whole input (a sigmoid
    away from probabilities). numpy arrays or torch tensors alike.

    Example:
        >>> mask_logits(np.array([[1.0, -1.0]]), np.stack([np.ones((2, 3)), np.zeros((2, 3))])).tolist()
        [[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]]
    """
    m, h, w = prototypes.shape
    return (coefficients @ prototypes.reshape(m, h * w)).reshape(-1, h, w)


@dataclass(slots=True)
class Candidates:
    """Boxes (N x 4 float32, x1 y1 x2 y2 in input pixels), scores (N float32) and class ids (N int64);
    from a `-seg` model also each box's mask logits (`mask_logits`, N x h x w float32, over the whole
    input at `mask_scale` cells per input pixel), or what makes them: each box's mask coefficients
    (`mask_coefficients`, N x M) and the image's `prototypes` (M x h x w), see `logits_of`."""

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    mask_logits: np.ndarray | None = None
    mask_scale: float = 1.0
    mask_coefficients: np.ndarray | None = None
    prototypes: np.ndarray | None = None

    @property
    def has_masks(self) -> bool:
        return self.mask_logits is not None or self.mask_coefficients is not None

    def logits_of(self, rows: np.ndarray) -> np.ndarray:
        """The mask logits (float32) of the boxes `rows`: made only for those when the model gave
        coefficients and prototypes (a few boxes after NMS, not the thousands before it)."""
        if self.mask_logits is not None:
            return self.mask_logits[rows]
        return mask_logits(self.mask_coefficients[rows], self.prototypes).astype(np.float32, copy=False)

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


def is_wanted(class_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Which of `class_ids` are among the few `wanted`: `np.isin`'s answer in a quarter of its time
    on a keyframe's 45 candidates (2.6 against 10.5 us: it sorts or builds a table first).

    Example:
        >>> is_wanted(np.array([2, 0, 7]), np.array([2, 7])).tolist()
        [True, False, True]
    """
    return (np.asarray(class_ids)[:, None] == np.asarray(wanted).reshape(1, -1)).any(axis=1)


def _cxcywh_to_xyxy(cx, cy, w, h) -> np.ndarray:
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1).astype(np.float32, copy=False)


class Head:
    """Decodes one output tensor. `num_classes` is C; `needs_nms` is False for end-to-end heads;
    `mask_dim` is M, the mask coefficients after the class scores of a `-seg` head (0: none)."""

    name = "head"
    needs_nms = True

    def __init__(self, num_classes: int, mask_dim: int = 0):
        self.num_classes = num_classes
        self.mask_dim = mask_dim

    def decode(self, raw: np.ndarray, input_size: tuple[int, int], conf: float,
               wanted: np.ndarray | None = None, prototypes: np.ndarray | None = None) -> list[Candidates]:
        """One `Candidates` per image of the batch `raw`, for an input of `input_size` (w, h); with a
        `-seg` head's `prototypes` (B x M x h x w), each with its boxes' coefficients and its prototypes."""
        found = [self.decode_one(r, input_size, conf, wanted) for r in raw]
        if prototypes is not None:
            scale = prototypes.shape[-1] / input_size[0]
            for cand, proto in zip(found, prototypes):
                if cand.mask_coefficients is None:  # no box: no coefficients either
                    cand.mask_coefficients = np.empty((0, self.mask_dim), np.float32)
                cand.prototypes, cand.mask_scale = proto, scale
        return found

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
            keep &= is_wanted(class_ids, wanted)
        if not keep.any():
            return Candidates.empty()
        rows = rows[keep]
        grid, stride = self.grid(input_size)
        centre = (raw[rows, :2] + grid[rows]) * stride[rows]
        size = np.exp(raw[rows, 2:4]) * stride[rows]
        boxes = _cxcywh_to_xyxy(centre[:, 0], centre[:, 1], size[:, 0], size[:, 1])
        return Candidates(boxes, scores[keep].astype(np.float32), class_ids[keep].astype(np.int64))


class Yolov8Head(Head):
    """Ultralytics' anchor-free head, [B, 4 + C, N], boxes already decoded to input pixels; a `-seg`
    head's [B, 4 + C + M, N] ends with each anchor's M mask coefficients."""

    name = "yolov8"

    def decode_one(self, raw, input_size, conf, wanted) -> Candidates:
        class_scores = raw[4:4 + self.num_classes]
        best = class_scores.max(axis=0)
        keep = np.flatnonzero(best > conf)
        if keep.size == 0:
            return Candidates.empty()
        class_ids = class_scores[:, keep].argmax(axis=0)
        if wanted is not None:
            mask = is_wanted(class_ids, wanted)
            keep, class_ids = keep[mask], class_ids[mask]
        cx, cy, w, h = raw[:4, keep]
        found = Candidates(_cxcywh_to_xyxy(cx, cy, w, h), best[keep].astype(np.float32), class_ids.astype(np.int64))
        if self.mask_dim:
            found.mask_coefficients = raw[4 + self.num_classes:, keep].T.astype(np.float32)
        return found


class End2EndHead(Head):
    """Heads that pick their own boxes, [B, K, 6]: x1 y1 x2 y2 score class, in input pixels."""

    name = "end2end"
    needs_nms = False

    def decode_one(self, raw, input_size, conf, wanted) -> Candidates:
        class_ids = raw[:, 5].astype(np.int64)
        keep = raw[:, 4] > conf
        if wanted is not None:
            keep &= is_wanted(class_ids, wanted)
        return Candidates(raw[keep, :4].astype(np.float32), raw[keep, 4].astype(np.float32), class_ids[keep])


def identify_head(shape: tuple, input_size: tuple[int, int], *, ultralytics: bool, end2end: bool = False,
                  where: str = "detector.model", prototypes: tuple | None = None) -> Head:
    """The head whose output has `shape` for an input of `input_size` (w, h); a `DetectorError` if none fits.

    `ultralytics` (the model's metadata says it is an Ultralytics export) and `end2end` (its metadata
    says the head selects its own boxes) settle shapes that two heads could share. `prototypes` is
    the shape of a `-seg` model's second output, [B, M, h, w]: the head must then be YOLOv8's with M
    mask coefficients after the class scores.

    Example:
        >>> head = identify_head((1, 116, 2100), (320, 320), ultralytics=True, prototypes=(1, 32, 80, 80))
        >>> head.name, head.num_classes, head.mask_dim
        ('yolov8', 80, 32)
    """
    n = anchor_count(input_size)
    if prototypes is not None:
        return _seg_head(shape, prototypes, input_size, n, where)
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


def _seg_head(shape: tuple, prototypes: tuple, input_size: tuple[int, int], n: int, where: str) -> Head:
    """A `-seg` model's head: [B, 4 + C + M, N] beside prototypes [B, M, H/4, W/4]."""
    w, h = input_size
    if len(shape) == 3 and len(prototypes) == 4 and all(isinstance(d, int) for d in (*shape, *prototypes)):
        batch, rows, cols = shape
        pb, m, ph, pw = prototypes
        if pb == batch and cols == n and m > 0 and rows > 4 + m and (pw, ph) == (w // 4, h // 4):
            return Yolov8Head(rows - 4 - m, m)
    raise DetectorError(f"{where}: outputs {list(shape)} and {list(prototypes)} fit no known -seg head for input "
                        f"{w}x{h} (YOLOv8-seg: [1, 4+C+32, {n}] and prototypes [1, 32, {h // 4}, {w // 4}])")
