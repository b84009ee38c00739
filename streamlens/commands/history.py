"""`streamlens history FILE`: the counts a run's `runtime.history` file holds, as a table or JSON.

    $ streamlens history history.db --since 24h --bucket 1h
    $ streamlens history history.db --rule gate --since 7d --bucket 1d --json

Each row is one bucket of one stream and rule: line crossings `in` and `out`, zone entries `count`
(every class summed). `--since` and `--until` take a duration back from now (`90s`, `15m`, `24h`,
`7d`) or Unix seconds; `--bucket` a duration of at least a minute. The file is opened read-only: a
run may be writing it meanwhile.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path

from ..errors import ConfigError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _bad(line: str) -> ConfigError:
    """A mistake in the command's input: one line, exit code 2."""
    return ConfigError(f"streamlens history: {line}")


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    """Add the `history` subcommand to the `streamlens` parser's subparsers."""
    p = sub.add_parser("history", parents=[common], help="counts from a runtime.history file",
                       description="Counts per stream and rule from a runtime.history file, per bucket.")
    p.add_argument("file", help="the runtime.history SQLite file")
    p.add_argument("--stream", help="one stream only")
    p.add_argument("--rule", help="one line or zone only")
    p.add_argument("--since", default="24h", help="from this long ago (90s, 15m, 24h, 7d) or Unix seconds; "
                                                  "default 24h")
    p.add_argument("--until", help="up to this long ago or Unix seconds; default now")
    p.add_argument("--bucket", default="1h", help="bucket length, at least 1m (default 1h)")
    p.add_argument("--json", action="store_true", help="the buckets as /api/history gives them")


def seconds(text: str, what: str) -> float:
    """A duration `90s`, `15m`, `24h`, `7d` (or a plain number of seconds), as seconds."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    if not found:
        raise _bad(f"{what}: expected a duration such as 90s, 15m, 24h or 7d, got {text!r}")
    return float(found[1]) * _UNITS[found[2] or "s"]


def moment(text: str, what: str, now: float) -> float:
    """Unix seconds from `text`: a duration back from `now`, or Unix seconds themselves (a number past 10^9)."""
    if re.fullmatch(r"\d{10,}(\.\d+)?", text.strip()):
        return float(text)
    return now - seconds(text, what)


def run(args) -> int:
    from ..history import store

    path = Path(args.file)
    if not path.is_file():
        raise _bad(f"{path}: no such history file")
    now = time.time()
    since = moment(args.since, "--since", now)
    until = moment(args.until, "--until", now) if args.until else None
    bucket = seconds(args.bucket, "--bucket")
    if bucket < 60:
        raise _bad(f"--bucket: at least 1m, got {args.bucket!r}")
    try:
        db = store.connect(str(path), readonly=True)
        try:
            found = store.buckets(db, stream=args.stream, rule=args.rule, since=since, until=until,
                                  bucket_s=int(bucket))
        finally:
            db.close()
    except sqlite3.Error as e:
        raise _bad(f"{path}: not a readable history file ({e})") from None
    if args.json:
        print(json.dumps({"buckets": found}))
        return 0
    rows = [("time (UTC)", "stream", "rule", "in", "out", "count")]
    for b in found:
        when = datetime.fromtimestamp(b["t"], timezone.utc).strftime("%Y-%m-%d %H:%M")
        rows.append((when, b["stream"], b["rule"], str(b["in"]), str(b["out"]), str(b["count"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    if len(rows) == 1:
        print("(no counts in this window)")
    return 0


__all__ = ["add_parser", "run", "seconds"]
