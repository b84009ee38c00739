"""What the live page shows of a run: each stream's newest frame and result, its last results, and
the events, kept by a sink that only keeps references.

`PreviewSink` is an inline sink (written on the engine's thread). Its `write()` never encodes, never
copies pixels and never waits: it stores references to what the pipeline made anyway (the newest
`FrameResult` and its schema-v1 message per stream, the last `RESULTS` messages per stream, the
last `EVENTS` event messages, and their snapshot JPEGs up to `SNAPSHOT_BYTES`) under a lock held
for a few attribute writes. A `clip_lost` event marks the kept events with its clip's path lost
(`clip.lost`, `clip.reason`), as the history file does. Everything that costs something (turning a frame into BGR, drawing,
JPEG encoding) happens in the HTTP server's request handlers, when somebody asks: nobody
watching, no preview work.

Encoded JPEGs are cached per stream for the newest frame (`preview_jpeg`: the frame as it is, for
the page's canvas; `annotated_jpeg`: boxes, labels, lines, zones and counts drawn, for scripts), so
any number of viewers cost one encode per frame, and viewers asking at once wait for that one
encode rather than each making their own.

Example:
    >>> import numpy as np
    >>> from streamlens.frame import Frame, FrameResult, empty_detections
    >>> from streamlens.wire.schema import frame_message
    >>> sink = PreviewSink()
    >>> result = FrameResult(Frame("cam1", 0, 0.0, 1.0, np.zeros((36, 64, 3), np.uint8)), 0, True, empty_detections())
    >>> sink.write(result, frame_message(result), b"")
    >>> seq, jpeg, message = sink.preview_jpeg("cam1")
    >>> seq, jpeg[:2], message["width"], sink.message("cam1", 0) is message
    (0, b'\\xff\\xd8', 64, True)
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np

from ..frame import Event, FrameResult, StreamEnd
from ..sinks.base import Sink

#: frame messages kept per stream (by seq), for `/api/streams/<name>/result?seq=`
RESULTS = 64
#: events kept (all streams), for `/api/events`
EVENTS = 500
#: the most bytes of snapshot JPEGs kept with them (the newest events' first): frame snapshots of
#: 1080p cameras are 200 KB or more, and 500 of them would be 100 MB on a small box
SNAPSHOT_BYTES = 16 << 20
#: JPEG quality of the preview and of the annotated frame
JPEG_QUALITY = 80
#: a preview wider than this is scaled down (the page draws boxes in source pixels whatever the
#: JPEG's size); the annotated frame keeps the stream's size
PREVIEW_MAX_WIDTH = 1280


class _Stream:
    """What is kept of one stream. `newest` is written by the engine's thread; the caches belong to
    the request handlers, under `encoding`."""

    __slots__ = ("newest", "messages", "ended", "encoding", "preview", "annotated")

    def __init__(self, results: int) -> None:
        self.newest: tuple[FrameResult, dict] | None = None
        self.messages: deque = deque(maxlen=results)
        self.ended: str | None = None  # the eos reason, once the stream has ended
        self.encoding = threading.Lock()  # one encode at a time per stream: the others wait for it
        self.preview: tuple[int, bytes] | None = None  # (seq, JPEG) of the newest frame encoded
        self.annotated: tuple[int, bytes] | None = None


class PreviewSink(Sink):
    """The live page's view of a run (see the module's docstring). Thread use: `write()` on the
    engine's thread; every other method from any thread (the HTTP server's)."""

    name = "preview"
    inline = True

    def __init__(self, results: int = RESULTS, events: int = EVENTS, snapshot_bytes: int = SNAPSHOT_BYTES):
        self._results = results
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._events: deque = deque(maxlen=events)  # (index, message)
        self._event_count = 0  # events seen so far: the newest one's index (the first is 1)
        self._shots: dict[int, bytes] = {}  # event index: its snapshot JPEG, while kept
        self._shot_order: deque = deque()  # the indices of `_shots`, oldest first
        self._shot_bytes, self._shot_budget = 0, snapshot_bytes
        # drawing imports supervision: a sink made in the process that draws (an engine), never in a
        # supervisor that only asks its engines (scale/preview.py), which then stays without it
        from ..sinks.draw import StreamAnnotators

        self._annotators = StreamAnnotators()  # for frame.jpg: each stream's used under its `encoding`

    # -- the engine's side: references only ----------------------------------------------------

    def write(self, item: Any, message: dict[str, Any], payload: bytes) -> None:
        if isinstance(item, FrameResult):
            stream = self._stream(message["stream"])
            with self._lock:
                stream.newest = (item, message)
                stream.messages.append(message)
        elif isinstance(item, Event):
            jpeg = item.snapshot.jpeg if item.snapshot is not None else None
            with self._lock:
                self._event_count += 1
                index = self._event_count
                self._events.append((index, message))
                if message.get("event") == "clip_lost":
                    self._mark_clip_lost(message)
                if jpeg is not None:
                    self._shots[index] = jpeg
                    self._shot_order.append(index)
                    self._shot_bytes += len(jpeg)
                oldest = self._events[0][0]  # snapshots of events no longer kept, and past the budget, go
                while self._shot_order and (self._shot_bytes > self._shot_budget or self._shot_order[0] < oldest):
                    self._shot_bytes -= len(self._shots.pop(self._shot_order.popleft()))
        elif isinstance(item, StreamEnd):
            stream = self._stream(message["stream"])
            with self._lock:
                stream.ended = message.get("reason", "end")

    def _mark_clip_lost(self, lost: dict) -> None:
        """The kept events of `lost`'s stream with its clip's path: their `clip` marked lost, with the
        reason (new messages in their place: a message is never changed). Under the lock."""
        clip = lost.get("clip") or {}
        marked = {"lost": True, "reason": clip.get("reason")}
        found = [(at, index, m) for at, (index, m) in enumerate(self._events)
                 if m is not lost and m.get("stream") == lost.get("stream")
                 and isinstance(m.get("clip"), dict) and m["clip"].get("path") == clip.get("path")]
        for at, index, m in found:
            self._events[at] = (index, {**m, "clip": {**m["clip"], **marked}})

    def _stream(self, name: str) -> _Stream:
        stream = self._streams.get(name)
        if stream is None:
            with self._lock:
                stream = self._streams.setdefault(name, _Stream(self._results))
        return stream

    # -- the request handlers' side ------------------------------------------------------------

    def newest(self, name: str) -> tuple[FrameResult, dict] | None:
        """The newest result of stream `name` and its message, or None before its first."""
        stream = self._streams.get(name)
        return None if stream is None else stream.newest

    def newest_message(self, name: str) -> dict | None:
        """The frame message of stream `name`'s newest result, or None before its first."""
        newest = self.newest(name)
        return None if newest is None else newest[1]

    def ended(self, name: str) -> str | None:
        """How stream `name` ended (its eos `reason`), None while it goes on."""
        stream = self._streams.get(name)
        return None if stream is None else stream.ended

    def message(self, name: str, seq: int) -> dict | None:
        """The frame message of stream `name` with this `seq`, while it is among the last kept."""
        stream = self._streams.get(name)
        if stream is None:
            return None
        with self._lock:
            messages = list(stream.messages)
        if messages:  # seq has no gaps within a run: the place is known
            at = seq - messages[0]["seq"]
            if 0 <= at < len(messages) and messages[at]["seq"] == seq:
                return messages[at]
        return next((m for m in messages if m["seq"] == seq), None)

    def geometry(self, name: str) -> tuple[list, list]:
        """The lines and zones of stream `name` as its analytics apply them, in source pixels:
        ([{"name", "points"}], [{"name", "polygon"}]); empty before its first frame or without rules."""
        newest = self.newest(name)
        geometry = getattr(newest[0].analytics, "geometry", None) if newest is not None else None
        if geometry is None:
            return [], []
        lines = [{"name": str(n), "points": np.asarray(p, np.float64).round(2).tolist()} for n, p in geometry.lines]
        zones = [{"name": str(n), "polygon": np.asarray(p, np.float64).reshape(-1, 2).round(2).tolist()}
                 for n, p in geometry.zones]
        return lines, zones

    def events_since(self, index: int, limit: int = EVENTS) -> list[tuple[int, dict, bool]]:
        """The events after `index` (oldest first, at most `limit`, the newest ones): (index,
        message, whether a snapshot JPEG is kept for it)."""
        with self._lock:
            kept = list(self._events)
            shots = set(self._shots)
        after = [(i, m, i in shots) for i, m in kept if i > index]
        return after[-limit:] if limit > 0 else []

    def shot_of(self, message: dict) -> int | None:
        """The index of the event kept here that `message` is (the same stream, seq and time),
        when its snapshot is kept; else None."""
        key = (message.get("stream"), message.get("seq"), message.get("ts"))
        with self._lock:
            for index, kept in reversed(self._events):
                if (kept.get("stream"), kept.get("seq"), kept.get("ts")) == key:
                    return index if index in self._shots else None
        return None

    def event(self, index: int) -> dict | None:
        """The message of event `index`, while it is kept."""
        with self._lock:
            return next((m for i, m in self._events if i == index), None)

    def snapshot(self, index: int) -> bytes | None:
        """The snapshot JPEG of event `index`, while it is kept and when it has one."""
        return self._shots.get(index)

    def preview_jpeg(self, name: str) -> tuple[int, bytes, dict] | None:
        """(seq, JPEG, message) of stream `name`'s newest frame as it is (no drawing; at most
        `PREVIEW_MAX_WIDTH` wide), encoded once per frame; None before its first frame."""
        found = self._encoded(name, "preview", self._plain)
        return None if found is None else (*found[0], found[1])

    def annotated_jpeg(self, name: str) -> tuple[int, bytes] | None:
        """(seq, JPEG) of stream `name`'s newest frame with its boxes, labels, lines, zones and counts
        drawn (as in the annotated video), at the stream's size; None before its first frame."""
        found = self._encoded(name, "annotated", lambda result: self._annotators.annotate(
            result, result.frame.peek_image()))
        return None if found is None else found[0]

    def _encoded(self, name: str, slot: str, picture) -> tuple[tuple[int, bytes], dict] | None:
        """((seq, JPEG), message) of stream `name`'s newest frame, `picture(result)` encoded and
        kept in the stream's `slot` until a newer frame comes; None before its first frame."""
        stream = self._streams.get(name)
        newest = None if stream is None else stream.newest
        if newest is None:
            return None
        result, message = newest
        from ..sinks.draw import encode_jpeg

        with stream.encoding:
            cached = getattr(stream, slot)
            if cached is None or cached[0] != message["seq"]:
                cached = (message["seq"], encode_jpeg(picture(result), JPEG_QUALITY))
                setattr(stream, slot, cached)
        return cached, message

    @staticmethod
    def _plain(result) -> np.ndarray:
        image = result.frame.peek_image()
        if image.shape[1] > PREVIEW_MAX_WIDTH:
            import cv2

            height = max(1, round(image.shape[0] * PREVIEW_MAX_WIDTH / image.shape[1]))
            image = cv2.resize(image, (PREVIEW_MAX_WIDTH, height), interpolation=cv2.INTER_AREA)
        return image

    def streams(self) -> list[str]:
        """The streams seen so far."""
        return list(self._streams)
