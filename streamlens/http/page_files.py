"""The live page's own files (`streamlens/http/page`): `/` answers `index.html`, `/page/<file>` its
script and style sheet. The page loads nothing from anywhere else, and its Content-Security-Policy
of `'self'` says so to the browser.

Example:
    >>> page_file("index.html").code, page_file("../server.py").code, page_file("nope.js").code
    (200, 404, 404)
"""

from __future__ import annotations

from pathlib import Path

from .reply import Reply, text_reply

#: the page's files: served at `/` (index.html) and `/page/<file>`
PAGE_DIR = Path(__file__).resolve().parent / "page"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}
#: what the page may load: its own files and the API, nothing from anywhere else
PAGE_POLICY = ("default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'; "
               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def page_files() -> set[str]:
    """The names of the files the page is made of."""
    try:
        return {p.name for p in PAGE_DIR.iterdir() if p.is_file()}
    except OSError:
        return set()


def page_file(name: str) -> Reply:
    """The page's file `name` (a bare name from `page_files()`, nothing else: 404)."""
    path = PAGE_DIR / name
    ctype = CONTENT_TYPES.get(path.suffix)
    if ctype is None or name not in page_files():
        return text_reply(404, f"not found: /page/{name}")
    return Reply(200, ctype, path.read_bytes(), {"Content-Security-Policy": PAGE_POLICY, "Cache-Control": "no-cache"})
