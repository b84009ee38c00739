"""How results travel on ZeroMQ: multipart messages `[topic, payload]` or `[topic, payload, jpeg]`.

- `topic` is `<type>.<stream>` in UTF-8 (`frame.cam1`, `eos.cam1`, `stats.cam1`), so a SUB socket
  filters by prefix.
- `payload` is one schema-v1 message, compact UTF-8 JSON (the default) or MessagePack (a map with
  the same keys and values). A reader tells them apart by the first byte: JSON objects start with
  `{`, MessagePack maps with 0x80-0x8f, 0xde or 0xdf.
- `jpeg`, only on `frame` messages and only when the sink has `frames: jpeg`, is the frame as a
  JPEG image (with its boxes drawn unless `annotate: false`).

Example:
    >>> message = {"v": 1, "type": "eos", "stream": "cam1", "seq": 3, "frames": 3}
    >>> decode(encode(message, "msgpack")) == decode(encode(message, "json")) == message
    True
"""

from __future__ import annotations

import json
from typing import Any

FORMATS = ("json", "msgpack")


class PayloadError(ValueError):
    """A payload that is neither a JSON object nor a MessagePack map."""


def msgpack_module():
    """The `msgpack` package, or an ImportError that says how to get it."""
    try:
        import msgpack
    except ImportError:
        raise ImportError("format msgpack needs the msgpack package: pip install msgpack") from None
    return msgpack


def encode(message: dict[str, Any], fmt: str = "json") -> bytes:
    """One message as payload bytes in `fmt` (json or msgpack)."""
    if fmt == "json":
        from .schema import dumps  # here, so that readers need not import numpy and supervision

        return dumps(message)
    if fmt == "msgpack":
        return msgpack_module().packb(message, use_bin_type=True)
    raise ValueError(f"unknown payload format {fmt!r} (json, msgpack)")


def format_of(payload: bytes) -> str:
    """`json` or `msgpack`, from the payload's first byte."""
    first = payload[:1]
    if first == b"{":
        return "json"
    if first and (0x80 <= first[0] <= 0x8F or first[0] in (0xDE, 0xDF)):
        return "msgpack"
    raise PayloadError(f"not a JSON object nor a MessagePack map (first byte {first!r})")


def decode(payload: bytes) -> dict[str, Any]:
    """The message in a payload, JSON or MessagePack alike."""
    if format_of(payload) == "json":
        try:
            return json.loads(payload)
        except ValueError as e:
            raise PayloadError(f"invalid JSON: {e}") from None
    try:
        message = msgpack_module().unpackb(payload, raw=False)
    except ValueError as e:
        raise PayloadError(f"invalid MessagePack: {e}") from None
    if not isinstance(message, dict):
        raise PayloadError("MessagePack payload is not a map")
    return message


__all__ = ["FORMATS", "PayloadError", "encode", "decode", "format_of"]
