"""The history database: one SQLite file, two tables of events and counts, and the tracks kept for
search by example (tracks.py).

- `events`: every event message as it was published (`message`, compact JSON), with its wall time
  `ts`, `stream`, `event` kind, `rule` (the line or zone; null for the `object_*` events) and the
  object's `label`.
- `counts`: per minute (`minute`: its first second, Unix time), stream, rule and label, the line
  crossings each way (`n_in`, `n_out`) and the zone entries (`n`).

The file's `PRAGMA user_version` is `VERSION`; `create` brings an older file (version 0: events
and counts only) up to it by making the tables it lacks, and keeps what it holds.

Everything is derived from the events as they come, so the counts of a minute equal the events of
that minute, whoever reads them. Rows older than `keep_days` are deleted when the writer opens the
file and once an hour after. A `clip_lost` event (graph/publish/clips.py) marks the events recorded
with its clip's path (in the `MARK_WITHIN_S` before it) lost: their `clip` gains `"lost": true` and
the `reason`, as every later read gives them.

Example:
    >>> import sqlite3
    >>> db = sqlite3.connect(":memory:")
    >>> create(db)
    >>> add_events(db, [{"type": "event", "stream": "cam1", "event": "line_cross", "line": "gate",
    ...                  "direction": "in", "ts": 120.5, "object": {"label": "car"}}])
    1
    >>> buckets(db, bucket_s=60)
    [{'t': 120, 'stream': 'cam1', 'rule': 'gate', 'in': 1, 'out': 0, 'count': 0}]
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from typing import Any

from . import tracks

#: the schema's version, in the file's `PRAGMA user_version` (1: the tracks and their vectors)
VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, ts REAL NOT NULL, stream TEXT NOT NULL, event TEXT NOT NULL,
    rule TEXT, label TEXT, message TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_ts ON events (ts);
CREATE TABLE IF NOT EXISTS counts (
    minute INTEGER NOT NULL, stream TEXT NOT NULL, rule TEXT NOT NULL, label TEXT NOT NULL,
    n_in INTEGER NOT NULL DEFAULT 0, n_out INTEGER NOT NULL DEFAULT 0, n INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, stream, rule, label));
""" + tracks.SCHEMA

#: the longest a `buckets` answer may be, in rows (a wide window at a fine bucket is cut, oldest kept)
MAX_ROWS = 100_000
#: a `clip_lost` event marks the events with its clip's path recorded this long before it, at most
#: (seconds: a clip is at most 300 s, and its loss is told within a minute or two of its end)
MARK_WITHIN_S = 3600.0


def create(db: sqlite3.Connection) -> None:
    """Make the tables if they are not there (an existing history is kept as it is); in WAL mode,
    so that readers (the HTTP API, `streamlens history`) never wait for the writer nor it for them."""
    db.execute("PRAGMA journal_mode=WAL")
    if db.execute("PRAGMA user_version").fetchone()[0] < VERSION:
        db.executescript(SCHEMA + f"PRAGMA user_version = {VERSION};")


def check(db: sqlite3.Connection) -> str | None:
    """SQLite's `PRAGMA quick_check` of the open file: None when it is sound, else its first problem
    in one line (a corrupt page, a broken index). Raises `sqlite3.DatabaseError` for a file that is
    no SQLite database at all."""
    rows = db.execute("PRAGMA quick_check(1)").fetchall()
    first = str(rows[0][0]) if rows else "no answer"
    return None if first == "ok" else " ".join(first.split())


def unsound(path: str) -> str | None:
    """Why the history file at `path` cannot be used, in one line (`check`'s answer, or SQLite's
    error: `file is not a database`), or None when it is sound or not there yet (it is made).
    Opened read-only: a run may be writing it."""
    if not os.path.isfile(path):
        return None
    try:
        with contextlib.closing(connect(path, readonly=True)) as db:
            return check(db)
    except sqlite3.Error as e:
        return " ".join(str(e).split())


def connect(path: str, *, readonly: bool = False) -> sqlite3.Connection:
    """The writer's connection, which never waits for a lock (`sqlite3.OperationalError` at once
    instead); `readonly`: a reader's, of an existing file only, which waits a second at most."""
    if readonly:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0, check_same_thread=False)
    return sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)


def rule_of(message: dict[str, Any]) -> str | None:
    return message.get("line") or message.get("zone")


def add_events(db: sqlite3.Connection, messages: list[dict[str, Any]]) -> int:
    """Record `messages` (event messages) and add them to the counts, in one transaction; returns
    how many were recorded."""
    return add(db, "", messages)


