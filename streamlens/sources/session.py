"""One connection to a live input: open it with FFmpeg's own timeouts, then demux and decode until it
ends, fails or is told to stop. This is what a decode worker runs for a camera, once per (re)connect
(a `SessionSpec`; a file's worker runs a `FileSpec` instead, see file_passes.py). The decoded pictures go to
the worker's transport as they are: it packs them for the owner (see worker_loop.py).

FFmpeg, not Python, bounds every network wait: `input_options()` sets the option the input's
protocol honours, in microseconds (checked against the FFmpeg that PyAV 18 bundles):
- rtsp://, rtsps://: `timeout` (socket I/O, connect included; also the UDP receive timeout).
  `stimeout` is gone from FFmpeg and `rw_timeout` is ignored by RTSP.
- udp://: `timeout`.
- http(s):// (HLS included), rtmp(s)://, tcp://, srt:// and the rest: `rw_timeout`. Not `timeout`:
  for rtmp it means "listen for an incoming connection".
PyAV's Python-level `timeout=` (an interrupt callback that takes the GIL on every poll) is never used.

Example:
    >>> opts = input_options("rtsp://cam/1", transport="tcp", timeout_s=2.5, user={"probesize": "65536"})
    >>> opts["rtsp_transport"], opts["timeout"], opts["probesize"]
    ('tcp', '2500000', '65536')
    >>> "timeout" in input_options("rtmp://host/app", transport="tcp", timeout_s=1, user={})
    False
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import av
import numpy as np

from ..urls import mask_url
from .clips import CLOSE_S as CLIPS_CLOSE_S, ClipSpec

#: FFmpeg input options every live input gets (the user's `options` override them). Probe little:
#: FFmpeg's default (5 MB or 5 s) holds a (re)connect's first frame back for about a second more,
#: measured against GStreamer's RTSP server here (1.3 s to the first frame, 0.3 s with these). The
#: decoder learns what the probe did not from the stream itself.
LIVE_DEFAULT_OPTIONS = {"probesize": "32768", "analyzeduration": "500000"}
#: a live decoder this far (seconds) behind its camera's clock skips to a keyframe (decode.py
#: `CatchUp`): a second is thirty frames of a 30 fps camera, more than any queue of the graph holds
BEHIND_S = 1.0
#: the protocols whose packets arrive as the camera sends them, and so show a decoder behind its
#: camera; HLS and other HTTP streams come in segments, bursts seconds apart by design
STEADY_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "rtp", "srt", "udp", "tcp")


def behind_limit(uri: str) -> float | None:
    """`BEHIND_S` for an input that streams steadily (see `STEADY_SCHEMES`), else None (no catch-up).

    Example:
        >>> behind_limit("rtsp://10.0.0.7/stream1"), behind_limit("https://cdn.example/live.m3u8")
        (1.0, None)
    """
    return BEHIND_S if _scheme(uri) in STEADY_SCHEMES else None


def _scheme(uri: str) -> str:
    """`uri`'s scheme in lower case; "" for a path or a device."""
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


def input_options(uri: str, *, transport: str, timeout_s: float, user: dict[str, str]) -> dict[str, str]:
    """The FFmpeg options to open `uri` with: live defaults, the timeout its protocol honours, the
    RTSP transport, then the user's own options on top."""
    scheme = _scheme(uri)
    options = dict(LIVE_DEFAULT_OPTIONS) if scheme else {}
    micros = str(int(timeout_s * 1_000_000))
    if scheme in ("rtsp", "rtsps"):
        options["rtsp_transport"] = transport
        options["timeout"] = micros
    elif scheme == "udp":
        options["timeout"] = micros
    elif scheme:
        options["rw_timeout"] = micros
    options.update(user)
    return options


