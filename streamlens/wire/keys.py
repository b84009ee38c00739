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
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from ..errors import StreamlensError

#: the folder, beside the keys that `make_keys` writes, of client public keys a publisher accepts
AUTHORIZED_DIR = "authorized"


class KeyFileError(StreamlensError):
    """A key file that is missing, unreadable or not a CurveZMQ key (named in the message)."""


def curve_available() -> bool:
    """Whether this libzmq was built with CurveZMQ (libsodium)."""
    return bool(zmq.has("curve"))


#: a key name is a plain file name: letters, digits, '_', '-' and '.', not starting with '.'
_KEY_NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def make_keys(folder: str | Path, names: list[str], *, authorize: tuple[str, ...] = ()) -> list[Path]:
    """Write `NAME.key` and `NAME.key_secret` in `folder` for each name; never overwrite a key.

    Each name in `authorize` also gets its public key copied into `folder/authorized/` (an
    existing copy there is not overwritten either). A secret file is created readable by its owner
    only (mode 0600, whatever the umask) before the key is written into it, so it is never readable
    by others, not even for a moment, and a file that appears meanwhile is not overwritten
    (`O_EXCL`). Folders made here are not writable by others. Returns the paths written, in order.
    """
    if not curve_available():
        raise KeyFileError("this libzmq has no CurveZMQ support (it was built without libsodium)")
    folder = Path(folder)
    for name in names:
        if not _KEY_NAME_RE.fullmatch(name):
            raise KeyFileError(f"{name!r}: use letters, digits, '_', '-' and '.' (not first) in a key name")
        for path in _key_files(folder, name, name in authorize):
            if path.exists():
                raise KeyFileError(f"{path} exists; not overwriting a key (remove it first)")
    written: list[Path] = []
    try:
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)  # not writable by others, who could swap a key
        for name in names:
            public, secret = _key_files(folder, name, False)
            _create(public, 0o644)
            _create(secret, 0o600)
            zmq.auth.create_certificates(folder, name)  # writes into the two files, keeping their modes
            written += [public, secret]
            if name in authorize:
                (folder / AUTHORIZED_DIR).mkdir(mode=0o755, exist_ok=True)
                copy = folder / AUTHORIZED_DIR / public.name
                _create(copy, 0o644)
                written.append(Path(shutil.copyfile(public, copy)))
    except FileExistsError as e:
        raise KeyFileError(f"{e.filename} exists; not overwriting a key (remove it first)") from None
    except OSError as e:
        raise KeyFileError(f"cannot write keys in {folder}: {e.strerror or e}") from None
    return written


def _key_files(folder: Path, name: str, authorized: bool) -> list[Path]:
    """`NAME.key`, `NAME.key_secret` and, when `authorized`, the copy in `folder/authorized/`."""
    return [folder / f"{name}.key", folder / f"{name}.key_secret"] + (
        [folder / AUTHORIZED_DIR / f"{name}.key"] if authorized else [])


def _create(path: Path, mode: int) -> None:
    """Create `path` empty with exactly `mode`; FileExistsError if anything is there already."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o600)  # O_EXCL: nor a symlink
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


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


@dataclass(frozen=True)
class RunKeys:
    """Keys made for one run, never written by `streamlens keygen` nor kept after it: the engines'
    sockets are CurveZMQ servers with `server`, and admit only the supervisor's `client` key.

    The secret halves travel with each engine's spec (over Ray's own channel) and are put in a
    private folder on the engine's node for as long as it runs (`write_server`); the repr never
    shows them.

    >>> keys = RunKeys.make()
    >>> "secret" in repr(keys), len(keys.server_public), len(keys.client_public)
    (False, 40, 40)
    """

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def make(cls) -> "RunKeys":
        if not curve_available():
            raise KeyFileError("this libzmq has no CurveZMQ support (it was built without libsodium)")
        server, client = zmq.curve_keypair(), zmq.curve_keypair()
        return cls(server[0], server[1], client[0], client[1])

    def __repr__(self) -> str:
        return f"RunKeys(server={self.server_public.decode()}, client={self.client_public.decode()})"

    def write_server(self, folder: str | Path) -> dict[str, str]:
        """Write the server's key pair and the client's public key (the only one admitted) into
        `folder` (made here, readable by its owner only); returns the zmq sink's `curve` mapping
        for them (`server_secret`, `authorized`)."""
        folder = Path(folder)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        (folder / AUTHORIZED_DIR).mkdir(mode=0o700, exist_ok=True)
        secret, admitted = folder / "server.key_secret", folder / AUTHORIZED_DIR / "supervisor.key"
        _write_key(secret, self.server_public, self.server_secret)
        _write_key(admitted, self.client_public, None)
        return {"server_secret": str(secret), "authorized": str(folder / AUTHORIZED_DIR)}

    def make_client(self, socket: zmq.Socket) -> None:
        """Make `socket` (which connects to the engines) the supervisor's CurveZMQ client, before connect."""
        socket.curve_secretkey = self.client_secret
        socket.curve_publickey = self.client_public
        socket.curve_serverkey = self.server_public


def _write_key(path: Path, public: bytes, secret: bytes | None) -> None:
    """A certificate file in the ZPL form that `zmq.auth.load_certificate` reads, created 0600."""
    _create(path, 0o600)
    lines = ["metadata", "curve", f'    public-key = "{public.decode()}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    path.write_text("\n".join(lines) + "\n")


__all__ = ["RunKeys", "make_keys", "read_public_key", "read_secret_key", "make_server", "make_client",
           "curve_available", "AUTHORIZED_DIR", "KeyFileError"]
