"""`streamlens models list | pull | export`: real models without hunting (streamlens/models).

    streamlens models list [--dir DIR]
        what the project knows (name, licence, size, sha256 and how it was established, the
        publisher's URL) and whether the cache holds it; then the other files of the cache
    streamlens models pull NAME [--sha256 SUM] [--dir DIR] [--mirror URL]
    streamlens models pull --url URL --sha256 SUM [--name FILE] [--dir DIR] [--max-mb N]
        download into the cache (or DIR), written aside and kept only when its sha256 is right
    streamlens models export MODEL.pt --format onnx|openvino --imgsz N [--dir DIR]
        Ultralytics' own exporter, offline; beside the .pt or into DIR

A pipeline names a cached model as `model: models:NAME`. Exit codes: 0 done, 1 failed (a download
refused, a wrong sum, an export that failed: one line, nothing kept), 2 usage (an unknown name, a
known model without a listed sum and no --sha256).

Example:
    $ streamlens models pull yolox_nano
    $ STREAMLENS_MODEL_MIRROR=https://mirror.local/models/ streamlens models pull yolox_nano
    $ streamlens models pull --url https://example.com/det.onnx --sha256 9f86d08... --name det.onnx
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..models.cache import PREFIX, cache_dir, is_file_name
from ..models.catalogue import CATALOGUE, KnownModel, known
from ..models.pull import DEFAULT_MAX_BYTES, MIRROR_ENV, PullError, checked_sha256, pull, source_url
from ..urls import mask_url

EXIT_USAGE = 2
#: the width `list` wraps its notes at
WIDTH = 100


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    """Add the `models` subcommand (list, pull, export) to the `streamlens` parser's subparsers."""
    p = sub.add_parser("models", parents=[common], help="list, pull (sha256-checked) and export models",
                       description="The models streamlens knows, downloads checked against their sha256 into "
                                   "the cache, and Ultralytics exports. A pipeline names a cached model as "
                                   "`model: models:NAME`; runs never download.")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    folder = argparse.ArgumentParser(add_help=False)
    folder.add_argument("--dir", type=Path, help=f"the folder (default: the cache, {cache_dir()})")
    actions.add_parser("list", parents=[common, folder], help="the known models and what the cache holds")
    pull_p = actions.add_parser("pull", parents=[common, folder], help="download a model, checked against its sha256",
                                description="Download a known model, or any file with --url and --sha256; it is "
                                            "written aside and kept only when its sha256 is right.")
    pull_p.add_argument("name", nargs="?", help="a model of `streamlens models list`")
    pull_p.add_argument("--url", help="download this file instead of a known model (needs --sha256)")
    pull_p.add_argument("--sha256", help="the file's sha256 (64 hex digits)")
    pull_p.add_argument("--name", dest="file", metavar="FILE",
                        help="with --url: the file name to keep it under (default: the URL's last part)")
    pull_p.add_argument("--mirror", help=f"a known model's mirror, a URL or folder holding it under its published "
                                         f"name (default: ${MIRROR_ENV})")
    pull_p.add_argument("--max-mb", type=int, default=DEFAULT_MAX_BYTES // 2**20,
                        help="with --url: the largest download, in MiB (default: %(default)s)")
    export_p = actions.add_parser("export", parents=[common, folder], help="an Ultralytics .pt to ONNX or OpenVINO",
                                  description="Export an Ultralytics .pt with Ultralytics' own exporter, offline, "
                                              "beside it or into --dir.")
    export_p.add_argument("model", type=Path, help="the Ultralytics .pt model")
    export_p.add_argument("--format", required=True, choices=["onnx", "openvino"])
    export_p.add_argument("--imgsz", type=int, default=640, help="the input side in pixels (default: %(default)s)")


def run(args) -> int:
    """Run `streamlens models ACTION` (see the module)."""
    return {"list": _list, "pull": _pull, "export": _export}[args.action](args)


def _size(size: int | None) -> str:
    return "size unknown" if size is None else f"{size / 1e6:.1f} MB"


