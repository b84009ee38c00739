"""URL helpers: tell a camera URL from a file path, and hide credentials before anything is printed.

Example:
    >>> mask_url("rtsp://admin:s3cret@10.0.0.5:554/stream1")
    'rtsp://***@10.0.0.5:554/stream1'
    >>> mask_url("rtsp://admin:p@ss/w:rd@[fe80::1]:554/s")
    'rtsp://***@[fe80::1]:554/s'
    >>> is_url("clips/a.mp4"), is_url("rtsp://cam/1")
    (False, True)
"""

from __future__ import annotations

import re

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: in free text, a URL ends at white space or a quote; its credentials end at its last '@'
_CREDENTIALS_IN_TEXT_RE = re.compile(r"(?<=://)[^\s'\"<>]*@")


def is_url(text: str) -> bool:
    """True for `scheme://...` (rtsp, rtsps, http, https, rtmp, udp, srt, ...)."""
    return bool(_SCHEME_RE.match(text))


def mask_url(text: str) -> str:
    """`text` with the credentials of every URL in it (`user:password@`, `user@`) replaced by `***@`.

    Everything from `://` to the URL's last `@` is hidden, so no part of a password shows
    whatever it holds (`@`, `/`, `:`, `#`, `%40`); the price is that an `@` later in a URL (in
    its path or query) hides the host as well. A `text` that is one URL is that URL to its end
    (white space included); in other text a URL ends at white space or a quote.

    Example:
        >>> mask_url("cannot open 'rtsp://u:a@b@cam/1': 401 Unauthorized")
        "cannot open 'rtsp://***@cam/1': 401 Unauthorized"
    """
    scheme = _SCHEME_RE.match(text)
    if scheme is not None and text.rfind("@") >= scheme.end():
        return text[:scheme.end()] + "***" + text[text.rindex("@"):]
    return _CREDENTIALS_IN_TEXT_RE.sub("***@", text)
