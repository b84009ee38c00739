"""Streams added and removed over HTTP, with the page's authentication:

- `POST /api/streams` with one source mapping as JSON (`Content-Type: application/json`), the keys
  and checks of the pipeline file's `sources[i]`: `201` with `{"name": ..., "warnings": [...]}` and
  `Location: /api/streams/<name>/result`; a mistake is `400` with `validate`'s lines
  (`POST /api/streams: sources[2].uri: file not found: /x/a.mp4`); a name in use, or a run not
  running, `409`.
- `DELETE /api/streams/<name>`: `202` with `{"name": ..., "state": "removing"}`: its source ends,
  what it decoded is still published, then its `eos` with `reason: "removed"`; `404` for no such
  stream, `409` for one that has ended.

With several engines (`runtime.workers`), an added stream goes to the engine with the fewest open
streams. What runs and what it may change: graph/run/changes.py (`StreamChanges`) and
scale/changes.py (`SupervisedChanges`). `runtime.http.manage: false` turns both routes off (`403`).

A request's body is read only here, only for `POST /api/streams`: at most `MAX_BODY` bytes, said
beforehand in `Content-Length` (`411` without it, `413` past it), whole within `BODY_DEADLINE_S`
(`408`). A cross-site page cannot post one: the Host and Origin checks (auth.py) refuse another
site's `Origin`, and a JSON body is no form a page sends without asking first.
"""

from __future__ import annotations

import asyncio
import json

from ..errors import ConfigError, NoSuchStream, StreamConflict, StreamLimit
from .reply import Reply, json_reply, text_reply

#: the largest body of a `POST /api/streams`, in bytes (one source mapping)
MAX_BODY = 16384
#: seconds a `POST /api/streams` has to send its whole body
BODY_DEADLINE_S = 10.0
#: the routes that change streams, as `Allow` names them
ALLOW = "GET, HEAD, POST (/api/streams, /api/search), DELETE (/api/streams/<name>)"


def stream_named(path: str) -> str | None:
    """The name in `/api/streams/<name>` (None: not that route)."""
    parts = path.split("/")
    return parts[3] if len(parts) == 4 and parts[:3] == ["", "api", "streams"] and parts[3] else None


async def read_source(request) -> dict | Reply:
    """The JSON body of a `POST /api/streams`, or the reply that refuses it."""
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        return text_reply(415, "POST /api/streams takes one source as JSON (Content-Type: application/json)")
    if request.content_length is None:
        return text_reply(411, f"POST /api/streams needs a Content-Length (at most {MAX_BODY} bytes)")
    if request.content_length > MAX_BODY:
        return text_reply(413, f"POST /api/streams: a body of at most {MAX_BODY} bytes (one source), "
                               f"got {request.content_length}")
    try:
        body = await asyncio.wait_for(request.content.readexactly(request.content_length), BODY_DEADLINE_S)
    except asyncio.TimeoutError:
        return text_reply(408, f"POST /api/streams: the body did not come whole within {BODY_DEADLINE_S:g} s")
    except asyncio.IncompleteReadError:
        return text_reply(400, "POST /api/streams: the body ended before its Content-Length")
    except ConnectionError:  # closed to make room for others (server.py): nobody reads this
        return text_reply(400, "POST /api/streams: the connection was closed before its body came whole")
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as error:  # bad JSON, bad UTF-8, an integer of 5,000 digits
        reason = error.args[0] if isinstance(error, ValueError) and error.args else type(error).__name__
        return text_reply(400, f"POST /api/streams: the body is not JSON ({str(reason)[:200]})")


def add_stream(pipeline, data) -> Reply:
    """`POST /api/streams`, once its body is read (on the thread of changes: a file is opened)."""
    try:
        name, warnings = pipeline.add_stream(data, remote=True)
    except ConfigError as error:
        return text_reply(400, "\n".join(error.problems))
    except StreamConflict as error:
        return text_reply(409, str(error))
    except StreamLimit as error:
        return text_reply(429, str(error))
    reply = json_reply({"name": name, "warnings": warnings}, 201)
    reply.headers["Location"] = f"/api/streams/{name}/result"
    return reply


def remove_stream(pipeline, name: str) -> Reply:
    """`DELETE /api/streams/<name>`."""
    try:
        pipeline.remove_stream(name)
    except NoSuchStream as error:
        return text_reply(404, str(error))
    except StreamConflict as error:
        return text_reply(409, str(error))
    return json_reply({"name": name, "state": "removing"}, 202)


__all__ = ["add_stream", "remove_stream", "read_source", "stream_named", "MAX_BODY", "BODY_DEADLINE_S"]