def _cached(model: KnownModel, folder: Path) -> str:
    path = folder / model.file
    if not path.is_file():
        return "not cached"
    size = path.stat().st_size
    if model.size is not None and size != model.size:
        return f"in {path} but {size} bytes, not {model.size}: pull it again"
    return f"cached: {path}"


def _list(args) -> int:
    folder = args.dir or cache_dir()
    print(f"models streamlens knows (cache: {folder}); a pipeline names a cached one as `model: {PREFIX}NAME`")
    for m in CATALOGUE:
        print(f"\n{m.name}  ({m.licence}, {_size(m.size)}, {_cached(m, folder)})")
        print(textwrap.fill(m.about, WIDTH, initial_indent="  ", subsequent_indent="  "))
        print(f"  source  {m.url}")
        print(f"  sha256  {m.sha256 or 'unknown: pull needs --sha256'}")
        print(textwrap.fill(m.sha256_from, WIDTH, initial_indent=" " * 10, subsequent_indent=" " * 10))
    files = {m.file for m in CATALOGUE}
    others = sorted(p.name for p in folder.iterdir() if p.name not in files and not p.name.startswith(".")) \
        if folder.is_dir() else []
    if others:
        print(f"\nalso in {folder} (name them as {PREFIX}FILE):")
        for name in others:
            print(f"  {name}")
    return 0


def _usage(message: str) -> int:
    print(f"streamlens: error: models pull: {message}", file=sys.stderr)
    return EXIT_USAGE


def _pull(args) -> int:
    try:
        return _pull_checked(args)
    except PullError as e:
        if e.args[0].startswith("--sha256: "):  # the sum given is no sum: usage, before anything is fetched
            return _usage(e.args[0])
        raise


def _pull_checked(args) -> int:
    folder = args.dir or cache_dir()
    if args.url and args.name:
        return _usage("give a model's name or --url, not both")
    if args.url:
        if not args.sha256:
            return _usage("--url needs --sha256 (streamlens keeps no file it cannot check)")
        file = args.file or unquote(urlsplit(args.url).path.rsplit("/", 1)[-1])
        if not is_file_name(file):
            return _usage(f"--name: expected a file name of letters, digits, '.', '_' and '-', got {file!r}")
        url, sha256, max_bytes, label = args.url, checked_sha256(args.sha256), args.max_mb * 2**20, file
    elif args.name:
        model = known(args.name)
        if model is None:
            names = ", ".join(m.name for m in CATALOGUE)
            return _usage(f"unknown model {args.name!r} (known: {names}; any other: --url URL --sha256 SUM)")
        given = checked_sha256(args.sha256) if args.sha256 else None
        if model.sha256 and given and given != model.sha256:
            return _usage(f"--sha256 is not the listed {model.sha256} of {model.name}; a different file is "
                          f"pulled with --url URL --sha256 SUM --name FILE")
        if not (model.sha256 or given):
            return _usage(f"{model.name}: no checksum is listed ({model.sha256_from}); give --sha256 SUM, the "
                          f"sum of the file as you trust it")
        mirror = args.mirror if args.mirror is not None else os.environ.get(MIRROR_ENV)
        url, sha256, file, label = source_url(model.url, mirror), model.sha256 or given, model.file, model.name
        max_bytes = model.size or args.max_mb * 2**20
    else:
        return _usage("name a model (streamlens models list) or give --url URL --sha256 SUM")
    done = pull(url, sha256, folder / file, max_bytes=max_bytes)
    if done.downloaded:
        print(f"pulled {label}: {done.path} ({done.size} bytes, sha256 {done.sha256} checked) from {mask_url(url)}")
    else:
        print(f"{label}: already there, sha256 checked: {done.path}")
    if folder.resolve() == cache_dir().resolve():
        print(f"a pipeline names it as   model: {PREFIX}{label if known(label) else file}")
    return 0


def _export(args) -> int:
    from ..models.export import export

    made = export(args.model, args.format, args.imgsz, args.dir)
    print(f"exported {args.model} to {args.format} at {args.imgsz}: {made}")
    if made.parent.resolve() == cache_dir().resolve():
        print(f"a pipeline names it as   model: {PREFIX}{made.name}")
    return 0


__all__ = ["add_parser", "run"]
