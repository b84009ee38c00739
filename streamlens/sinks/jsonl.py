"""The JSONL sink: one schema-v1 message per line in a file, frames and stream ends alike.

Lines are always whole. The sink keeps finished lines in memory and hands them to the OS only in
whole lines, so a reader (`tail -f`, or someone opening the file after Ctrl-C) never sees half a
line. It hands them over every `FLUSH_INTERVAL_S` seconds (a small background thread does this,
so lines reach the file even while a live stream stalls), at once on every `StreamEnd`, and in
`close()` (which the runtime calls on every ending: the end, an error, Ctrl-C).

When a write fails (the disk is full), the file is cut back to its last whole line, the lines
not written are counted in `lost_lines`, and the sink raises `SinkError` naming the path (and the
key, `sinks[i].path`, for a sink from a pipeline file) on that write or the next; nothing more is
written to the file after that.

Example:
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from streamlens.frame import StreamEnd
    >>> from streamlens.wire.schema import dumps, eos_message
    >>> path = Path(tempfile.mkdtemp()) / "out" / "results.jsonl"
    >>> sink = JsonlSink(path)
    >>> sink.open()
    >>> end = StreamEnd(stream="cam1", seq=0, frames=0)
    >>> sink.write(end, eos_message(end), dumps(eos_message(end)))
    >>> sink.close()
    >>> json.loads(path.read_text())["type"]
    'eos'
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ..config.common import section
from ..config.sinks import JsonlSinkConfig
from ..errors import SinkError
from ..frame import FrameResult, StreamEnd
from .base import Sink, os_reason

#: how long a finished line may wait in memory before it is handed to the OS
FLUSH_INTERVAL_S = 0.2
#: hand lines over early when this many bytes are waiting, so memory stays bounded
MAX_PENDING_BYTES = 1 << 20


class JsonlSink(Sink):
    """Writes `payload + b"\\n"` for every item to `path` (parent folders are made; the file is
    truncated on `open()`). `close()` flushes and is safe to call twice.

    Thread use: `write()` is called from the sink's runtime thread; a daemon thread of this sink
    flushes waiting lines on a timer. A write error on that thread is raised as `SinkError` by the
    next `write()` or by `close()`.
    """

    name = "jsonl"

    def __init__(self, path: str | Path | JsonlSinkConfig):
        """`JsonlSink(cfg)` with the sink's typed section, or `JsonlSink(path)`."""
        cfg = path if isinstance(path, JsonlSinkConfig) else section(JsonlSinkConfig, "jsonl sink", type="jsonl",
                                                                     path=path)
        self.path = cfg.path
        self._file: Any = None  # unbuffered: each OS write is one or more whole lines
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._lock = threading.Lock()
        self._stop_flusher = threading.Event()
        self._flusher: threading.Thread | None = None
        self._flush_error: SinkError | None = None
        self._closed = False
        self._whole = 0  # bytes of the file that are whole lines
        #: lines that never reached the file because writing failed
        self.lost_lines = 0

    def open(self) -> None:
        """Make the parent folders and open the file for writing, truncating it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "wb", buffering=0)
        except OSError as e:
            raise SinkError(f"{self.key('path')}: cannot open {self.path}: {os_reason(e)}") from None
        self._flusher = threading.Thread(
            target=self._flush_on_timer, name="jsonl-flush", daemon=True
        )
        self._flusher.start()

    def write(self, item: FrameResult | StreamEnd, message: dict[str, Any], payload: bytes) -> None:
        """Queue one line; hand waiting lines to the OS at once on a `StreamEnd` or if many wait."""
        if self._file is None or self._closed:
            raise SinkError(f"jsonl sink: {self.path} is not open")
        if self._flush_error is not None:
            raise self._flush_error
        line = payload + b"\n"
        with self._lock:
            self._pending.append(line)
            self._pending_bytes += len(line)
            if isinstance(item, StreamEnd) or self._pending_bytes >= MAX_PENDING_BYTES:
                self._flush_locked()

    def flush(self) -> None:
        """Hand every waiting line to the OS now."""
        with self._lock:
            self._flush_locked()

    def close(self) -> None:
        """Stop the timer, write what is waiting, close the file. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._stop_flusher.set()
        if self._flusher is not None:
            self._flusher.join()
        try:
            if self._file is not None:
                with self._lock:
                    self._flush_locked()
        finally:
            if self._file is not None:
                self._file.close()
        if self._flush_error is not None:
            raise self._flush_error

    def _flush_on_timer(self) -> None:
        while not self._stop_flusher.wait(FLUSH_INTERVAL_S):
            try:
                self.flush()
            except SinkError:
                return  # kept in self._flush_error; raised by the next write() or close()

    def _flush_locked(self) -> None:
        """Write waiting lines with as few OS writes as possible; the caller holds the lock. On a
        failed write, cut the file back to its last whole line and raise (now and from then on)."""
        if not self._pending:
            return
        if self._flush_error is not None:  # the file takes nothing more once a write failed
            self.lost_lines += len(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
            raise self._flush_error
        lines = len(self._pending)
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        done = 0
        try:
            while done < len(data):
                done += self._file.write(memoryview(data)[done:])
        except OSError as e:
            kept = data.rfind(b"\n", 0, done) + 1  # the lines written whole
            self.lost_lines += lines - data.count(b"\n", 0, kept)
            self._flush_error = SinkError(f"{self.key('path')}: cannot write {self.path}: {os_reason(e)}")
            try:
                os.ftruncate(self._file.fileno(), self._whole + kept)
            except OSError:
                pass  # nothing more can be done for the file; the error says what happened
            raise self._flush_error from None
        self._whole += done
