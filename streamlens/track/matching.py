"""Matching tracks to detections: box overlap and the optimal assignment.

Example:
    >>> import numpy as np
    >>> tracks = np.array([[0, 0, 10, 10], [20, 0, 30, 10]], float)
    >>> found = np.array([[21, 0, 31, 10], [1, 0, 11, 10]], float)
    >>> matches, lone_tracks, lone_found = match_by_iou(box_iou(tracks, found), min_iou=0.3)
    >>> matches.tolist(), lone_tracks.tolist(), lone_found.tolist()
    ([[0, 1], [1, 0]], [], [])
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of every box in `a` `(N, 4)` with every box in `b` `(M, 4)`, both
    `(x1, y1, x2, y2)`: an `(N, M)` matrix.

    Example:
        >>> box_iou(np.array([[0, 0, 10, 10]]), np.array([[5, 0, 15, 10], [20, 20, 30, 30]])).round(3).tolist()
        [[0.333, 0.0]]
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    ax1, ay1, ax2, ay2 = (a[:, k:k + 1] for k in range(4))  # columns (N, 1)
    bx1, by1, bx2, by2 = b.T                                  # rows (M,)
    width = np.minimum(ax2, bx2) - np.maximum(ax1, bx1)
    height = np.minimum(ay2, by2) - np.maximum(ay1, by1)
    overlap = np.maximum(width, 0) * np.maximum(height, 0)
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - overlap
    return overlap / np.maximum(union, 1e-9)


def buffered_iou(a: np.ndarray, b: np.ndarray, grow: np.ndarray) -> np.ndarray:
    """`box_iou` with both boxes of every pair grown on every side by `grow` of their own width and
    height, one value per box of `a` `(N,)` (C-BIoU, Yang et al. 2023): boxes near each other overlap.

    Example:
        >>> a, b = np.array([[0, 0, 10, 10]]), np.array([[12, 0, 22, 10]])
        >>> buffered_iou(a, b, np.array([0.0])).tolist(), buffered_iou(a, b, np.array([0.25])).round(3).tolist()
        ([[0.0]], [[0.111]])
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    grow = np.asarray(grow, dtype=np.float64).reshape(-1, 1, 1)
    a_size, b_size = a[:, 2:] - a[:, :2], b[:, 2:] - b[:, :2]
    a = np.concatenate([a[:, :2] - grow[:, 0] * a_size, a[:, 2:] + grow[:, 0] * a_size], axis=1)  # (N, 4)
    b = np.concatenate([b[None, :, :2] - grow * b_size, b[None, :, 2:] + grow * b_size], axis=2)  # (N, M, 4)
    width = np.minimum(a[:, None, 2], b[..., 2]) - np.maximum(a[:, None, 0], b[..., 0])
    height = np.minimum(a[:, None, 3], b[..., 3]) - np.maximum(a[:, None, 1], b[..., 1])
    overlap = np.maximum(width, 0) * np.maximum(height, 0)
    union = ((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]))[:, None] + (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1]) - overlap
    return overlap / np.maximum(union, 1e-9)


def match_by_iou(similarity: np.ndarray, min_iou: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The assignment of rows (tracks) to columns (detections) with the largest total similarity,
    keeping only pairs with similarity >= `min_iou`.

    Returns `(matches (K, 2) of [row, column], unmatched rows, unmatched columns)`.
    """
    rows, cols = similarity.shape
    if rows == 0 or cols == 0:
        return np.empty((0, 2), np.intp), np.arange(rows), np.arange(cols)
    gated = np.where(similarity >= min_iou, similarity, 0.0)
    r, c = linear_sum_assignment(gated, maximize=True)
    keep = gated[r, c] > 0
    matches = np.stack([r[keep], c[keep]], axis=1)
    row_left, col_left = np.ones(rows, bool), np.ones(cols, bool)
    row_left[matches[:, 0]] = False
    col_left[matches[:, 1]] = False
    return matches, np.flatnonzero(row_left), np.flatnonzero(col_left)


def match_by_distance(distance: np.ndarray, max_distance: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The assignment of rows (tracks) to columns (detections) with the smallest total `distance`,
    keeping only pairs with distance <= `max_distance`; returns as `match_by_iou`.

    Example:
        >>> matches, rows, cols = match_by_distance(np.array([[1.0, 30.0], [2.0, 5.0]]), 9.0)
        >>> matches.tolist(), rows.tolist(), cols.tolist()
        ([[0, 0], [1, 1]], [], [])
    """
    rows, cols = distance.shape
    if rows == 0 or cols == 0:
        return np.empty((0, 2), np.intp), np.arange(rows), np.arange(cols)
    allowed = distance <= max_distance
    cost = np.where(allowed, distance, 1e9)  # beyond the gate: as many pairs within it as there can be
    r, c = linear_sum_assignment(cost)
    keep = allowed[r, c]
    matches = np.stack([r[keep], c[keep]], axis=1)
    row_left, col_left = np.ones(rows, bool), np.ones(cols, bool)
    row_left[matches[:, 0]] = False
    col_left[matches[:, 1]] = False
    return matches, np.flatnonzero(row_left), np.flatnonzero(col_left)
