"""Tracking scores as MOTChallenge computes them: HOTA, CLEAR (MOTA) and identity (IDF1).

The metric arithmetic is the `trackers` package's TrackEval-compatible implementation
(`trackers.eval`); this module prepares a sequence the way TrackEval's `MotChallenge2DBox` does:

- MOT16/17/20 ground truth (a class column): only rows of class 1 (pedestrian) with the consider
  flag set are scored; a tracker box that overlaps a distractor (person on vehicle 2, static person 7,
  distractor 8, reflection 12; MOT20 also non-MOT vehicle 6) at IoU >= 0.5 in the optimal one-to-one
  matching is removed before scoring (neither a hit nor a false positive);
- 2D MOT 2015 ground truth (no classes): every row with the consider flag set is scored and nothing is
  removed.
Boxes overlap by their continuous IoU; ids are renumbered per sequence.

Scores print as percentages, as MOTChallenge does.

Example:
    >>> import numpy as np
    >>> gt = np.array([[1, 1, 10, 10, 20, 40, 1, 1, 1.0], [2, 1, 12, 10, 20, 40, 1, 1, 1.0]])
    >>> tracked = np.array([[1, 7, 10, 10, 20, 40, 1, -1, -1], [2, 7, 12, 10, 20, 40, 1, -1, -1.0]])
    >>> scores = score_sequence("demo", gt, tracked)
    >>> (round(scores.hota, 1), round(scores.mota, 1), round(scores.idf1, 1))
    (100.0, 100.0, 100.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

PEDESTRIAN = 1
#: distractor classes per benchmark (TrackEval's MotChallenge2DBox)
DISTRACTORS = {"MOT16": (2, 7, 8, 12), "MOT17": (2, 7, 8, 12), "MOT20": (2, 6, 7, 8, 12)}
#: the IoU at which CLEAR and identity metrics count a match, and distractor boxes are removed
MATCH_IOU = 0.5
_EPS = np.finfo(float).eps


@dataclass
class SequenceScores:
    """One sequence's (or a combination's) scores, as `trackers.eval` computes them: `clear`,
    `hota` and `identity` hold its dictionaries (fractions); the properties give percentages."""

    name: str
    clear: dict[str, Any] = field(repr=False)
    hota_detail: dict[str, Any] = field(repr=False)
    identity: dict[str, Any] = field(repr=False)

    @property
    def hota(self) -> float:
        return 100.0 * self.hota_detail["HOTA"]

    @property
    def deta(self) -> float:
        return 100.0 * self.hota_detail["DetA"]

    @property
    def assa(self) -> float:
        return 100.0 * self.hota_detail["AssA"]

    @property
    def mota(self) -> float:
        return 100.0 * self.clear["MOTA"]

    @property
    def idf1(self) -> float:
        return 100.0 * self.identity["IDF1"]

    def summary(self) -> dict[str, float | int]:
        """The figures a person reads: percentages and counts."""
        c, i = self.clear, self.identity
        return {"HOTA": self.hota, "DetA": self.deta, "AssA": self.assa, "MOTA": self.mota, "IDF1": self.idf1,
                "IDP": 100 * i["IDP"], "IDR": 100 * i["IDR"], "Rcll": 100 * c["CLR_Re"], "Prcn": 100 * c["CLR_Pr"],
                "MOTP": 100 * c["MOTP"], "GT": c["MT"] + c["PT"] + c["ML"], "MT": c["MT"], "PT": c["PT"],
                "ML": c["ML"], "FP": c["CLR_FP"], "FN": c["CLR_FN"], "IDs": c["IDSW"], "FM": c["Frag"]}


@dataclass
class PreparedSequence:
    """Per frame: the scored ground-truth ids, the kept tracker ids (both renumbered from 0) and
    their IoU matrix; the input of every `trackers.eval` metric."""

    gt_ids: list[np.ndarray]
    tracker_ids: list[np.ndarray]
    similarity: list[np.ndarray]


def read_mot_file(path: str | Path) -> np.ndarray:
    """Rows of a MOTChallenge text file (comma- or space-separated) as a float array `(N, >= 7)`;
    missing trailing columns read as -1."""
    rows = []
    for line in Path(path).read_text().splitlines():
        values = line.replace(",", " ").split()
        if values:
            rows.append([float(v) for v in values])
    if not rows:
        return np.empty((0, 10))
    width = max(10, max(len(r) for r in rows))
    return np.array([r + [-1.0] * (width - len(r)) for r in rows])


def benchmark_of(gt: np.ndarray) -> str:
    """`MOT17` when the ground truth has MOT16/17/20's columns (an integer class 1 to 13, then a
    visibility 0 to 1), else `MOT15` (whose columns 8 to 10 are world coordinates, or -1).

    Example:
        >>> mot17_row, mot15_row = [1, 1, 0, 0, 5, 5, 1, 7, 0.5, -1], [1, 1, 0, 0, 5, 5, 1, -1, -1, -1]
        >>> benchmark_of(np.array([mot17_row])), benchmark_of(np.array([mot15_row]))
        ('MOT17', 'MOT15')
    """
    if len(gt) == 0:
        return "MOT15"
    classes, visibility = gt[:, 7], gt[:, 8]
    has_classes = np.all((classes == np.round(classes)) & (classes >= 1) & (classes <= 13))
    return "MOT17" if has_classes and np.all((visibility >= 0) & (visibility <= 1)) else "MOT15"


def prepare_sequence(gt: np.ndarray, tracked: np.ndarray, frames: int | None = None,
                     benchmark: str | None = None) -> PreparedSequence:
    """Per-frame ids and IoUs of ground truth `gt` and tracker output `tracked` (MOTChallenge rows),
    filtered as TrackEval's MotChallenge2DBox does for `benchmark` (guessed from `gt` when None)."""
    benchmark = benchmark or benchmark_of(gt)
    distractors = DISTRACTORS.get(benchmark)
    frames = frames or int(max(gt[:, 0].max(initial=0), tracked[:, 0].max(initial=0)))
    gt_by_frame, tracked_by_frame = _by_frame(gt, frames), _by_frame(tracked, frames)
    gt_ids, tracker_ids, similarity = [], [], []
    for gt_rows, tracker_rows in zip(gt_by_frame, tracked_by_frame):
        iou = _iou_xywh(gt_rows[:, 2:6], tracker_rows[:, 2:6])
        if distractors is not None:
            keep_tracker = ~_matches_distractor(iou, np.isin(gt_rows[:, 7], distractors))
            keep_gt = (gt_rows[:, 6] != 0) & (gt_rows[:, 7] == PEDESTRIAN)
        else:
            keep_tracker = np.ones(len(tracker_rows), bool)
            keep_gt = gt_rows[:, 6] != 0
        gt_ids.append(gt_rows[keep_gt, 1].astype(np.int64))
        tracker_ids.append(tracker_rows[keep_tracker, 1].astype(np.int64))
        similarity.append(iou[np.ix_(keep_gt, keep_tracker)])
    return PreparedSequence(_renumber(gt_ids), _renumber(tracker_ids), similarity)


