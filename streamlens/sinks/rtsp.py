"""The rtsp sink: each stream's annotated video, encoded once and published to an RTSP server.

`- {type: rtsp, url: rtsp://127.0.0.1:8554/annotated}` publishes each stream at `<url>/<stream>`
(`rtsp://127.0.0.1:8554/annotated/cam1`), or where `{stream}` in the url says
(`rtsp://nvr:8554/{stream}-ai`); credentials in the url (`rtsp://user:password@host/...`) are
sent to the server and shown as `***` in every log line and error. The server is one that accepts
publishing (RTSP ANNOUNCE and RECORD): MediaMTX, GStreamer's RTSP server in record mode, Wowza...;
players then read the same stream from it, however many they are: the frames are drawn and encoded
once per stream, whatever the number of viewers.

The frames are drawn as the annotated video draws them (`draw.FrameAnnotator`: boxes, ids, labels,
masks, the analytics' lines, zones and counts), encoded to H.264 by libx264 with tune zerolatency
(no B-frames, no look-ahead: a frame leaves the encoder as it enters), `preset` (veryfast) and
`crf` (23), capped at `bitrate_kbps` when it is set, with a keyframe every `keyframe_s` (1 s), and
sent over RTSP by FFmpeg's muxer (`transport`: RTP interleaved in the RTSP connection, tcp, or udp).

The pipeline never waits for it: `write()` only hands a frame to its stream's publisher
(rtsp_stream.py), which draws, encodes and sends on a thread of its own from a queue of
`queue_size` frames; a frame that finds the queue full is dropped. When the server is unreachable
or goes away, the publisher tries again, quickly at first and then less often (up to
`retry_max_s` between tries), and the frames that come meanwhile are dropped; each try and each
write waits at most `timeout_s`. Every frame dropped is counted, per stream, in `drops()`, and the
run's summary lists them as the sink's losses. A stream starts a new RTSP session on each
connection (a keyframe first, timestamps from 0), as a camera that restarted would.

A stream's session ends (TEARDOWN) at its `StreamEnd` or when the sink closes; a stream of the
same name that comes again (added over HTTP) publishes again. `close()` waits at most `timeout_s`
and a second for the publishers; after `interrupt()` they drop what is queued.

Example:
    >>> sink = RtspSink("rtsp://admin:secret@nvr.local:8554/ai")
    >>> sink.url_for("cam1"), sink.shown_url_for("cam1")
    ('rtsp://admin:secret@nvr.local:8554/ai/cam1', 'rtsp://***@nvr.local:8554/ai/cam1')
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import av

from ..config.common import section
from ..config.sinks import RtspSinkConfig, rtsp_url
from ..errors import SinkError
from ..frame import FrameResult, StreamEnd
from ..urls import mask_url
from .base import Sink
from .rtsp_stream import StreamPublisher

log = logging.getLogger("streamlens.sinks.rtsp")

#: how much longer than `timeout_s` close() waits for the publishers (seconds)
CLOSE_GRACE_S = 1.0


class RtspSink(Sink):
    """Publishes each stream's annotated video to an RTSP server (see the module docs)."""

    name = "rtsp"
    #: write() only queues the frame (or drops it): the encoding is on the streams' threads
    inline = True

    def __init__(self, url: str | RtspSinkConfig, *, stream_fps: Mapping[str, float] | None = None, **keys: Any):
        """`RtspSink(cfg)` with the sink's typed section, or `RtspSink(url, **keys)` with its keys,
        checked as the pipeline file's are (`ValueError`); `stream_fps`: each stream's frame rate."""
        self.cfg = url if isinstance(url, RtspSinkConfig) else section(
            RtspSinkConfig, "rtsp sink", type="rtsp", url=url, **keys)
        self.stream_fps = dict(stream_fps or {})
        self._publishers: dict[str, StreamPublisher] = {}  # streams publishing now
        self._done: list[StreamPublisher] = []  # streams that ended: their counts stay
        self._aborted = threading.Event()
        self._closed = False
        self._lock = threading.Lock()  # the two above change on the pipeline's thread; drops() reads from any

    @property
    def label(self) -> str:
        """How log lines and errors name this sink: `rtsp sink sinks[2]`, or `rtsp sink`."""
        return f"rtsp sink {self.where}" if self.where else "rtsp sink"

    def url_for(self, stream: str) -> str:
        """The URL `stream` is published to (with its credentials: never show it; `shown_url_for`)."""
        return rtsp_url(self.cfg.url, stream)

    def shown_url_for(self, stream: str) -> str:
        """The URL `stream` is published to, as log lines show it (`mask_url`)."""
        return mask_url(self.url_for(stream))

    def open(self) -> None:
        """Check that this PyAV has libx264 (the server is not asked: it may come later)."""
        try:
            av.codec.Codec("libx264", "w")
        except av.codec.codec.UnknownCodecError:
            raise SinkError(f"{self.key('url')}: this FFmpeg build has no libx264 encoder, which the rtsp "
                            "sink needs (PyAV's wheels have it)") from None

    def write(self, item: Any, message: dict[str, Any], payload: bytes) -> None:
        """Hand a frame result to its stream's publisher (never waits), or end the stream's session
        on its `StreamEnd`; anything else has nothing to draw."""
        if self._closed:
            raise SinkError(f"{self.label}: closed")
        self._raise_error()
        if isinstance(item, StreamEnd):
            with self._lock:
                publisher = self._publishers.pop(item.stream, None)
                if publisher is not None:
                    self._done.append(publisher)
            if publisher is not None:
                publisher.end()
        elif isinstance(item, FrameResult):
            publisher = self._publishers.get(item.frame.stream)
            if publisher is None:
                publisher = self._start(item.frame.stream)
                with self._lock:
                    self._publishers[item.frame.stream] = publisher
            publisher.offer(item)

    def drops(self) -> dict[str, int]:
        """Frames never published, per stream: the queue full, the server away, a connection lost,
        an abort."""
        counts: Counter[str] = Counter()
        for publisher in self._all():
            counts[publisher.stream] += publisher.drops()
        return {stream: n for stream, n in counts.items() if n}

    def sent(self) -> dict[str, int]:
        """Frames published, per stream."""
        counts: Counter[str] = Counter()
        for publisher in self._all():
            counts[publisher.stream] += publisher.sent
        return dict(counts)

    def connections(self) -> dict[str, int]:
        """RTSP sessions that published frames, per stream (1 + the reconnections)."""
        counts: Counter[str] = Counter()
        for publisher in self._all():
            counts[publisher.stream] += publisher.connections
        return dict(counts)

    def interrupt(self) -> None:
        """From any thread: the publishers drop what is queued (counted) and end their sessions."""
        self._aborted.set()

    def close(self) -> None:
        """End every stream's session and wait for the publishers, at most `timeout_s` and
        `CLOSE_GRACE_S` (one stuck on a server that stopped answering is left behind, said in a
        line); log what was dropped. Safe to call twice; raises a publisher's error, if any."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._done.extend(self._publishers.values())
            self._publishers.clear()
        for publisher in self._done:
            publisher.end()
        deadline = time.monotonic() + self.cfg.timeout_s + CLOSE_GRACE_S
        for publisher in self._done:
            publisher.thread.join(max(0.0, deadline - time.monotonic()))
            if publisher.thread.is_alive():
                log.warning("%s: %s: the server did not answer within %.1f s; left behind", self.label,
                            publisher.shown_url, self.cfg.timeout_s)
        dropped = self.drops()
        if dropped:
            each = ", ".join(f"{stream}: {n}" for stream, n in sorted(dropped.items()))
            log.warning("%s: %d frame(s) not published (%s)", self.label, sum(dropped.values()), each)
        self._raise_error()

    def _start(self, stream: str) -> StreamPublisher:
        return StreamPublisher(stream, self.url_for(stream), self.cfg, self.stream_fps.get(stream), self.label,
                               self._aborted)

    def _all(self) -> list[StreamPublisher]:
        with self._lock:
            return [*self._done, *self._publishers.values()]

    def _raise_error(self) -> None:
        for publisher in self._all():
            if publisher.error is not None:
                raise publisher.error


__all__ = ["RtspSink"]
