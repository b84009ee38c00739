"""The tracks of the history database, for search by example: what each tracked object looked like
(its summary embedding), when it was seen, and which event holds its snapshot.

- `tracks`: one row per run, stream and track id (`run`: the writer's token, so that a track id
  used again by a later run is another row): `first_ts` and `last_ts`, the wall times (`ts`, Unix
  time) of the first and last of its events, embeddings and frames that tell its `global_id` (an
  `object_end` comes `analytics.end_after_s` after the object was last seen; its own `first_ts` and
  `last_ts` are the stream's media time, not wall time), the newest `label` and `global_id`, and `shot_event`: the id in `events`
  of its best snapshot (an `object_end` one, else an `object_start` one).
  Read back, a track is `{"key", "stream", "id", "first_ts", "last_ts", "label", "global_id",
  "event", "snapshot_path"}` (`event`: that event's id; `snapshot_path`: where its JPEG was written).
- `vectors`: per track and embedding `name`, the newest vector (`dim` float16 numbers, little
  endian, a unit vector) and the time it came with.
- `ignored`: per reason, the embedding messages that were not kept (search.py says which).

The rows go with the events: `prune` deletes the tracks last seen before the events' horizon.

Example:
    >>> import sqlite3
    >>> import numpy as np
    >>> from streamlens.history import store
    >>> db = sqlite3.connect(":memory:", isolation_level=None)
    >>> store.create(db)
    >>> note_vector(db, "run1", "cam1", 7, "reid", np.array([0.6, 0.8], np.float32), 100.0)
    >>> row, vector = find(db, "cam1", 7, None, None)
    >>> row["first_ts"], row["name"], vector.tolist()
    (100.0, 'reid', [0.60009765625, 0.7998046875])
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS tracks (
    id INTEGER PRIMARY KEY, run TEXT NOT NULL, stream TEXT NOT NULL, track INTEGER NOT NULL,
    first_ts REAL NOT NULL, last_ts REAL NOT NULL, label TEXT, global_id INTEGER,
    shot_event INTEGER, shot_rank INTEGER NOT NULL DEFAULT 0,
    UNIQUE (run, stream, track));
CREATE INDEX IF NOT EXISTS tracks_last ON tracks (last_ts);
CREATE INDEX IF NOT EXISTS tracks_stream ON tracks (stream, track);
CREATE TABLE IF NOT EXISTS vectors (
    track INTEGER NOT NULL, name TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL, ts REAL NOT NULL,
    PRIMARY KEY (track, name));
CREATE INDEX IF NOT EXISTS vectors_name ON vectors (name, dim, ts);
CREATE TABLE IF NOT EXISTS ignored (reason TEXT PRIMARY KEY, n INTEGER NOT NULL);
"""

#: how a track's snapshot is ranked: an `object_end` one shows its best-scoring view
SHOT_RANK = {"object_start": 1, "object_end": 2}

_UPSERT = """
INSERT INTO tracks (run, stream, track, first_ts, last_ts, label, global_id, shot_event, shot_rank)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run, stream, track) DO UPDATE SET
    first_ts = MIN(first_ts, excluded.first_ts), last_ts = MAX(last_ts, excluded.last_ts),
    label = COALESCE(excluded.label, label), global_id = COALESCE(excluded.global_id, global_id),
    shot_event = CASE WHEN excluded.shot_rank > shot_rank THEN excluded.shot_event ELSE shot_event END,
    shot_rank = MAX(shot_rank, excluded.shot_rank)
"""


