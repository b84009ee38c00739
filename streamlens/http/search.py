"""Search by example over `runtime.history` (streamlens/history/search.py), for the page and for scripts:

- `GET /api/search?stream=S&id=N[&limit=K][&name=E][&at=T][&others=1]`: the tracks most like track
  `N` of stream `S` (its embedding by `name`, else `reid`, else any; of the run whose track was
  seen nearest Unix time `at`, else the newest), the track itself left out; the tracks that
  `reid.across` joined to it (the same `global_id` in its run) first, then the rest by similarity;
  `others=1`: other streams' tracks only. 404 when no such track has an embedding kept.
- `POST /api/search[?limit=K]` with a JPEG crop as the body (`Content-Type: image/jpeg`): the tracks
  most like it, the crop described as the `reid` embeddings are (streamlens/history/crop.py) and
  compared only with `reid` vectors of its length. The body is at most `MAX_IMAGE` bytes, said
  beforehand in `Content-Length` (411 without, 413 past), whole within `BODY_DEADLINE_S` (408), a
  crop of at most 4096 pixels a side; one that is no JPEG or cannot be decoded is 400.

Both answer `{"query", "name", "dim", "scanned_at_most", "ignored", "results"}`: each result
`{"rank", "stream", "id", "score", "linked", "label", "first_ts", "last_ts", "global_id", "event",
"snapshot"}`, best first (`score`: cosine similarity, 1 the same look; `linked`: joined to the query
by `reid.across`, always false for a crop; `snapshot`: the URL of its best snapshot,
`/api/events/<event>/snapshot.jpg`, or null), at most `limit` (default 10, at most 100);
`ignored`: the embedding messages not kept so far, by reason. Without `runtime.history`, 404.

Bounds: each search compares with at most the newest `MAX_SCANNED` vectors of its name and length
(a float32 matrix product over chunks); searches run on one thread of their own, at most
`PER_PEER` in hand for each client address and `MAX_SEARCHES` for all (429 and 503, with
`Retry-After`, past them).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import Counter
from typing import Any

from ..history import store, tracks
from ..history.search import MAX_LIMIT, MAX_SCANNED, by_track, similar
from .numbers import MAX_UNIX_TIME, BadNumber, query_float, query_int
from .reply import Reply, json_reply, text_reply

#: the largest JPEG a `POST /api/search` takes, in bytes
MAX_IMAGE = 2 << 20
#: seconds a `POST /api/search` has to send its whole body
BODY_DEADLINE_S = 10.0
#: searches in hand (answered or waiting for the thread) per client address, and for all together
PER_PEER, MAX_SEARCHES = 2, 8
#: results when the query names no `limit`
DEFAULT_LIMIT = 10


class Searches:
    """`/api/search` over one run's history file (see the module). `admit`/`done` on the server's
    event loop; `by_track`/`by_image` on the search thread."""

    def __init__(self, pipeline) -> None:
        self.pipeline = pipeline
        self._in_hand: Counter[str] = Counter()

    def admit(self, peer: str) -> Reply | None:
        """None when `peer` may search now (then `done(peer)` after), else the refusal."""
        if self._in_hand[peer] >= PER_PEER:
            return text_reply(429, f"search: at most {PER_PEER} searches at once per client", {"Retry-After": "1"})
        if sum(self._in_hand.values()) >= MAX_SEARCHES:
            return text_reply(503, f"search: busy with {MAX_SEARCHES} searches; try again", {"Retry-After": "1"})
        self._in_hand[peer] += 1
        return None

    def done(self, peer: str) -> None:
        self._in_hand[peer] -= 1
        if self._in_hand[peer] <= 0:
            del self._in_hand[peer]

    def _path(self) -> str | None:
        history = self.pipeline.config.runtime.history
        return None if history is None else str(history.path)

    def _read(self, read) -> Reply:
        path = self._path()
        if path is None:
            return text_reply(404, "no history to search: set runtime.history in the pipeline file")
        try:
            with contextlib.closing(store.connect(path, readonly=True)) as db:
                return read(db)
        except sqlite3.OperationalError as e:
            if "no such table" in str(e) or "unable to open" in str(e):  # no run has written it yet
                return text_reply(404, "no tracks kept yet in the history file")
            return text_reply(503, f"the history file cannot be read now ({e})", {"Retry-After": "1"})
        except sqlite3.Error as e:
            return text_reply(503, f"the history file cannot be read now ({e})", {"Retry-After": "1"})

    def by_track(self, query: dict) -> Reply:
        try:
            stream = (query.get("stream") or [None])[0]
            track = query_int(query, "id", None)
            limit = query_int(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
            at = query_float(query, "at", None, 0.0, MAX_UNIX_TIME)
            others = query_int(query, "others", 0, 0, 1)
        except BadNumber as error:
            return text_reply(400, str(error))
        if not stream or track is None:
            return text_reply(400, "GET /api/search needs stream=NAME and id=TRACK (or POST a JPEG crop)")
        name = (query.get("name") or [None])[0]

        def read(db) -> Reply:
            found = by_track(db, stream, track, limit, name=name, at=at, others=bool(others))
            if found is None:
                return text_reply(404, f"no track {track} of stream {stream!r} with an embedding kept"
                                       + (f" by {name!r}" if name else ""))
            row, results = found
            return self._answer(db, {**_public(row), "name": row["name"]}, row["name"], _dim(db, row), results)
        return self._read(read)

    def by_image(self, jpeg: bytes, query: dict) -> Reply:
        from ..history.crop import BadPicture, describe_jpeg, jpeg_size

        try:
            limit = query_int(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        except BadNumber as error:
            return text_reply(400, str(error))
        try:
            name, vector = describe_jpeg(jpeg)
        except BadPicture as error:
            return text_reply(400, f"POST /api/search: {error}")
        width, height = jpeg_size(jpeg)
        return self._read(lambda db: self._answer(db, {"image": {"width": width, "height": height}}, name,
                                                  int(vector.size), similar(db, vector, name, limit)))

    @staticmethod
    def _answer(db, query: dict, name: str, dim: int, results: list[dict]) -> Reply:
        return json_reply({"query": query, "name": name, "dim": dim, "scanned_at_most": MAX_SCANNED,
                           "ignored": tracks.ignored(db),
                           "results": [{"rank": i, **_public(r), "score": r["score"],
                                        "linked": bool(r.get("linked", False))}
                                       for i, r in enumerate(results, 1)]})


def _dim(db, row: dict) -> int:
    found = db.execute("SELECT dim FROM vectors WHERE track = ? AND name = ?", (row["key"], row["name"])).fetchone()
    return int(found[0]) if found else 0


def _public(row: dict[str, Any]) -> dict[str, Any]:
    """A track as the API gives it: its snapshot as the URL that serves it, no file path."""
    shot = row["event"]
    return {"stream": row["stream"], "id": row["id"], "label": row["label"], "first_ts": row["first_ts"],
            "last_ts": row["last_ts"], "global_id": row["global_id"], "event": shot,
            "snapshot": None if shot is None else f"/api/events/{shot}/snapshot.jpg"}


async def read_jpeg(request) -> bytes | Reply:
    """The body of a `POST /api/search`, or the reply that refuses it."""
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctype != "image/jpeg":
        return text_reply(415, "POST /api/search takes a JPEG crop (Content-Type: image/jpeg)")
    if request.content_length is None:
        return text_reply(411, f"POST /api/search needs a Content-Length (at most {MAX_IMAGE} bytes)")
    if request.content_length > MAX_IMAGE:
        return text_reply(413, f"POST /api/search: a JPEG of at most {MAX_IMAGE} bytes, got {request.content_length}")
    try:
        return await asyncio.wait_for(request.content.readexactly(request.content_length), BODY_DEADLINE_S)
    except asyncio.TimeoutError:
        return text_reply(408, f"POST /api/search: the body did not come whole within {BODY_DEADLINE_S:g} s")
    except asyncio.IncompleteReadError:
        return text_reply(400, "POST /api/search: the body ended before its Content-Length")
    except ConnectionError:
        return text_reply(400, "POST /api/search: the connection was closed before its body came whole")


__all__ = ["Searches", "read_jpeg", "MAX_IMAGE", "PER_PEER", "MAX_SEARCHES", "BODY_DEADLINE_S"]
