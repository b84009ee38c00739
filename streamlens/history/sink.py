"""The writer of `runtime.history`: a sink that takes each event message (and each `embedding`
message, and each change of a track's `global_id` in the frames) on the engine's thread
without waiting (into a `Publisher` queue; full, the oldest is dropped and counted) and writes them
to the SQLite file (store.py) in batches on a thread of its own: everything queued, at most every
`BATCH_S`. A database that is locked by another program, full or failing is never waited for: the
batch is lost, counted in `failed`, and told once (and once more when writing works again); frames
go on. With `runtime.workers` the supervisor writes the one file from every engine's events.

`open()` makes the file and its tables (a folder or file that cannot be made is one line naming
`runtime.history.path`) and deletes what is older than `keep_days`, again once an hour. An existing
file is checked first (`store.check`: SQLite's `PRAGMA quick_check`): a corrupt one, or one that is
no database, is refused with one line naming it (the run does not start, exit 1), never used: it is
the operator's to move aside (a new file is then made) or to repair (`sqlite3 FILE .recover`).
`close()` writes what is still queued, for at most `CLOSE_S`.

Embedding messages keep each track's newest vector per `name` for search by example
(history/tracks.py); one that is malformed or foreign (history/search.py `Vectors`) is not kept but
counted (`ignored` in `counters()` and in the file's `ignored` table), told once when the first
comes and in a line at `close()`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections import Counter
from typing import Any

from ..config.runtime import HistoryConfig
from ..errors import SinkError
from ..frame import FrameResult, StreamEnd
from ..sinks.background import Publisher
from ..sinks.base import Sink
from . import store
from .search import Vectors

log = logging.getLogger("streamlens.history")

#: the longest an event waits in the queue before its batch is written
BATCH_S = 1.0
#: how often rows older than `keep_days` are deleted
PRUNE_EVERY_S = 3600.0
#: how long `close()` lets the writer finish what is queued
CLOSE_S = 5.0
#: the tracks whose `global_id` is remembered (to queue only its changes); past it, forgotten at once
GLOBAL_IDS_KEPT = 65_536


class HistorySink(Sink):
    """Events into the history file (see the module)."""

    name = "history"
    inline = True  # write() only queues

    def __init__(self, cfg: HistoryConfig):
        self.cfg = cfg
        self.path = cfg.path
        self._pub = Publisher(cfg.queue_size)
        #: events written, and events lost because the database refused a batch, per stream
        self.written: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self._failing: str | None = None  # why the last batch failed, while it fails
        self._db: sqlite3.Connection | None = None
        self._pruned_at = 0.0
        self._prepared = False  # the tables are there (not yet, while another program holds the file)
        #: this run's token in the file's tracks (a track id used again by a later run is another track)
        self.run = f"{time.time():.6f}-{os.getpid()}"
        self._vectors = Vectors()  # the writer's
        self.ignored: Counter[str] = Counter()  # embedding messages not kept, by reason
        self._global_ids: dict[tuple[str, int], object] = {}  # the engine thread's: (stream, id) -> global_id

    def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = store.connect(str(self.path))
            problem = store.check(self._db)
            if problem is not None:
                self._drop_db()
                raise SinkError(unsound_line(self.path, problem))
            self._prepare()
        except sqlite3.OperationalError as e:
            if not _busy(e):
                raise SinkError(f"runtime.history.path: cannot use {self.path} as the history database: {e}") from None
            self._failing = str(e)  # held by another program now: the writer tries again with each batch
            log.warning("runtime.history: cannot write to %s (%s); events are lost until it can", self.path, e)
        except sqlite3.DatabaseError as e:  # not a database, or one SQLite cannot read
            self._drop_db()
            raise SinkError(unsound_line(self.path, " ".join(str(e).split()))) from None
        except (OSError, sqlite3.Error) as e:
            raise SinkError(f"runtime.history.path: cannot use {self.path} as the history database: {e}") from None
        self._pub.start(self._work, "history")

    def _drop_db(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _prepare(self) -> None:
        """The tables made, and what is past `keep_days` deleted (at open, then hourly)."""
        store.create(self._db)
        store.prune(self._db, self.cfg.keep_days)
        self._pruned_at = time.monotonic()
        self._prepared = True

    def write(self, item: FrameResult | StreamEnd | Any, message: dict[str, Any], payload: bytes) -> None:
        kind = message.get("type")
        if kind == "frame":
            for changed in self._global_id_changes(message):
                self._queue(changed)
        elif kind in ("event", "embedding"):
            self._queue(message)

    def _queue(self, message: dict[str, Any]) -> None:
        with self._pub.cond:
            if self._pub.open:
                self._pub.put((message["stream"], message))
                if len(self._pub.queue) == 1:
                    self._pub.cond.notify()

    def _global_id_changes(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """The objects of frame `message` whose `global_id` is new or changed (`reid.across`), as
        messages of type `global_id` for the writer."""
        changed = []
        for obj in message.get("objects") or ():
            global_id = obj.get("global_id")
            if global_id is None:
                continue
            key = (message["stream"], obj.get("id"))
            if self._global_ids.get(key) != global_id:
                if len(self._global_ids) >= GLOBAL_IDS_KEPT:
                    self._global_ids.clear()
                self._global_ids[key] = global_id
                changed.append({"type": "global_id", "stream": message["stream"], "id": obj.get("id"),
                                "global_id": global_id, "ts": message.get("ts")})
        return changed

    def _work(self) -> None:
        pub = self._pub
        while True:
            with pub.cond:
                if not pub.queue and not pub.closing and not pub.stop.is_set():
                    pub.cond.wait()
                if pub.stop.is_set():
                    return
                if not pub.queue:
                    if pub.closing:
                        return
                    continue
            if not pub.closing and pub.stop.wait(BATCH_S):  # more come meanwhile: one batch for them all
                return
            with pub.cond:
                batch = list(pub.queue)
                pub.queue.clear()
                pub.taken.extend(batch)
            self._write(batch)
            with pub.cond:
                pub.taken.clear()

    def _split(self, batch: list[tuple[str, dict]]) -> tuple[list, list, list, Counter]:
        """`batch` as (events, vectors, global ids, embedding messages ignored by reason)."""
        events, vectors, global_ids, ignored = [], [], [], Counter()
        for _, m in batch:
            kind = m["type"]
            if kind == "event":
                events.append(m)
            elif kind == "global_id":
                if isinstance(m["id"], int) and isinstance(m["global_id"], int) and m["id"] >= 0:
                    global_ids.append((m["stream"], m["id"], m["global_id"], float(m.get("ts") or 0.0)))
            else:
                kept, why = self._vectors.take(m)
                if kept is None:
                    ignored[why] += 1
                else:
                    vectors.append(kept)
        return events, vectors, global_ids, ignored

    def _write(self, batch: list[tuple[str, dict]]) -> None:
        events, vectors, global_ids, ignored = self._split(batch)
        if ignored:
            if not self.ignored:
                log.warning("runtime.history: an embedding message was not kept for search (%s); they are counted",
                            next(iter(ignored)))
            with self._pub.cond:
                self.ignored.update(ignored)
        try:
            if not self._prepared or time.monotonic() - self._pruned_at >= PRUNE_EVERY_S:
                self._prepare()
            store.add(self._db, self.run, events, vectors=vectors, global_ids=global_ids, ignored=ignored)
        except sqlite3.Error as e:
            with self._pub.cond:
                for stream, _ in batch:
                    self.failed[stream] += 1
            if self._failing is None:
                log.warning("runtime.history: cannot write to %s (%s); events are lost until it can", self.path, e)
            self._failing = str(e)
            return
        with self._pub.cond:
            for stream, _ in batch:
                self.written[stream] += 1
        if self._failing is not None:
            log.warning("runtime.history: writing to %s again (%d events lost meanwhile)", self.path,
                        sum(self.failed.values()))
            self._failing = None

    def interrupt(self) -> None:
        self._pub.interrupt()

    def close(self) -> None:
        left = self._pub.close(CLOSE_S)
        if left:
            log.warning("runtime.history: %d events not written: the database did not take them in time", left)
        if self.ignored:
            log.warning("runtime.history: %d embedding message(s) not kept for search (%s)", sum(self.ignored.values()),
                        ", ".join(f"{why}: {n}" for why, n in sorted(self.ignored.items())))
        if self._db is not None:
            self._db.close()
            self._db = None

    def drops(self) -> dict[str, int]:
        with self._pub.cond:
            return dict(self._pub.dropped + self.failed)

    def counters(self) -> dict[str, int]:
        with self._pub.cond:
            return {"written": sum(self.written.values()), "failed": sum(self.failed.values()),
                    "dropped": sum(self._pub.dropped.values()), "ignored": sum(self.ignored.values())}


def unsound_line(path, problem: str) -> str:
    """The one line that refuses a history file that is corrupt or no database (`problem`: why)."""
    return (f"runtime.history.path: {path} is not a sound history database ({problem}); move it aside "
            f"(a new one is made) or repair it (sqlite3 {path} .recover)")


def _busy(error: sqlite3.Error) -> bool:
    """Whether `error` is another connection's lock (which passes), not a file that cannot be used."""
    return any(word in str(error) for word in ("locked", "busy"))


__all__ = ["HistorySink", "BATCH_S", "unsound_line"]
