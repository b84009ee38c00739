"""Downloading a model into a folder, checked against its sha256 before it is kept.

Every download is written aside, to a hidden temporary file in the folder it is meant for
(`.NAME.XXXX.part`), hashed as it arrives, and renamed into place only when its sha256 is the one
asked for: a wrong sum, a download cut short or refused, a file past its size cap, or Ctrl-C leaves
nothing behind. A file already there with the right sum is kept as it is, with no download. The
HTTP client is `requests` (connect and read timeouts: `TIMEOUT_S`), redirects followed.

For air-gapped sites, `STREAMLENS_MODEL_MIRROR` (or `pull --mirror`) replaces the publisher's
address of a known model: the file is fetched from the mirror under the name it is published with
(`https://mirror.local/models/` + `yolox_nano.onnx`), and checked against the same sum. A mirror
may also be a local folder (`/mnt/models`, `file:///mnt/models`): the file is copied from there the
same way.

Example:
    >>> source_url("https://github.com/o/r/releases/download/v1/m.onnx", "https://mirror.local/models")
    'https://mirror.local/models/m.onnx'
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..errors import StreamlensError
from ..urls import mask_url

MIRROR_ENV = "STREAMLENS_MODEL_MIRROR"
#: seconds to connect, and the longest silence while reading
TIMEOUT_S = (10.0, 60.0)
#: the largest download when the catalogue gives no size (`pull --max-mb`)
DEFAULT_MAX_BYTES = 4 * 1024**3
_CHUNK = 1024 * 1024
_SHA256_RE = re.compile(r"^(?:sha256:)?([0-9a-fA-F]{64})$")


class PullError(StreamlensError):
    """A model could not be pulled; nothing was kept. The message names the URL without credentials."""


@dataclass(frozen=True)
class Pulled:
    """What `pull` left: the file, its sum and size, where it came from, and whether it was
    downloaded now (False: it was already there with that sum)."""

    path: Path
    sha256: str
    size: int
    url: str
    downloaded: bool


def checked_sha256(text: str) -> str:
    """`text` as a sha256 in lower case (64 hex digits, `sha256:` before them allowed), or `PullError`."""
    found = _SHA256_RE.match(text.strip())
    if not found:
        raise PullError(f"--sha256: expected 64 hexadecimal digits, got {text!r}")
    return found.group(1).lower()


def source_url(url: str, mirror: str | None) -> str:
    """Where to fetch `url` from: the mirror (a URL or a folder) and the file's published name, or
    `url` itself without a mirror."""
    if not mirror:
        return url
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    return f"{mirror.rstrip('/')}/{name}"


def file_sha256(path: Path) -> str:
    """The sha256 of the file at `path`, in lower-case hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _local_path(url: str) -> Path | None:
    """The file a mirror's `url` is, when the mirror is a folder (`/x`, `models/`, `file:///x`); else None."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    return Path(url) if not parts.scheme else None


@contextmanager
def _chunks(url: str, shown: str, max_bytes: int) -> Iterator[Iterator[bytes]]:
    """The bytes at `url` (http, https, or a local file), in chunks; `PullError` when it cannot be read."""
    local = _local_path(url)
    if local is not None:
        try:
            f = open(local, "rb")
        except OSError as e:
            raise PullError(f"cannot read {local}: {e.strerror or e}") from None
        with f:
            yield iter(lambda: f.read(_CHUNK), b"")
        return
    if urlsplit(url).scheme not in ("http", "https"):
        raise PullError(f"{shown}: expected an http:// or https:// URL, or a folder")  # ftp://, s3://, ...
    import requests

    try:
        with requests.get(url, stream=True, timeout=TIMEOUT_S) as answer:
            if answer.status_code != 200:
                raise PullError(f"GET {shown}: {answer.status_code} {answer.reason}")
            length = answer.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > max_bytes:
                raise PullError(f"GET {shown}: {int(length)} bytes, more than the {max_bytes} expected")
            yield answer.iter_content(_CHUNK)
    except requests.Timeout:
        raise PullError(f"GET {shown}: no answer within {TIMEOUT_S[1]:g} s") from None
    except requests.RequestException as e:
        raise PullError(f"GET {shown}: {_reason(e)}") from None


def _reason(error: Exception) -> str:
    """A short cause for a failed request (requests' own text holds the URL, credentials and all)."""
    cause = error.args[0] if error.args else error
    cause = getattr(cause, "reason", cause)  # urllib3's MaxRetryError holds the cause
    text = str(cause).rsplit(": ", 1)[-1].strip()  # past urllib3's "<...Connection object at 0x...>: "
    while text.endswith(")") and text.count(")") > text.count("("):
        text = text[:-1]
    text = text or type(error).__name__
    return f"{type(error).__name__}: {mask_url(text)}"


def pull(url: str, sha256: str, dest: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Pulled:
    """Fetch `url` into the file `dest` when its sha256 is `sha256` (see the module); `PullError`,
    with nothing left behind, when it is not or it cannot be fetched."""
    sha256, dest, shown = checked_sha256(sha256), Path(dest), mask_url(url)
    if dest.is_file() and file_sha256(dest) == sha256:
        return Pulled(dest, sha256, dest.stat().st_size, url, downloaded=False)
    if dest.is_dir():
        raise PullError(f"{dest} is a folder")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    except OSError as e:
        raise PullError(f"cannot write in {dest.parent}: {e.strerror or e}") from None
    aside = Path(name)
    try:
        digest, size = hashlib.sha256(), 0
        with os.fdopen(handle, "wb") as out, _chunks(url, shown, max_bytes) as chunks:
            for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise PullError(f"{shown}: more than the {max_bytes} bytes expected; nothing kept")
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256:
            raise PullError(f"{shown}: sha256 {digest.hexdigest()} of its {size} bytes is not the {sha256} "
                            f"expected; nothing kept")
        os.chmod(aside, 0o666 & ~_umask())
        os.replace(aside, dest)
    except OSError as e:  # the disk full, the folder gone (requests' own errors are PullError by now)
        aside.unlink(missing_ok=True)
        raise PullError(f"cannot write {dest}: {e.strerror or e}; nothing kept") from None
    except BaseException:
        aside.unlink(missing_ok=True)
        raise
    return Pulled(dest, sha256, size, url, downloaded=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


__all__ = ["DEFAULT_MAX_BYTES", "MIRROR_ENV", "PullError", "Pulled", "checked_sha256", "file_sha256", "pull",
           "source_url"]