@dataclass(frozen=True)
class SessionSpec:
    """What a worker needs to open and decode one live input. Picklable (it crosses to the worker).

    A session kind: `lossless` says whether its frames wait for a free slot (a file's do) or are
    dropped when every slot is full (a camera's: it never waits); `run()` is what the worker runs.
    """

    uri: str
    options: dict[str, str] = field(default_factory=dict)
    #: FFmpeg input format to force, e.g. "v4l2" for /dev/videoN; None: let FFmpeg probe
    format: str | None = None
    max_fps: float | None = None
    export_mvs: bool = False
    fast_decode: bool = False  # `sources[i].fast_decode`: the loop filter skipped
    #: the largest picture (width x height) taken; a larger one ends the session as `refused`
    #: (None: no limit; a pipeline file's sources have one, `sources[i].max_pixels`)
    max_pixels: int | None = None
    #: how far (seconds) decoding may fall behind the camera's clock before it skips to a keyframe
    #: (decode.py `CatchUp`; `behind_limit` chooses it for a URL); None: never skip
    behind_s: float | None = None
    #: `analytics.clips`: what the session records of its packets for clips (clips.py `ClipSpec`);
    #: None: nothing
    clips: ClipSpec | None = None

    #: a camera never waits for its owner: a frame with no free slot is dropped
    lossless = False

    @property
    def display_uri(self) -> str:
        return mask_url(self.uri)

    def run(self, out: SessionOutput, should_stop: Callable[[], bool]) -> tuple[str, str, dict]:
        """`run_session`, with nothing more to say of its end (a file's session says more)."""
        return (*run_session(self, out, should_stop), {})


@dataclass(frozen=True)
class StreamInfo:
    """What an opened input says about its video: sent once per connection."""

    width: int
    height: int
    fps: float | None
    codec: str


#: how a session ended: "eof" (the server ended the stream), "error" (a read failed),
#: "open_failed" (no connection or no video), "aborted" (asked to stop), "refused" (this host does
#: not take its pictures: larger than `max_pixels`, or no room in shared memory for them)
END_REASONS = ("eof", "error", "open_failed", "aborted", "refused")


def too_large(width: int, height: int, max_pixels: int | None) -> str | None:
    """Why a `width` x `height` picture is refused under `max_pixels`, in one line, or None.

    Example:
        >>> too_large(8192, 8192, 7680 * 4320)
        'a picture of 8192x8192 (67.1 Mpx) is larger than max_pixels (33.2 Mpx)'
        >>> too_large(1920, 1080, 7680 * 4320) is None
        True
    """
    if max_pixels is None or width * height <= max_pixels:
        return None
    return (f"a picture of {width}x{height} ({width * height / 1e6:.1f} Mpx) is larger than max_pixels "
            f"({max_pixels / 1e6:.1f} Mpx)")


class SessionOutput:
    """Where a session sends what it makes; the worker's transport implements it. `thin`: the
    session's share of frames (decode.py `DecodeShare`: asked before each packet is decoded and
    after each frame), or None."""

    thin = None

    def opened(self, info: StreamInfo) -> None:
        raise NotImplementedError

    def frame(self, picture: av.VideoFrame, pts: float, ts: float, clock: float, decode_ms: float,
              motion_vectors: np.ndarray | None, position: tuple[int, float] | None = None) -> None:
        """A decoded picture, as the decoder gave it; `ts` and `clock` are `time.time()` and
        `time.monotonic()` when it was decoded; `decode_ms` what decoding it cost so far (the transport
        adds what packing it costs). `position`: a file's `(index, media seconds since the run began)`."""
        raise NotImplementedError

    def rejected(self) -> None:
        """A packet the decoder rejected (it is skipped)."""
        raise NotImplementedError

    def refused(self) -> None:
        """A decoded picture this host does not take (see `too_large`): counted, then the session ends."""
        raise NotImplementedError

    def skipped(self) -> None:
        """A packet not decoded: the decoder had fallen behind the camera (decode.py `CatchUp`)."""
        raise NotImplementedError

    def clock_start(self) -> float | None:
        """A live file's clock as the owner paces its frames (`time.monotonic()` at media time 0),
        once the owner has said it; else None."""
        return None

    def recorder(self, stream):
        """The `ClipRecorder` of this session's packets (`stream`: the input stream), or None when
        the session records no clips."""
        return None


def reason_of(error: BaseException, uri: str) -> str:
    """FFmpeg's own words for an error, with the URL and its credentials kept out."""
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return mask_url(text.replace(uri, "<uri>")).replace("<uri>", mask_url(uri))


