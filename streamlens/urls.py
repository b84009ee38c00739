"""URL helpers: tell a camera URL from a file path, and hide credentials before anything is printed.

Example:
    >>> mask_url("rtsp://admin:s3cret@10.0.0.5:554/stream1")
    'rtsp://***@10.0.0.5:554/stream1'
    >>> is_url("clips/a.mp4"), is_url("rtsp://cam/1")
    (False, True)
"""

from __future__ import annotations

import re

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_CREDENTIALS_RE = re.compile(r"(?<=://)[^/@\s]+@")


def is_url(text: str) -> bool:
    """True for `scheme://...` (rtsp, rtsps, http, https, rtmp, udp, srt, ...)."""
    return bool(_SCHEME_RE.match(text))


def mask_url(text: str) -> str:
    """Replace `user:password@` (or `user@`) after any `scheme://` in `text` with `***@`."""
    return _CREDENTIALS_RE.sub("***@", text)
