"""CurveZMQ keys: make them, read them, and put them on a socket.

Keys live in ZeroMQ's certificate files (the ZPL text format that pyzmq and czmq read and write):
`NAME.key` holds the public key and is safe to hand out; `NAME.key_secret` holds both keys and
stays with its owner. `streamlens keygen DIR` makes a pair for the publisher (`server`) and one
for a subscriber (`client`), and puts a copy of the client's public key into `DIR/authorized/`,
the folder of subscribers the publisher lets in:

    publisher (zmq sink):  curve: {server_secret: DIR/server.key_secret, authorized: DIR/authorized}
    subscriber:            streamlens subscribe ENDPOINT --server-key DIR/server.key
                                                         --client-key DIR/client.key_secret

Without `authorized`, any subscriber that knows the server's public key may connect: the traffic
is still encrypted, but not restricted to known subscribers.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> written = make_keys(folder, ["server"])
    >>> [p.name for p in written]
    ['server.key', 'server.key_secret']
    >>> public, secret = read_secret_key(written[1])
    >>> (len(public), len(secret))
    (40, 40)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import zmq
import zmq.auth

from .errors import StreamlensError

#: the folder, beside the keys that `make_keys` writes, of client public keys a publisher accepts
AUTHORIZED_DIR = "authorized"


class KeyFileError(StreamlensError):
    """A key file that is missing, unreadable or not a CurveZMQ key (named in the message)."""


def curve_available() -> bool:
    """Whether this libzmq was built with CurveZMQ (libsodium)."""
    return bool(zmq.has("curve"))


def make_keys(folder: str | Path, names: list[str], *, authorize: tuple[str, ...] = ()) -> list[Path]:
    """Write `NAME.key` and `NAME.key_secret` in `folder` for each name; never overwrite a key.

    Each name in `authorize` also gets its public key copied into `folder/authorized/`. Secret
    files are readable by their owner only. Returns the paths written, in order.
    """
    if not curve_available():
        raise KeyFileError("this libzmq has no CurveZMQ support (it was built without libsodium)")
    folder = Path(folder)
    for name in names:
        for path in (folder / f"{name}.key", folder / f"{name}.key_secret"):
            if path.exists():
                raise KeyFileError(f"{path} exists; not overwriting a key (remove it first)")
    written: list[Path] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            public, secret = (Path(p) for p in zmq.auth.create_certificates(folder, name))
            os.chmod(secret, 0o600)
            written += [public, secret]
            if name in authorize:
                (folder / AUTHORIZED_DIR).mkdir(exist_ok=True)
                written.append(Path(shutil.copy(public, folder / AUTHORIZED_DIR / public.name)))
    except OSError as e:
        raise KeyFileError(f"cannot write keys in {folder}: {e.strerror or e}") from None
    return written


def read_public_key(path: str | Path) -> bytes:
    """The public key (40 Z85 characters) in a `.key` or `.key_secret` file."""
    public, _ = _read(path)
    return public


def read_secret_key(path: str | Path) -> tuple[bytes, bytes]:
    """(public, secret) from a `.key_secret` file; a public-only file is an error naming it."""
    public, secret = _read(path)
    if not secret:
        raise KeyFileError(f"{path}: no secret key in this file (use the .key_secret file)")
    return public, secret


def _read(path: str | Path) -> tuple[bytes, bytes | None]:
    path = Path(path)
    if not path.is_file():
        raise KeyFileError(f"{path}: file not found" if not path.exists() else f"{path}: not a file")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except OSError as e:
        raise KeyFileError(f"{path}: cannot read: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError):
        public, secret = b"", None
    if len(public) != 40 or (secret is not None and len(secret) != 40):
        raise KeyFileError(f"{path}: not a CurveZMQ key file (make one with streamlens keygen)")
    return public, secret


def make_server(socket: zmq.Socket, secret_file: str | Path) -> None:
    """Make `socket` a CurveZMQ server with the keys in `secret_file` (before bind)."""
    public, secret = read_secret_key(secret_file)
    socket.curve_secretkey = secret
    socket.curve_publickey = public
    socket.curve_server = True


def make_client(socket: zmq.Socket, server_public_file: str | Path,
                client_secret_file: str | Path | None = None) -> None:
    """Make `socket` a CurveZMQ client of the server whose public key is in `server_public_file`
    (before connect). Without `client_secret_file`, a throwaway key pair is used: enough for a
    publisher that lets any subscriber in."""
    server_public = read_public_key(server_public_file)
    if client_secret_file is not None:
        public, secret = read_secret_key(client_secret_file)
    else:
        public, secret = zmq.curve_keypair()
    socket.curve_secretkey = secret
    socket.curve_publickey = public
    socket.curve_serverkey = server_public


__all__ = ["make_keys", "read_public_key", "read_secret_key", "make_server", "make_client",
           "curve_available", "AUTHORIZED_DIR", "KeyFileError"]
