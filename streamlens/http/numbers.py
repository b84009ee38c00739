"""Every number a request gives the HTTP API (in its query or its path), parsed with bounds: a value
that is no number of that kind, or out of its range, raises `BadNumber`, which the API answers with
400 and its one line (the key, the range, the value as sent, escaped); never a 500.

Integers are plain decimal digits (a `-` where the range takes one), at most `MAX_DIGITS` of them,
so that no text of thousands of digits is converted; numbers with a fraction are what Python's
`float` reads, finite (`nan`, `inf` and `1e400` are refused).

Example:
    >>> query_int({"since": ["17"]}, "since", 0), query_int({}, "since", 0)
    (17, 0)
    >>> query_int({"since": ["1e3"]}, "since", 0)
    Traceback (most recent call last):
    ...
    streamlens.http.numbers.BadNumber: since: expected an integer from 0 to 9223372036854775807, got '1e3'
    >>> query_float({"since": ["nan"]}, "since", None, 0.0, MAX_UNIX_TIME)
    Traceback (most recent call last):
    ...
    streamlens.http.numbers.BadNumber: since: expected a number from 0 to 253402300799, got 'nan'
"""

from __future__ import annotations

import math

#: the largest id or sequence number a request may name: SQLite's INTEGER, a signed 64-bit integer
INT64_MAX = 2**63 - 1
#: the latest Unix time a request may name: 9999-12-31 23:59:59 UTC
MAX_UNIX_TIME = 253_402_300_799
#: the most digits an integer may have (INT64_MAX has 19)
MAX_DIGITS = 20
#: how much of a refused value its line shows
SHOWN = 40


class BadNumber(ValueError):
    """A number in a request that is none, or out of its range; its text is the 400's line."""


def parse_int(text: str, what: str, low: int = 0, high: int = INT64_MAX) -> int:
    """`text` as an integer from `low` to `high`, or `BadNumber` naming `what`."""
    digits = text[1:] if text.startswith("-") and low < 0 else text
    if digits.isascii() and digits.isdigit() and len(digits) <= MAX_DIGITS:
        value = int(text)
        if low <= value <= high:
            return value
    raise BadNumber(f"{what}: expected an integer from {low} to {high}, got {_shown(text)}")


def parse_float(text: str, what: str, low: float, high: float) -> float:
    """`text` as a finite number from `low` to `high`, or `BadNumber` naming `what`."""
    try:
        value = float(text) if len(text) <= 64 else math.nan
    except ValueError:
        value = math.nan
    if math.isfinite(value) and low <= value <= high:
        return value
    raise BadNumber(f"{what}: expected a number from {low:g} to {high:.0f}, got {_shown(text)}")


def query_int(query: dict, key: str, default: int | None, low: int = 0, high: int = INT64_MAX) -> int | None:
    """The integer `query[key][0]` (a `parse_qs` mapping) from `low` to `high`; `default` when absent."""
    values = query.get(key)
    return parse_int(values[0], key, low, high) if values else default


def query_float(query: dict, key: str, default: float | None, low: float, high: float) -> float | None:
    """The finite number `query[key][0]` from `low` to `high`; `default` when absent."""
    values = query.get(key)
    return parse_float(values[0], key, low, high) if values else default


def _shown(text: str) -> str:
    """`text` fit for one line: quoted, at most `SHOWN` characters, every control or non-ASCII
    character escaped."""
    return ascii(text if len(text) <= SHOWN else text[:SHOWN] + "...")


__all__ = ["BadNumber", "parse_int", "parse_float", "query_int", "query_float", "INT64_MAX", "MAX_UNIX_TIME"]