def score_sequence(name: str, gt: np.ndarray, tracked: np.ndarray, frames: int | None = None,
                   benchmark: str | None = None) -> SequenceScores:
    """HOTA, CLEAR and identity scores of one sequence (MOTChallenge rows in, see `prepare_sequence`)."""
    from trackers.eval import compute_clear_metrics, compute_hota_metrics, compute_identity_metrics

    seq = prepare_sequence(gt, tracked, frames, benchmark)
    args = (seq.gt_ids, seq.tracker_ids, seq.similarity)
    return SequenceScores(name, clear=compute_clear_metrics(*args, threshold=MATCH_IOU),
                          hota_detail=compute_hota_metrics(*args),
                          identity=compute_identity_metrics(*args, threshold=MATCH_IOU))


def combine(scores: list[SequenceScores], name: str = "COMBINED") -> SequenceScores:
    """The scores of several sequences together, as TrackEval combines them (counts summed,
    association scores weighted by true positives)."""
    from trackers.eval import aggregate_clear_metrics, aggregate_hota_metrics, aggregate_identity_metrics

    return SequenceScores(name, clear=aggregate_clear_metrics([s.clear for s in scores]),
                          hota_detail=aggregate_hota_metrics([s.hota_detail for s in scores]),
                          identity=aggregate_identity_metrics([s.identity for s in scores]))


def format_table(scores: list[SequenceScores]) -> str:
    """A plain text table: one row per sequence (the combination last, when given)."""
    columns = ["HOTA", "DetA", "AssA", "MOTA", "IDF1", "Rcll", "Prcn", "FP", "FN", "IDs"]
    width = max([len(s.name) for s in scores] + [8])
    lines = [f"{'sequence':<{width}} " + " ".join(f"{c:>7}" for c in columns)]
    for s in scores:
        figures = s.summary()
        cells = [f"{figures[c]:7.1f}" if isinstance(figures[c], float) else f"{figures[c]:7d}" for c in columns]
        lines.append(f"{s.name:<{width}} " + " ".join(cells))
    return "\n".join(lines)


def _by_frame(rows: np.ndarray, frames: int) -> list[np.ndarray]:
    """Rows grouped by frame number 1..frames (rows outside that range are ignored)."""
    order = np.argsort(rows[:, 0], kind="stable")
    rows = rows[order]
    numbers = rows[:, 0].astype(np.int64)
    starts = np.searchsorted(numbers, np.arange(1, frames + 2))
    return [rows[starts[i]:starts[i + 1]] for i in range(frames)]


def _iou_xywh(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every `(x, y, w, h)` box in `a` with every one in `b`."""
    a_end, b_end = a[:, :2] + a[:, 2:], b[:, :2] + b[:, 2:]
    low = np.maximum(a[:, None, :2], b[None, :, :2])
    high = np.minimum(a_end[:, None], b_end[None])
    overlap = np.prod(np.clip(high - low, 0, None), axis=2)
    union = np.prod(a[:, 2:], axis=1)[:, None] + np.prod(b[:, 2:], axis=1)[None] - overlap
    return np.divide(overlap, union, out=np.zeros_like(overlap), where=union > _EPS)


def _matches_distractor(iou: np.ndarray, is_distractor: np.ndarray) -> np.ndarray:
    """Tracker boxes matched (optimal one-to-one, IoU >= 0.5) to a distractor ground-truth box."""
    removed = np.zeros(iou.shape[1], bool)
    if iou.size == 0 or not is_distractor.any():
        return removed
    scores = np.where(iou >= MATCH_IOU - _EPS, iou, 0.0)
    rows, cols = linear_sum_assignment(-scores)
    matched = scores[rows, cols] > _EPS
    removed[cols[matched & is_distractor[rows]]] = True
    return removed


def _renumber(ids: list[np.ndarray]) -> list[np.ndarray]:
    """Ids renumbered 0..K-1 across the sequence (the metrics index arrays by id)."""
    every = np.unique(np.concatenate(ids)) if ids else np.empty(0, np.int64)
    return [np.searchsorted(every, frame_ids) for frame_ids in ids]
