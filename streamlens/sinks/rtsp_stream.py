"""One stream of an rtsp sink: its bounded queue, its thread, and its connection to the server.

`StreamPublisher.offer()` is called on the pipeline's thread and never waits: a frame that finds
the queue full is dropped and counted (`full`). The publisher's own thread takes frames from the
queue, draws them (`draw.FrameAnnotator`), encodes them (libx264, tune zerolatency) and sends them
(`Connection`). When the server is away the thread waits before trying again (`Backoff`: quick
retries while the outage is young, then longer waits up to `retry_max_s`); the frames that come
meanwhile are taken from the queue and counted as lost (`lost`), so the queue never holds old
frames for when the server is back. Connecting and each write wait at most `timeout_s` (FFmpeg's
own socket timeout), on this thread only.

Each connection is a new RTSP session (ANNOUNCE, SETUP, RECORD) with an encoder of its own: its
first frame is a keyframe, its SDP carries that encoder's SPS/PPS, its timestamps start at 0 and
follow the frames' own clock (`Frame.clock`, when each frame became available) in 1/90000 s, RTP's
clock for video: frames dropped before the encoder leave a gap in time, never a faster picture, and
a player sees each reconnection as a camera that started again. A keyframe is forced every
`keyframe_s` of that clock, so a player that joins waits at most that long for a picture.

Counters have one writer each: `full` the pipeline's thread; `sent`, `lost`, `connections` and
`error` this publisher's thread. Others read them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from fractions import Fraction
from typing import Any

import av
import cv2
import numpy as np
from av.video.frame import PictureType

from ..config.sinks import RtspSinkConfig
from ..errors import SinkError
from ..frame import FrameResult
from ..sources.backoff import Backoff
from ..urls import mask_url
from . import draw

log = logging.getLogger("streamlens.sinks.rtsp")

#: a stream's frame rate when the pipeline gives none (a stream added over HTTP): only the
#: encoder's rate control and its longest keyframe interval depend on it
DEFAULT_FPS = 30.0
#: the timestamps' unit: RTP's clock for video
TIME_BASE = Fraction(1, 90_000)
#: the first wait after a failed attempt (seconds)
RETRY_INITIAL_S = 0.5
#: how often the thread looks up from an empty queue for the end of its stream (seconds)
POLL_S = 0.2
_END = object()  # the queue's last item: the stream ended, or the sink closes


def _reason(error: BaseException) -> str:
    """An FFmpeg or socket error in words, without its URL's secrets (`Connection refused`)."""
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return mask_url(str(text))


class Connection:
    """One RTSP session publishing one stream: an output container (FFmpeg's rtsp muxer) and its
    H.264 encoder at one frame size. Nothing goes over the network until the first `send()`."""

    def __init__(self, url: str, size: tuple[int, int], fps: float, cfg: RtspSinkConfig):
        self.size = size  # the frames' size; the encoder's is made even, as yuv420p needs
        self.width, self.height = size[0] + size[0] % 2, size[1] + size[1] % 2
        self.keyframe_ticks = round(cfg.keyframe_s / TIME_BASE)
        self.origin: float | None = None  # the first frame's clock: timestamp 0
        self.last_pts = -1
        self.next_keyframe = 0
        self.started = False  # the session is up: its first frame was sent
        options = {"rtsp_transport": cfg.transport, "timeout": str(round(cfg.timeout_s * 1_000_000))}
        self.container = av.open(url, "w", format="rtsp", container_options=options)
        try:
            codec = {"preset": cfg.preset, "tune": "zerolatency", "crf": str(cfg.crf)}
            if cfg.bitrate_kbps:
                codec |= {"maxrate": f"{cfg.bitrate_kbps}k", "bufsize": f"{cfg.bitrate_kbps}k"}
            video = self.container.add_stream("libx264", rate=Fraction(fps).limit_denominator(100_000),
                                              options=codec)
            video.width, video.height, video.pix_fmt = self.width, self.height, "yuv420p"
            ctx = video.codec_context
            ctx.time_base = video.time_base = TIME_BASE
            ctx.gop_size = max(1, round(2 * cfg.keyframe_s * fps))  # a bound; keyframes are forced by time
            # tagged as converted (BT.601, limited range), as the video sink's files are
            ctx.colorspace = ctx.color_primaries = ctx.color_trc = 6  # SMPTE 170M
            ctx.color_range = 1  # MPEG (limited)
            ctx.open()  # an encoder's mistake shows here, before any network
            self.video = video
        except BaseException:
            self.container.close()
            raise

    def send(self, image: np.ndarray, clock: float) -> None:
        """Encode `image` (BGR, `size`) taken at `clock` (seconds, monotonic) and send it. Raises
        `av.FFmpegError` or `OSError` when the server cannot be reached or has gone."""
        if self.origin is None:
            self.origin = clock
        pts = max(self.last_pts + 1, round((clock - self.origin) / TIME_BASE))
        if (image.shape[1], image.shape[0]) != (self.width, self.height):
            image = cv2.copyMakeBorder(image, 0, self.height - image.shape[0], 0, self.width - image.shape[1],
                                       cv2.BORDER_REPLICATE)
        frame = av.VideoFrame.from_ndarray(cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420), format="yuv420p")
        frame.pts, frame.time_base = pts, TIME_BASE
        if pts >= self.next_keyframe:
            frame.pict_type = PictureType.I
            self.next_keyframe = pts + self.keyframe_ticks
        packets = self.video.encode(frame)
        self.last_pts = pts
        self.container.mux(packets)  # the first connects: ANNOUNCE, SETUP, RECORD
        self.started = True

    def close(self, flush: bool) -> None:
        """Send what the encoder holds (`flush`, and the session is up), then end the session
        (TEARDOWN). Never raises: the server may be gone already."""
        try:
            if flush and self.started:
                self.container.mux(self.video.encode(None))
        except (av.FFmpegError, OSError):
            pass
        try:
            self.container.close()
        except (av.FFmpegError, OSError):
            pass


