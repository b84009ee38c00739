"""`streamlens keygen DIR [NAME ...]`: CurveZMQ key pairs for a publisher and its subscribers.

Writes `NAME.key` (public) and `NAME.key_secret` (secret, owner-only) for each name, `server` and
`client` by default; every name but `server` is also authorized: its public key is copied into
`DIR/authorized/`, the folder a zmq sink's `curve.authorized` names. Existing keys are never
overwritten, so `streamlens keygen keys alice` adds a subscriber `alice` to an existing set.

Example:
    $ streamlens keygen keys
    $ streamlens keygen keys alice
"""

from __future__ import annotations

import argparse

SERVER = "server"


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    """Add the `keygen` subcommand to the `streamlens` parser's subparsers."""
    p = sub.add_parser("keygen", parents=[common], help="make CurveZMQ keys for the zmq sink",
                       description="Write CurveZMQ key pairs NAME.key / NAME.key_secret in DIR; "
                                   "every name but 'server' is authorized (DIR/authorized/).")
    p.add_argument("dir", help="folder for the keys (made if missing)")
    p.add_argument("names", nargs="*", default=[SERVER, "client"], metavar="NAME",
                   help="key pairs to make (default: server client)")


def run(args) -> int:
    """Make the keys; a name already used raises `KeyFileError`, printed as one line."""
    from ..wire.keys import AUTHORIZED_DIR, make_keys

    clients = tuple(n for n in args.names if n != SERVER)
    for path in make_keys(args.dir, list(dict.fromkeys(args.names)), authorize=clients):
        kind = "secret, keep it private" if path.name.endswith("_secret") else "public"
        print(f"wrote {path} ({kind})")
    folder = args.dir.rstrip("/")
    if SERVER in args.names:
        print(f"publisher (zmq sink):  curve: {{server_secret: {folder}/{SERVER}.key_secret, "
              f"authorized: {folder}/{AUTHORIZED_DIR}}}")
    for name in clients:
        print(f"subscriber {name}:  streamlens subscribe ENDPOINT --server-key {folder}/{SERVER}.key "
              f"--client-key {folder}/{name}.key_secret")
    return 0


__all__ = ["add_parser", "run"]