def add(db: sqlite3.Connection, run: str, messages: list[dict[str, Any]], *,
        vectors: Iterable[tuple] = (), global_ids: Iterable[tuple] = (), ignored: dict[str, int] | None = None) -> int:
    """In one transaction: record `messages` (event messages), add them to the counts and note their
    tracks; keep `vectors` (stream, track, name, unit vector, ts) and `global_ids` (stream, track,
    global_id, ts) with the tracks of run `run` (the writer's token), and count the embedding
    messages `ignored` per reason. Returns how many events were recorded."""
    counts = {}
    for m in messages:
        rule, ts = rule_of(m), float(m.get("ts") or 0.0)
        if rule is None or m["event"] not in ("line_cross", "zone_enter"):
            continue
        key = (int(ts // 60) * 60, m["stream"], rule, (m.get("object") or {}).get("label") or "")
        n_in, n_out, n = counts.get(key, (0, 0, 0))
        if m["event"] == "zone_enter":
            n += 1
        elif m.get("direction") == "in":
            n_in += 1
        else:
            n_out += 1
        counts[key] = (n_in, n_out, n)
    db.execute("BEGIN")
    try:
        for m in messages:
            label = (m.get("object") or {}).get("label") or ""
            event_id = db.execute("INSERT INTO events (ts, stream, event, rule, label, message) VALUES (?, ?, ?, ?, ?, ?)",
                                  (float(m.get("ts") or 0.0), m["stream"], m["event"], rule_of(m), label,
                                   json.dumps(m, separators=(",", ":")))).lastrowid
            tracks.note_event(db, run, event_id, m)
        db.executemany("INSERT INTO counts (minute, stream, rule, label, n_in, n_out, n) VALUES (?, ?, ?, ?, ?, ?, ?) "
                       "ON CONFLICT (minute, stream, rule, label) DO UPDATE SET n_in = n_in + excluded.n_in, "
                       "n_out = n_out + excluded.n_out, n = n + excluded.n",
                       [(*key, *value) for key, value in counts.items()])
        for m in messages:
            if m["event"] == "clip_lost":
                _mark_clip_lost(db, m)
        for stream, track, name, vector, ts in vectors:
            tracks.note_vector(db, run, stream, track, name, vector, ts)
        for stream, track, global_id, ts in global_ids:
            tracks.note_global_id(db, run, stream, track, global_id, ts)
        if ignored:
            tracks.note_ignored(db, ignored)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return len(messages)


def _mark_clip_lost(db: sqlite3.Connection, message: dict[str, Any]) -> None:
    """The events of `message`'s stream recorded with its clip's path mark that clip lost (see the module)."""
    clip = message.get("clip") or {}
    path, reason = clip.get("path"), clip.get("reason")
    if not isinstance(path, str):
        return
    db.execute("UPDATE events SET message = json_set(message, '$.clip.lost', json('true'), '$.clip.reason', ?) "
               "WHERE ts >= ? AND stream = ? AND event != 'clip_lost' AND json_extract(message, '$.clip.path') = ?",
               (reason if isinstance(reason, str) else None, float(message.get("ts") or 0.0) - MARK_WITHIN_S,
                message["stream"], path))


def prune(db: sqlite3.Connection, keep_days: float, now: float | None = None) -> int:
    """Delete what is older than `keep_days` (events, counts, and the tracks last seen before);
    returns the events deleted."""
    horizon = (time.time() if now is None else now) - keep_days * 86400
    db.execute("BEGIN")
    try:
        deleted = db.execute("DELETE FROM events WHERE ts < ?", (horizon,)).rowcount
        db.execute("DELETE FROM counts WHERE minute + 60 <= ?", (horizon,))
        tracks.prune(db, horizon)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return deleted


def buckets(db: sqlite3.Connection, *, stream: str | None = None, rule: str | None = None,
            since: float | None = None, until: float | None = None, bucket_s: int = 60) -> list[dict[str, Any]]:
    """The counts per `bucket_s` (a multiple of 60 is exact; buckets start at multiples of it, Unix
    time), per stream and rule, every label summed, oldest first: `{"t", "stream", "rule", "in",
    "out", "count"}`. `since` and `until` bound the minutes taken (Unix time; `until` excluded)."""
    bucket_s = max(60, int(bucket_s))
    where, args = ["1"], []
    for column, value in (("stream", stream), ("rule", rule)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if since is not None:
        where.append("minute >= ?")
        args.append(int(since // 60) * 60)
    if until is not None:
        where.append("minute < ?")
        args.append(until)
    rows = db.execute(f"SELECT (minute / {bucket_s}) * {bucket_s} AS t, stream, rule, SUM(n_in), SUM(n_out), SUM(n) "
                      f"FROM counts WHERE {' AND '.join(where)} GROUP BY t, stream, rule ORDER BY t, stream, rule "
                      f"LIMIT {MAX_ROWS}", args).fetchall()
    return [{"t": t, "stream": s, "rule": r, "in": i, "out": o, "count": n} for t, s, r, i, o, n in rows]


def events_after(db: sqlite3.Connection, after_id: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
    """(id, message) of the events recorded after `after_id`, oldest first, the newest `limit`."""
    rows = db.execute("SELECT id, message FROM events WHERE id > ? ORDER BY id DESC LIMIT ?",
                      (after_id, max(0, limit))).fetchall()
    return [(i, json.loads(m)) for i, m in reversed(rows)]


def event(db: sqlite3.Connection, event_id: int) -> dict[str, Any] | None:
    """The message of event `event_id`, or None."""
    row = db.execute("SELECT message FROM events WHERE id = ?", (event_id,)).fetchone()
    return None if row is None else json.loads(row[0])


__all__ = ["event", "check", "unsound", "create", "connect", "add_events", "add", "VERSION", "prune", "buckets", "events_after", "MAX_ROWS",
           "MARK_WITHIN_S"]
