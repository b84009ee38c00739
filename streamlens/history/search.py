"""Search by example over the history's tracks (tracks.py): which kept tracks look most like a
query vector, ranked by cosine similarity, and which embedding messages are fit to be kept.

`similar(db, vector, name, limit)` compares the query only with vectors of the same `name` and
dimension, the newest `MAX_SCANNED` of them, `CHUNK` rows at a time (a matrix product each, the best
`limit` carried over): its cost is bounded by those figures, not by how long the history is kept.

`by_track(db, stream, track, limit)` asks that for a kept track's vector, after putting first the
tracks that `reid.across` joined to it (the same `global_id` in the same run: the linker's decision,
which also weighed time and place, is better evidence than a cosine alone); `others=True` leaves
out the query's own stream.

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
from collections.abc import Iterable
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
#: the most tracks sharing the query's global_id that a search by track puts first
MAX_LINKED = 100


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
            exclude: int | Iterable[int] | None = None, most: int = MAX_SCANNED,
            skip_stream: str | None = None) -> list[dict[str, Any]]:
    """The `limit` kept tracks most like `vector` by embedding `name` (cosine similarity, best first),
    among the newest `most` of that name and dimension; `exclude`: tracks' keys left out (the query's
    own); `skip_stream`: a stream whose tracks are not scanned (the newest `most` are of the others).
    Each: `{"stream", "id", "score", "first_ts", "last_ts", "label", "global_id", "event", "key"}`
    (`event`: the id of the event that holds its snapshot, or None)."""
    query = unit(vector)
    limit = max(0, min(int(limit), MAX_LIMIT))
    if query is None or limit == 0:
        return []
    left_out = {exclude} if isinstance(exclude, int) else set(exclude or ())
    left_out_keys = np.fromiter(left_out, np.int64, len(left_out))
    best_keys, best_scores = np.empty(0, np.int64), np.empty(0, np.float32)
    for keys, matrix in tracks.vectors(db, name, query.size, most, CHUNK, skip_stream):
        norms = np.linalg.norm(matrix, axis=1)  # float16 rounding: each row renormalised
        scores = (matrix @ query) / np.where(norms > 0, norms, 1.0)
        if left_out_keys.size:
            scores[np.isin(keys, left_out_keys)] = -np.inf
        best_keys, best_scores = np.concatenate([best_keys, keys]), np.concatenate([best_scores, scores])
        if best_keys.size > limit:
            keep = np.argpartition(-best_scores, limit - 1)[:limit]
            best_keys, best_scores = best_keys[keep], best_scores[keep]
    order = [i for i in np.argsort(-best_scores, kind="stable") if np.isfinite(best_scores[i])]
    found = tracks.rows(db, best_keys[order].tolist())
    return [{**found[int(best_keys[i])], "score": round(float(best_scores[i]), 4)}
            for i in order if int(best_keys[i]) in found]


def linked(db: sqlite3.Connection, row: dict[str, Any], vector: np.ndarray, most: int = MAX_LINKED) -> list[dict]:
    """The tracks of `row`'s run that share its `global_id` (`reid.across` joined them: the same
    object) and have a vector of its name and length, other streams first, then by score; each with
    `score`. Empty without a global_id."""
    query = unit(vector)
    if row.get("global_id") is None or query is None:
        return []
    found = db.execute(
        "SELECT t.id, v.vector FROM tracks t JOIN vectors v ON v.track = t.id "
        "WHERE t.run = (SELECT run FROM tracks WHERE id = :key) AND t.global_id = :gid AND t.id != :key "
        "AND v.name = :name AND v.dim = :dim ORDER BY t.last_ts DESC LIMIT :most",
        {"key": row["key"], "gid": row["global_id"], "name": row["name"], "dim": query.size, "most": most}).fetchall()
    scores = {}
    for key, blob in found:
        other = unit(np.frombuffer(blob, "<f2").astype(np.float32))
        scores[key] = round(float(other @ query), 4) if other is not None else 0.0
    rows = tracks.rows(db, scores)
    out = [{**rows[k], "score": scores[k]} for k in scores if k in rows]
    return sorted(out, key=lambda r: (r["stream"] == row["stream"], -r["score"]))


def by_track(db: sqlite3.Connection, stream: str, track: int, limit: int, *, name: str | None = None,
             at: float | None = None, others: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """(the query track, the `limit` tracks most like it but itself) for track `track` of `stream`
    (`tracks.find`: by `name`, else `reid` or any; the run's nearest `at`, else the newest); None when
    no such track has a vector. The tracks that `reid.across` joined to it (`linked`: the same
    `global_id` in its run) come first, then the rest by similarity; each result says `linked`.
    `others`: only other streams' tracks."""
    found = tracks.find(db, stream, track, name, at)
    if found is None:
        return None
    row, vector = found
    limit = max(0, min(int(limit), MAX_LIMIT))
    joined = [r for r in linked(db, row, vector) if not (others and r["stream"] == row["stream"])][:limit]
    rest = similar(db, vector, row["name"], limit - len(joined), exclude=[row["key"], *(r["key"] for r in joined)],
                   skip_stream=row["stream"] if others else None)
    return row, [{**r, "linked": True} for r in joined] + [{**r, "linked": False} for r in rest]


__all__ = ["Vectors", "similar", "linked", "by_track", "unit", "MAX_SCANNED", "CHUNK", "MAX_DIM", "MAX_LIMIT",
           "MAX_LINKED"]
