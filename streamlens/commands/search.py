"""`streamlens search`: the tracks of a `runtime.history` file most like one track, or a JPEG crop,
as a ranked table or JSON.

    $ streamlens search --history history.db --stream cam1 --id 7
    $ streamlens search --history history.db --image crop.jpg --limit 5 --json

By a track: its embedding by `--name` (else `reid`, else any) of the newest run that has it (or the
run whose track was seen nearest `--at`, Unix seconds), the track itself left out. By a crop: the
picture described as the `reid` embeddings are and compared with `reid` vectors of its length.
Each row: rank, score (cosine similarity, 1 the same look), stream, track id, label, global id,
first and last seen (UTC) and the snapshot file written for it (`analytics.snapshots.path`). The
file is opened read-only: a run may be writing it meanwhile. At most the newest 100,000 vectors are
compared (streamlens/history/search.py).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from ..errors import ConfigError


def _bad(line: str) -> ConfigError:
    """A mistake in the command's input: one line, exit code 2."""
    return ConfigError(f"streamlens search: {line}")


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    """Add the `search` subcommand to the `streamlens` parser's subparsers."""
    p = sub.add_parser("search", parents=[common], help="tracks like one track or a JPEG crop, from a runtime.history file",
                       description="The tracks of a runtime.history file most like one track or a JPEG crop, ranked.")
    p.add_argument("--history", required=True, metavar="FILE", help="the runtime.history SQLite file")
    p.add_argument("--stream", help="the query track's stream (with --id)")
    p.add_argument("--id", type=int, help="the query track's id (with --stream)")
    p.add_argument("--name", help="the embedding to compare (default: reid, else the track's first)")
    p.add_argument("--at", type=float, help="the query track of the run that saw it nearest this Unix time")
    p.add_argument("--image", metavar="JPEG", help="a JPEG crop to search for instead of a track")
    p.add_argument("--limit", type=int, default=10, help="results, 1-100 (default 10)")
    p.add_argument("--others", action="store_true", help="only other streams' tracks (with --stream and --id)")
    p.add_argument("--json", action="store_true", help="the answer as /api/search gives it, with snapshot paths")


def _when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _search(args, db):
    from ..history import search

    if args.image is not None:
        from ..history.crop import BadPicture, describe_jpeg

        try:
            name, vector = describe_jpeg(Path(args.image).read_bytes())
        except OSError as e:
            raise _bad(f"--image: cannot read {args.image}: {e.strerror or e}") from None
        except BadPicture as e:
            raise _bad(f"--image: {args.image}: {e}") from None
        return {"image": args.image}, name, search.similar(db, vector, name, args.limit)
    found = search.by_track(db, args.stream, args.id, args.limit, name=args.name, at=args.at, others=args.others)
    if found is None:
        raise _bad(f"no track {args.id} of stream {args.stream!r} with an embedding kept in {args.history}")
    row, results = found
    return {k: row[k] for k in ("stream", "id", "label", "first_ts", "last_ts", "global_id")}, row["name"], results


def run(args) -> int:
    from ..history import store, tracks

    if (args.image is None) == (args.stream is None or args.id is None):
        raise _bad("give either --stream and --id (a track) or --image (a JPEG crop)")
    if args.others and args.image is not None:
        raise _bad("--others goes with --stream and --id (a crop has no stream)")
    if not 1 <= args.limit <= 100:
        raise _bad(f"--limit: 1 to 100, got {args.limit}")
    path = Path(args.history)
    if not path.is_file():
        raise _bad(f"{path}: no such history file")
    try:
        db = store.connect(str(path), readonly=True)
        try:
            query, name, results = _search(args, db)
            ignored = tracks.ignored(db)
        finally:
            db.close()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            raise _bad(f"{path}: no tracks kept yet (written by a run of this version with embeddings)") from None
        raise _bad(f"{path}: not a readable history file ({e})") from None
    except sqlite3.Error as e:
        raise _bad(f"{path}: not a readable history file ({e})") from None
    keys = ("stream", "id", "score", "label", "global_id", "first_ts", "last_ts", "event", "snapshot_path", "linked")
    rows = [{"rank": i, **{k: r[k] for k in keys if k != "linked"}, "linked": r.get("linked", False)}
            for i, r in enumerate(results, 1)]
    if args.json:
        print(json.dumps({"query": query, "name": name, "ignored": ignored, "results": rows}))
        return 0
    table = [("rank", "score", "stream", "id", "label", "global", "first seen (UTC)", "last seen (UTC)", "linked",
              "snapshot")]
    for r in rows:
        table.append((str(r["rank"]), f"{r['score']:.3f}", r["stream"], str(r["id"]), r["label"] or "-",
                      "-" if r["global_id"] is None else str(r["global_id"]), _when(r["first_ts"]),
                      _when(r["last_ts"]), "yes" if r["linked"] else "-", r["snapshot_path"] or "-"))
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    for t in table:
        print("  ".join(c.rjust(w) if i in (0, 1, 3) else c.ljust(w) for i, (c, w) in enumerate(zip(t, widths))).rstrip())
    if not rows:
        print(f"(no {name} embeddings of this length to compare with)")
    if ignored:
        print(f"{sum(ignored.values())} embedding message(s) were not kept: "
              + ", ".join(f"{why} {n}" for why, n in ignored.items()))
    return 0


__all__ = ["add_parser", "run"]
