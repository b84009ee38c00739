"""Search by example over the history's tracks (tracks.py): which kept tracks look most like a
query vector, ranked by cosine similarity, and which embedding messages are fit to be kept.

`similar(db, vector, name, limit)` compares the query only with vectors of the same `name` and
dimension, the newest `MAX_SCANNED` of them, `CHUNK` rows at a time (a matrix product each, the best
`limit` carried over): its cost is bounded by those figures, not by how long the history is kept.

`Vectors.take(message)` checks an `embedding` message before it is kept: a vector that is not a
list of numbers, has a non-finite number or none at all, is all zeros, is longer than `MAX_DIM`, or
is of another length than the first of its `name` in this run (a foreign model, a forged message)
is refused with its reason, counted by the caller, never kept.

Example:
    >>> import sqlite3
    >>> from . import store
    >>> db = sqlite3.connect(":memory:", isolation_level=None)
    >>> store.create(db)
    >>> store.add(db, "run1", [], vectors=[("cam1", 1, "reid", np.array([1, 0], np.float32), 10.0),
    ...                                    ("cam2", 5, "reid", np.array([0.8, 0.6], np.float32), 20.0),
    ...                                    ("cam2", 6, "reid", np.array([0, 1], np.float32), 30.0)])
    0
    >>> [(r["stream"], r["id"], round(r["score"], 2)) for r in similar(db, np.array([1, 0], np.float32), "reid", 2)]
    [('cam1', 1, 1.0), ('cam2', 5, 0.8)]
"""

from __future__ import annotations

import math
import sqlite3
from typing import Any

import numpy as np

from . import tracks

#: the most vectors one search compares with (the newest of the query's name and dimension)
MAX_SCANNED = 100_000
#: rows read and compared at a time (a float32 matrix of CHUNK x dim)
CHUNK = 8192
#: the most numbers an embedding may have
MAX_DIM = 4096
#: the most results one search answers
MAX_LIMIT = 100


class Vectors:
    """Checks the `embedding` messages of one run (see the module); `dims` holds the length each
    `name` was first seen with."""

    def __init__(self) -> None:
        self.dims: dict[str, int] = {}

    def take(self, message: dict[str, Any]) -> tuple[tuple | None, str | None]:
        """(stream, track, name, unit float32 vector, ts) fit to keep, or (None, why not)."""
        name, obj, raw = message.get("name"), message.get("object"), message.get("vector")
        track = obj.get("id") if isinstance(obj, dict) else None
        if not isinstance(name, str) or not isinstance(track, int) or isinstance(track, bool) or track < 0:
            return None, "no track or name"
        if not isinstance(raw, list) or not raw or len(raw) > MAX_DIM \
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in raw):
            return None, "not a list of numbers"
        vector = np.asarray(raw, np.float64)
        norm = float(np.linalg.norm(vector)) if np.isfinite(vector).all() else math.nan
        if not math.isfinite(norm) or norm == 0.0:
            return None, "not finite"
        if self.dims.setdefault(name, vector.size) != vector.size:
            return None, "wrong length for its name"
        ts = message.get("ts")
        ts = float(ts) if isinstance(ts, (int, float)) and math.isfinite(ts) else 0.0
        return (str(message.get("stream")), track, name, (vector / norm).astype(np.float32), ts), None


def unit(vector: np.ndarray) -> np.ndarray | None:
    """`vector` as a float32 unit vector, or None when it has no direction (zero, not finite)."""
    vector = np.asarray(vector, np.float32).ravel()
    norm = float(np.linalg.norm(vector))
    return None if not math.isfinite(norm) or norm == 0.0 else vector / norm


def similar(db: sqlite3.Connection, vector: np.ndarray, name: str, limit: int, *,
            exclude: int | None = None, most: int = MAX_SCANNED) -> list[dict[str, Any]]:
    """The `limit` kept tracks most like `vector` by embedding `name` (cosine similarity, best first),
    among the newest `most` of that name and dimension; `exclude`: a track's key left out (the query's
    own). Each: `{"stream", "id", "score", "first_ts", "last_ts", "label", "global_id", "event", "key"}`
    (`event`: the id of the event that holds its snapshot, or None)."""
    query = unit(vector)
    limit = max(0, min(int(limit), MAX_LIMIT))
    if query is None or limit == 0:
        return []
    best_keys, best_scores = np.empty(0, np.int64), np.empty(0, np.float32)
    for keys, matrix in tracks.vectors(db, name, query.size, most, CHUNK):
        norms = np.linalg.norm(matrix, axis=1)  # float16 rounding: each row renormalised
        scores = (matrix @ query) / np.where(norms > 0, norms, 1.0)
        if exclude is not None:
            scores[keys == exclude] = -np.inf
        best_keys, best_scores = np.concatenate([best_keys, keys]), np.concatenate([best_scores, scores])
        if best_keys.size > limit:
            keep = np.argpartition(-best_scores, limit - 1)[:limit]
            best_keys, best_scores = best_keys[keep], best_scores[keep]
    order = [i for i in np.argsort(-best_scores, kind="stable") if np.isfinite(best_scores[i])]
    found = tracks.rows(db, best_keys[order].tolist())
    return [{**found[int(best_keys[i])], "score": round(float(best_scores[i]), 4)}
            for i in order if int(best_keys[i]) in found]


def by_track(db: sqlite3.Connection, stream: str, track: int, limit: int, *, name: str | None = None,
             at: float | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """(the query track, the `limit` tracks most like it but itself) for track `track` of `stream`
    (`tracks.find`: by `name`, else `reid` or any; the run's nearest `at`, else the newest); None when
    no such track has a vector."""
    found = tracks.find(db, stream, track, name, at)
    if found is None:
        return None
    row, vector = found
    return row, similar(db, vector, row["name"], limit, exclude=row["key"])


__all__ = ["Vectors", "similar", "by_track", "unit", "MAX_SCANNED", "CHUNK", "MAX_DIM", "MAX_LIMIT"]