def _track_id(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62 else None


def note_event(db: sqlite3.Connection, run: str, event_id: int, message: dict[str, Any]) -> None:
    """The tracked object of event `message` (recorded as `event_id`): its times, label and
    snapshot. Events of no tracked object (id -1, a `clip_lost`) are passed over. In the caller's
    transaction."""
    obj = message.get("object")
    track = _track_id(obj.get("id")) if isinstance(obj, dict) else None
    if track is None:
        return
    ts = float(message.get("ts") or 0.0)
    rank = SHOT_RANK.get(message.get("event"), 0) if isinstance(message.get("snapshot"), dict) else 0
    label = obj.get("label") if isinstance(obj.get("label"), str) else None
    db.execute(_UPSERT, (run, message["stream"], track, ts, ts, label, None, event_id if rank else None, rank))


def note_vector(db: sqlite3.Connection, run: str, stream: str, track: int, name: str, vector: np.ndarray,
                ts: float) -> None:
    """Track `track` of `stream` has embedding `vector` (a unit vector) by `name` at `ts`: the newest
    is kept. In the caller's transaction."""
    db.execute(_UPSERT, (run, stream, track, ts, ts, None, None, None, 0))
    db.execute("INSERT INTO vectors (track, name, dim, vector, ts) "
               "VALUES ((SELECT id FROM tracks WHERE run = ? AND stream = ? AND track = ?), ?, ?, ?, ?) "
               "ON CONFLICT (track, name) DO UPDATE SET dim = excluded.dim, vector = excluded.vector, "
               "ts = excluded.ts WHERE excluded.ts >= ts",
               (run, stream, track, name, int(vector.size), vector.astype("<f2").tobytes(), ts))


def note_global_id(db: sqlite3.Connection, run: str, stream: str, track: int, global_id: int, ts: float) -> None:
    """Track `track` of `stream` carries `global_id` on a frame at `ts`. In the caller's transaction."""
    db.execute(_UPSERT, (run, stream, track, ts, ts, None, global_id, None, 0))


def note_ignored(db: sqlite3.Connection, reasons: dict[str, int]) -> None:
    """Add embedding messages not kept, per reason. In the caller's transaction."""
    db.executemany("INSERT INTO ignored (reason, n) VALUES (?, ?) ON CONFLICT (reason) DO UPDATE SET n = n + excluded.n",
                   [(r, n) for r, n in reasons.items() if n])


def prune(db: sqlite3.Connection, horizon: float) -> int:
    """Delete the tracks last seen before `horizon` and their vectors; returns the tracks deleted.
    In the caller's transaction."""
    db.execute("DELETE FROM vectors WHERE track IN (SELECT id FROM tracks WHERE last_ts < ?)", (horizon,))
    return db.execute("DELETE FROM tracks WHERE last_ts < ?", (horizon,)).rowcount


# -- reading ------------------------------------------------------------------------------------

_COLUMNS = ("t.id, t.stream, t.track, t.first_ts, t.last_ts, t.label, t.global_id, t.shot_event, "
            "(SELECT json_extract(e.message, '$.snapshot.path') FROM events e WHERE e.id = t.shot_event)")


def _row(values: tuple) -> dict[str, Any]:
    key, stream, track, first, last, label, global_id, shot, path = values
    return {"key": key, "stream": stream, "id": track, "first_ts": first, "last_ts": last, "label": label,
            "global_id": global_id, "event": shot, "snapshot_path": path}


def _vector(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, "<f2").astype(np.float32)


def find(db: sqlite3.Connection, stream: str, track: int, name: str | None,
         at: float | None) -> tuple[dict[str, Any], np.ndarray] | None:
    """The track `track` of `stream` that has a vector (by `name`, else any: `reid` first), with
    that vector: of the run whose track was seen nearest `at` (Unix time), else the newest; None
    when there is none."""
    order = "t.last_ts DESC" if at is None else "MAX(t.first_ts - :at, :at - t.last_ts, 0), t.last_ts DESC"
    found = db.execute(f"SELECT {_COLUMNS}, v.name, v.vector FROM tracks t JOIN vectors v ON v.track = t.id "
                       f"WHERE t.stream = :stream AND t.track = :track AND (:name IS NULL OR v.name = :name) "
                       f"ORDER BY {order}, v.name != 'reid', v.name LIMIT 1",
                       {"stream": stream, "track": track, "name": name, "at": at}).fetchone()
    if found is None:
        return None
    row = _row(found[:9])
    row["name"] = found[9]
    return row, _vector(found[10])


def vectors(db: sqlite3.Connection, name: str, dim: int, most: int, chunk: int,
            skip_stream: str | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The newest `most` vectors by `name` of `dim` numbers (of tracks of other streams than
    `skip_stream`, when given), `chunk` rows at a time: (track keys, float32 matrix of the vectors)."""
    if skip_stream is None:
        cursor = db.execute("SELECT track, vector FROM vectors WHERE name = ? AND dim = ? ORDER BY ts DESC LIMIT ?",
                            (name, dim, most))
    else:
        cursor = db.execute("SELECT v.track, v.vector FROM vectors v JOIN tracks t ON t.id = v.track "
                            "WHERE v.name = ? AND v.dim = ? AND t.stream != ? ORDER BY v.ts DESC LIMIT ?",
                            (name, dim, skip_stream, most))
    while rows := cursor.fetchmany(chunk):
        keys = np.fromiter((k for k, _ in rows), np.int64, len(rows))
        matrix = np.frombuffer(b"".join(v for _, v in rows), "<f2").reshape(len(rows), dim).astype(np.float32)
        yield keys, matrix


def rows(db: sqlite3.Connection, keys: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The tracks of `keys` by key."""
    keys = [int(k) for k in keys]
    if not keys:
        return {}
    found = db.execute(f"SELECT {_COLUMNS} FROM tracks t WHERE t.id IN ({','.join('?' * len(keys))})", keys)
    return {values[0]: _row(values) for values in found}


def ignored(db: sqlite3.Connection) -> dict[str, int]:
    """The embedding messages not kept so far, per reason."""
    return dict(db.execute("SELECT reason, n FROM ignored ORDER BY reason").fetchall())


__all__ = ["SCHEMA", "note_event", "note_vector", "note_global_id", "note_ignored", "prune", "find", "vectors",
           "rows", "ignored"]
