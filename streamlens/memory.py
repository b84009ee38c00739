"""Memory a removed stream leaves behind, given back to the system.

A stream's frames are numpy arrays of a few MB each. glibc's allocator serves blocks of that size
from its heaps once it has seen a few freed (its mmap threshold follows the largest block freed, up
to 32 MB), and keeps what is freed there for the next allocation: a process that ran one more
stream for a while keeps that stream's peak after the stream is gone, and `free` never shows it
back. `malloc_trim(0)` hands every heap's free pages back (glibc 2.8 and later trims every arena,
not only the top of the main one). The engine calls `trim_soon()` when a stream is removed or ends
while the run goes on (graph/engine.py), a couple of seconds later so that the stream's source,
queues and buffers are gone by then; off glibc (musl, macOS) it does nothing.

Example:
    >>> trim() in (True, False)
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import threading
import time

log = logging.getLogger("streamlens")

#: seconds between a stream's end and the trim: its source thread, worker and buffers let go by then
DELAY_S = 2.0


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


def trim() -> bool:
    """Give the allocator's free pages back to the system now; whether any were (False off glibc)."""
    function = _malloc_trim()
    return bool(function(0)) if function is not None else False


_lock = threading.Lock()
_due: float | None = None  # when the pending trim runs (time.monotonic()); None: none pending


def trim_soon(delay_s: float = DELAY_S) -> None:
    """`trim()` on a thread of its own `delay_s` from now (never on the caller's thread: it walks the
    heaps, a few milliseconds that a frame should not wait). Calls while one is pending move it to
    `delay_s` after the latest: a hundred streams removed at once make one trim, after the last of
    them has let go, not a hundred threads."""
    global _due
    if _malloc_trim() is None:
        return
    with _lock:
        start = _due is None
        _due = time.monotonic() + delay_s
    if start:
        threading.Thread(target=_trim_when_due, name="memory-trim", daemon=True).start()


def _trim_when_due() -> None:
    global _due
    while True:
        with _lock:
            wait = _due - time.monotonic()
            if wait <= 0:
                _due = None
                break
        time.sleep(wait)
    log.debug("memory: free heap pages given back: %s", trim())


__all__ = ["trim", "trim_soon", "DELAY_S"]
