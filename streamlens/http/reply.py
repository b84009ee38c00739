"""An answer of the HTTP server before it is written (`Reply`), and the small helpers the routes
share to make one (the numbers of a query: numbers.py).

Example:
    >>> reply = text_reply(404, "no stream named 'cam9'")
    >>> reply.code, reply.ctype, reply.body
    (404, 'text/plain; charset=utf-8', b"no stream named 'cam9'\\n")
"""

from __future__ import annotations

import json

from ..wire.codec import finite, json_bytes


class Reply:
    """An answer: status, content type, body and extra headers."""

    __slots__ = ("code", "ctype", "body", "headers")

    def __init__(self, code: int, ctype: str = "application/json", body: bytes = b"", headers: dict | None = None):
        self.code, self.ctype, self.body, self.headers = code, ctype, body, headers or {}


def json_reply(value, code: int = 200) -> Reply:
    return Reply(code, "application/json", json_bytes(value))


def text_reply(code: int, line: str, headers: dict | None = None) -> Reply:
    return Reply(code, "text/plain; charset=utf-8", (line + "\n").encode(), headers)


def ascii_json(value) -> str:
    """Compact JSON in ASCII (fit for a header), NaN and infinities as null."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(finite(value), separators=(",", ":"))