def run_session(spec: SessionSpec, out: SessionOutput, should_stop: Callable[[], bool]) -> tuple[str, str]:
    """Open `spec.uri`, decode it into `out` until it ends, fails or `should_stop()` says so.

    Returns `(reason, message)`, reason one of `END_REASONS`, message one line (URL masked).
    Packets the decoder rejects (lost UDP packets, a stream joined mid-GOP) are skipped and told to
    `out.rejected()`.
    """
    try:
        container = av.open(spec.uri, options=dict(spec.options), format=spec.format)
    except (av.error.FFmpegError, OSError, ValueError) as error:
        return "open_failed", reason_of(error, spec.uri)
    try:
        if not container.streams.video:
            return "open_failed", "no video stream"
        return _decode(container, spec, out, should_stop)
    finally:
        container.close()


def _decode(container, spec: SessionSpec, out: SessionOutput, should_stop) -> tuple[str, str]:
    from .decode import CatchUp, FrameRateCap, PresentationTimes, decoder_options  # the file source's rules too
    from .motion_vectors import ReferenceDistance

    stream = container.streams.video[0]
    stream.thread_type = "SLICE"  # low latency: frame threads would hold frames back
    options = decoder_options(spec.export_mvs, spec.fast_decode, chunks=True)
    if options:
        stream.codec_context.options = options
    rate = stream.average_rate or stream.guessed_rate
    fps = float(rate) if rate else None
    ctx = stream.codec_context
    refusal = too_large(ctx.width, ctx.height, spec.max_pixels)
    if refusal:  # before the decoder allocates a picture of that size
        return "refused", refusal
    out.opened(StreamInfo(ctx.width, ctx.height, fps, ctx.name))
    times = PresentationTimes(stream.time_base or Fraction(1, 90000), 1.0 / (fps or 30.0))
    cap = FrameRateCap(spec.max_fps) if spec.max_fps else None
    anchors = ReferenceDistance()
    catch_up = CatchUp(spec.behind_s) if spec.behind_s else None
    tick = float(stream.time_base or Fraction(1, 90000))
    packets = container.demux(stream)
    recorder = out.recorder(stream)
    try:
        return _demux_decode(packets, spec, out, should_stop, recorder, catch_up, tick, times, cap, anchors)
    finally:
        if recorder is not None:
            recorder.close(wait_s=CLIPS_CLOSE_S)  # clips still open are written with what they have


def _demux_decode(packets, spec: SessionSpec, out: SessionOutput, should_stop, recorder, catch_up, tick, times, cap,
                  anchors) -> tuple[str, str]:
    from .decode import drain
    from .motion_vectors import frame_motion_vectors

    thin = out.thin
    decoded = 0
    while True:
        if should_stop():
            return "aborted", ""
        try:
            packet = next(packets)
        except StopIteration:
            return "eof", "the stream ended"
        except (av.error.FFmpegError, OSError) as error:
            return "error", reason_of(error, spec.uri)
        if recorder is not None:  # before any skipping: a clip keeps what the camera sent
            recorder.packet(packet)
        if thin is not None and packet.size and thin.skips(packet.is_keyframe, None if packet.pts is None
                                                           else packet.pts * tick):  # counted in `thin.skipped`
            if not thin.drain_due:
                continue
            decoder, packet = packet.stream.codec_context, None  # what it holds of the keyframe before: now
        if catch_up is not None and packet is not None and packet.size:
            ticks = packet.dts if packet.dts is not None else packet.pts
            if catch_up.skip(None if ticks is None else ticks * tick, time.monotonic(), packet.is_keyframe):
                if not catch_up.backlog:  # a server's backlog from before the session is not the camera's loss
                    out.skipped()
                continue
        started = time.perf_counter()  # decode time only: waiting for the network is not decoding
        try:
            frames = packet.decode() if packet is not None else drain(decoder)
        except av.error.FFmpegError:
            out.rejected()
            frames = []
        share_ms = (time.perf_counter() - started) * 1000.0 / max(1, len(frames))
        for frame in frames:
            refusal = too_large(frame.width, frame.height, spec.max_pixels)
            if refusal:  # the camera changed its resolution
                out.refused()
                return "refused", refusal
            pts = times.seconds(frame)
            distance = anchors.step(frame.pict_type, decoded) if spec.export_mvs else 1
            decoded += 1
            if cap is not None and not cap.keep(pts):
                continue
            if thin is not None and thin.drops():  # counted in `thin.skipped`
                continue
            started = time.perf_counter()
            mvs = frame_motion_vectors(frame, distance) if spec.export_mvs else None
            out.frame(frame, pts, time.time(), time.monotonic(), share_ms + (time.perf_counter() - started) * 1000.0,
                      mvs)