class StreamPublisher:
    """One stream's queue and thread (see the module docs). `label` names the sink in log lines."""

    def __init__(self, stream: str, url: str, cfg: RtspSinkConfig, fps: float | None, label: str,
                 aborted: threading.Event):
        self.stream, self.url, self.cfg, self.label = stream, url, cfg, label
        self.shown_url = mask_url(url)
        self.fps = fps if fps and 0 < fps < 1000 else DEFAULT_FPS
        self.aborted = aborted
        self.queue: queue.Queue = queue.Queue(cfg.queue_size)
        self.ended = threading.Event()  # no more frames: publish what is queued, then end
        #: frames dropped because the queue was full (the pipeline's thread writes it)
        self.full = 0
        #: frames sent, and frames lost on this thread: the server away, a connection lost, an abort
        self.sent = 0
        self.lost = 0
        #: sessions that delivered a frame
        self.connections = 0
        #: a failure that is no network's (an encoder's): the sink raises it
        self.error: SinkError | None = None
        self._conn: Connection | None = None
        self._annotator: draw.FrameAnnotator | None = None
        self._backoff = Backoff(RETRY_INITIAL_S, max(RETRY_INITIAL_S, cfg.retry_max_s))
        self._retry_at = 0.0
        self._outage: tuple[float, int] | None = None  # since when, and drops() then
        self.thread = threading.Thread(target=self._run, name=f"rtsp-{stream}", daemon=True)
        self.thread.start()

    def offer(self, result: FrameResult) -> None:
        """Queue a frame result for the thread, or drop it (counted in `full`) when the queue is full."""
        try:
            self.queue.put_nowait(result)
        except queue.Full:
            self.full += 1

    def end(self) -> None:
        """No more frames: the thread publishes what is queued, ends the session and returns."""
        self.ended.set()
        try:
            self.queue.put_nowait(_END)
        except queue.Full:
            pass  # the thread sees `ended` once the queue is empty

    def drops(self) -> int:
        """Frames of this stream never published."""
        return self.full + self.lost

    def _next(self) -> Any:
        while True:
            try:
                return self.queue.get(timeout=POLL_S)
            except queue.Empty:
                if self.ended.is_set():
                    return _END

    def _run(self) -> None:
        try:
            while (item := self._next()) is not _END:
                if self.aborted.is_set() or self.error is not None:
                    self.lost += 1
                elif self._conn is None and time.monotonic() < self._retry_at:
                    self.lost += 1  # the server is away: this frame would only grow old here
                else:
                    self._publish(item)
        finally:
            if self._conn is not None:
                self._conn.close(flush=not self.aborted.is_set())
                self._conn = None
            while True:  # what is left (an abort, an error): counted
                try:
                    if self.queue.get_nowait() is not _END:
                        self.lost += 1
                except queue.Empty:
                    break

    def _publish(self, result: FrameResult) -> None:
        try:
            image = result.frame.image
            size = (image.shape[1], image.shape[0])
            if self._conn is None:
                self._annotator = draw.FrameAnnotator(size)
                self._conn = Connection(self.url, size, self.fps, self.cfg)
            if size != self._conn.size:  # the camera changed size: the session keeps its own
                image = cv2.resize(image, self._conn.size, interpolation=cv2.INTER_AREA)
            drawn = self._annotator.annotate(image, result.detections, result.analytics)
        except Exception as e:  # noqa: BLE001 - not the network's: the sink fails with it, in one line
            self.lost += 1
            self.error = SinkError(f"{self.label}: cannot publish {self.stream} to {self.shown_url}: "
                                   f"{type(e).__name__}: {_reason(e)}")
            return
        started = self._conn.started
        try:
            self._conn.send(np.ascontiguousarray(drawn), result.frame.clock)
        except (av.FFmpegError, OSError) as e:
            self.lost += 1
            self._conn.close(flush=False)
            self._conn = None
            self._failed(e, started)
            return
        self.sent += 1
        if not started:
            self._connected()

    def _failed(self, error: BaseException, was_up: bool) -> None:
        """A connection could not be made, or was lost: wait before the next attempt."""
        wait = self._backoff.next()
        self._retry_at = time.monotonic() + wait
        if was_up or self._outage is None:
            self._outage = (time.monotonic(), self.drops() - 1)
            what = "connection lost" if was_up else "cannot publish"
            log.warning("%s: %s: %s (%s); trying again, frames dropped meanwhile", self.label, self.shown_url,
                        what, _reason(error))
        else:
            log.debug("%s: %s: still cannot publish (%s); next try in %.1f s", self.label, self.shown_url,
                      _reason(error), wait)

    def _connected(self) -> None:
        self.connections += 1
        self._backoff.reset()
        if self._outage is None:
            log.info("%s: publishing %s to %s", self.label, self.stream, self.shown_url)
        else:
            since, lost = self._outage
            log.warning("%s: %s: publishing again after %.1f s (%d frames lost meanwhile)", self.label,
                        self.shown_url, time.monotonic() - since, self.drops() - lost)
        self._outage = None


__all__ = ["StreamPublisher", "Connection", "DEFAULT_FPS", "TIME_BASE"]
