"""One run over a file, the same on the graph's thread and in a decode worker: `FileSpec` (what the
run needs; picklable), `open_file` (FFmpeg with the source's options, a video stream needed; every
failure a `SourceError` naming the file) and `FilePasses` (demux, decode, the `max_fps` cap, motion
vectors, loops). `run_file_session` is a decode worker's session over a file. See file.py.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from ..errors import SourceError
from ..pictures import YuvPicture
from ..urls import is_url
from .clips import CLOSE_S as CLIPS_CLOSE_S, ClipSpec
from .decode import ClockCatchUp, FrameRateCap, PresentationTimes, decoder_options, drain
from .motion_vectors import ReferenceDistance, frame_motion_vectors
from .session import too_large

#: the frame rate assumed when a file states none (only used to fill in missing timestamps)
DEFAULT_FPS = 30.0
#: packets a pass may read short of the frame count its container declares and still count as whole.
#: The count comes from the container's index, which a whole file's packets match exactly; the slack
#: keeps an index off by a sample or two (a muxer's trailing entry) from failing a run, and a file cut
#: within its last two frames lost nothing worth reporting
TRUNCATION_SLACK = 2


@dataclass(frozen=True)
class FileSpec:
    """What one run over a file needs, on this thread or in a decode worker, where it is the session
    kind for files (see protocol.py). Picklable (it crosses to the worker)."""

    path: str
    display_path: str
    options: dict[str, str]
    live: bool = False
    loop: bool = False
    max_fps: float | None = None
    export_mvs: bool = False
    fast_decode: bool = False  # `sources[i].fast_decode`: the loop filter skipped
    start_s: float = 0.0  # `sources[i].start_s`: the first pass begins this far in
    #: the file's frame rate (None: it states none) and the frames its container declares (0: none)
    fps: float | None = None
    declared_frames: int = 0
    #: the largest picture (width x height) taken: a larger one ends the run over the file with an error
    max_pixels: int | None = None
    #: `analytics.clips`: as `SessionSpec.clips` (session.py); None: no clips recorded
    clips: ClipSpec | None = None

    #: a file never loses a frame to a full ring: its worker waits for a free slot
    lossless = True

    @property
    def is_file(self) -> bool:
        """A file on disk (not a URL or a device): it can be paced."""
        return not is_url(self.path) and not self.path.startswith("/dev/")

    def run(self, out, should_stop: Callable[[], bool]) -> tuple[str, str, dict]:
        return run_file_session(self, out, should_stop)


def open_file(spec: FileSpec) -> av.container.InputContainer:
    """Open the input and check that it has a video stream; every failure is a `SourceError`, one
    clear line naming it."""
    if spec.is_file:
        path = Path(spec.path)
        if not path.exists():
            raise SourceError(f"{spec.display_path}: no such file")
        if path.is_dir():
            raise SourceError(f"{spec.display_path}: is a folder, not a video file")
    try:
        container = av.open(spec.path, options=spec.options)
    except av.error.InvalidDataError as error:
        reason = _reason(error)
        raise SourceError(f"{spec.display_path}: not a video FFmpeg can read ({reason})") from None
    except (av.error.FFmpegError, OSError) as error:
        raise SourceError(f"{spec.display_path}: cannot open ({_reason(error)})") from None
    if not container.streams.video:
        container.close()
        raise SourceError(f"{spec.display_path}: has no video stream")
    stream = container.streams.video[0]
    # frame threads decode several frames at once, and the motion vectors FFmpeg exports then
    # differ from run to run (16 different results in 30 decodes of a clip with B-frames, on a
    # busy machine): with vectors, slices only, so results on files stay the same on every run
    stream.thread_type = "SLICE" if spec.live or spec.export_mvs else "AUTO"
    options = decoder_options(spec.export_mvs, spec.fast_decode)
    if options:
        stream.codec_context.options = {**stream.codec_context.options, **options}
    return container


@dataclass(slots=True, eq=False)
class Decoded:
    """One frame out of a run over a file: the picture (PyAV's on this thread; from a worker a
    `YuvPicture`, or BGR for pixel formats that do not cross as planes), its `index` and `pts`,
    `media` (seconds since the run began on the file's clock, loops included: when a paced frame is
    due), the milliseconds spent reading and decoding it, and its motion vectors."""

    picture: av.VideoFrame | YuvPicture | np.ndarray
    index: int
    pts: float
    media: float
    decode_ms: float
    vectors: np.ndarray | None


class FilePasses:
    """The passes one run of `FileSource.frames()` makes over a file: demux, decode (a packet the
    decoder rejects is skipped and told to `rejected()`), the `max_fps` cap, motion vectors, and at
    the end of the file a loop (seek back, or reopen) or the end of the run. Iterate it for
    `Decoded` frames. The same code runs on the graph's thread and in a decode worker, so both give
    the same frames.

    `container`: the file opened already (owned here from then on), else it is opened at the first
    step. `skip(media, keyframe)`, when given, is asked before each packet is decoded (with the
    packet's media time, as `Decoded.media` counts it, and whether it is a keyframe) and a True
    skips it undecoded (a paced file behind its clock catching up, file.py); `skipped` counts them.
    `read_error` is the current pass's; once the run ended by itself, `incomplete` says why a
    single pass was not whole (see `FileSource`). Raises `SourceError` when the first pass gives no
    frame because of read or decode errors.
    """

    def __init__(self, spec: FileSpec, rejected: Callable[[], None],
                 container: av.container.InputContainer | None = None,
                 skip: Callable[[float, bool], bool] | None = None, make_recorder: Callable | None = None,
                 thin=None, pace: Callable[[float], None] | None = None):
        self.spec = spec
        #: `make_recorder(stream)`: a pass's `ClipRecorder` (clips.py) or None; the current pass's
        self.make_recorder = make_recorder
        self.recorder = None
        self.rejected = rejected
        self.container = container
        self.skip = skip
        #: packets not decoded because `skip` said so, all passes
        self.skipped = 0
        #: `thin.skips(keyframe, seconds)`: asked first, before each packet is decoded; True skips it
        #: undecoded (the budget controller's share of frames: a `Shedder` on the graph's thread, a
        #: decode.py `DecodeShare` in a worker; it counts them); with `thin.drain_due`, what the
        #: decoder still holds is drained first
        self.thin = thin
        #: `pace(media)`, called first with each packet's media time: it may wait (a live file's worker
        #: reads no further ahead of the file's clock than a camera's could)
        self.pace = pace
        #: (media time at which the current pass starts, its first frame's pts), once it has one
        self._media_base: tuple[float, float] | None = None
        self.read_error: str | None = None
        self.incomplete: str | None = None
        self._packets = 0  # packets the current pass read from the file
        self._skipped_end: float | None = None  # the latest time shown of the current pass's packets skipped
        self._corrupt = 0  # packets the current pass's decoder rejected
        #: a live file's first pass with `start_s`: the time (the stream's seconds) before which packets
        #: are passed over undecoded, until a keyframe at or after it (`_joining`); then None
        self._join_from: float | None = None

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close(wait_s=CLIPS_CLOSE_S)  # its clips still open are written with what they have
            self.recorder = None
        if self.container is not None:
            self.container.close()
            self.container = None

    def _record(self, stream) -> None:
        """A new pass: the last one's clips end, this one's packets go to a new recorder."""
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None
        if self.make_recorder is not None:
            self.recorder = self.make_recorder(stream)
            if self.recorder is not None:
                self.recorder.first_index = self._index

    def __iter__(self) -> Iterator[Decoded]:
        spec = self.spec
        frame_duration = 1.0 / (spec.fps or DEFAULT_FPS)
        self._index = 0    # frames so far, all passes: decoded, and skipped (`skip`) in the file's order
        self._skipped_pts: list[int] = []  # the pts of packets skipped whose frames are not numbered yet
        loop_offset = 0.0  # media time at which the current pass starts, for pacing across loops
        first_pass = True
        join = spec.live  # a live file with `start_s` joins at the keyframe after it (`_joining`)
        while True:
            if self.container is None:
                self.container = open_file(spec)
            stream = self.container.streams.video[0]  # a new one when a loop reopened the file
            self.read_error, self._packets, self._corrupt = None, 0, 0
            times = PresentationTimes(stream.time_base or Fraction(1, 90000), frame_duration)
            cap = FrameRateCap(spec.max_fps) if spec.max_fps else None
            pass_first_pts = pass_last_pts = None
            self._media_base = None
            self._skipped_end = None
            anchors = ReferenceDistance()
            self._check_size(stream.codec_context.width, stream.codec_context.height)
            self._record(stream)
            begin = self._seek_start(stream) if first_pass and spec.start_s > 0 else None
            # a live file joins as a camera does, at a keyframe: nothing before it decoded
            self._join_from = begin - frame_duration / 2 if begin is not None and join else None
            for frame, decode_ms in self._decode_pass(stream):
                self._check_size(frame.width, frame.height)
                pts = times.seconds(frame)
                if begin is not None and pts < begin - frame_duration / 2:
                    continue  # decoded from the keyframe before `start_s` (or, live, joined at), not delivered
                if pass_first_pts is None:
                    pass_first_pts = pts
                    # the pass's media time 0: its first frame's, or, where a live file joined at a
                    # keyframe after `start_s`, `start_s` (its first frame is due that much later,
                    # so the copies of a file started out of step keep their groups out of step)
                    origin = begin if begin is not None and join else pts
                    self._media_base = (loop_offset, origin)
                pass_last_pts = pts
                frame_index = self._number(frame.pts)
                self._index += 1
                distance = anchors.step(frame.pict_type, frame_index) if spec.export_mvs else 1
                if cap is not None and not cap.keep(pts):
                    continue
                started = time.perf_counter()
                vectors = frame_motion_vectors(frame, distance) if spec.export_mvs else None
                decode_ms += (time.perf_counter() - started) * 1000.0
                yield Decoded(frame, frame_index, pts, loop_offset + pts - origin, decode_ms, vectors)
            if pass_first_pts is None and self._join_from is not None:
                join = False  # no keyframe after `start_s`: from the one before it after all, as a file
                continue
            self._number(None)  # packets skipped after the last frame presented
            if not spec.loop:
                self.incomplete = _shortfall(self._index, self._packets, spec.declared_frames, self.read_error)
            if pass_first_pts is None:  # nothing decoded in this pass: the end, or nothing readable
                if first_pass and (self._corrupt or self.read_error):
                    raise SourceError(f"{spec.display_path}: no frame could be decoded "
                                      f"({_failure_summary(self._corrupt, self.read_error)})")
                return
            if not spec.loop:
                return
            first_pass = False
            # the pass ends at its last frame shown, decoded or skipped: a pass whose end was shed
            # undecoded still lasted as long, and the next one starts on time after it
            if self._skipped_end is not None:
                pass_last_pts = max(pass_last_pts, self._skipped_end)
            loop_offset += pass_last_pts - origin + frame_duration
            self._rewind()

    def _check_size(self, width: int, height: int) -> None:
        """Raise a `SourceError` naming the file when a picture is larger than `max_pixels`."""
        refusal = too_large(width, height, self.spec.max_pixels)
        if refusal:
            raise SourceError(f"{self.spec.display_path}: {refusal}")

    def _seek_start(self, stream: av.video.stream.VideoStream) -> float:
        """The first pass's `start_s`: seek to the keyframe at or before it (where the file can seek;
        else every frame before it is decoded); the time, in the pass's seconds, that delivery begins."""
        base = stream.time_base or Fraction(1, 90000)
        first = stream.start_time or 0
        begin = first * base + Fraction(self.spec.start_s).limit_denominator(1_000_000)
        try:
            self.container.seek(int(begin / base), stream=stream, backward=True, any_frame=False)
        except av.error.FFmpegError:
            self._rewind()
        return float(begin)

    def _rewind(self) -> None:
        """Go back to the start of the file for the next loop; reopen it if it cannot seek."""
        try:
            self.container.seek(0)
        except av.error.FFmpegError:
            self.close()
            self.container = open_file(self.spec)

    def _decode_pass(self, stream: av.video.stream.VideoStream) -> Iterator[tuple[av.VideoFrame, float]]:
        """Yield `(frame, milliseconds spent reading and decoding it)` for one pass over the file.

        Packets read are counted in `_packets` (the flush packet PyAV adds at the end is not one). A
        packet the decoder rejects is counted and skipped. A read error ends the pass as if the file
        ended there (a truncated file): it is kept in `read_error` and the frames still inside the
        decoder are drained. Time spent while suspended (the consumer's time) is not counted; when
        one packet releases several frames they share its time.
        """
        packets = self.container.demux(stream)
        started = time.perf_counter()
        while True:
            try:
                packet = next(packets)
            except StopIteration:
                return
            except av.error.FFmpegError as error:
                self.read_error = _reason(error)
                packet = None  # drain the decoder: frame threads still hold decoded frames
            else:
                self._packets += packet.size > 0 or packet.dts is not None
                if self.recorder is not None:  # before any skipping: a clip keeps what the file holds
                    self.recorder.packet(packet)
                if self._join_from is not None and self._joining(packet, stream):
                    continue
                if self.pace is not None and packet.size > 0 and (media := self._media(packet, stream)) is not None:
                    self.pace(media)
                if self.thin is not None and packet.size > 0 and self.thin.skips(packet.is_keyframe,
                                                                                  _seconds(packet, stream)):
                    self._skipped(packet)
                    if not self.thin.drain_due:
                        continue
                elif self.skip is not None and packet.size > 0 and self._skips(packet, stream):
                    self.skipped += 1
                    self._skipped(packet)
                    continue
            draining = packet is not None and self.thin is not None and self.thin.drain_due
            try:
                if draining:  # the packet is skipped: what the decoder still holds comes out
                    frames = drain(stream.codec_context)
                else:
                    frames = stream.codec_context.decode(packet) if packet is None else packet.decode()
            except av.error.FFmpegError:
                self._corrupt += 1
                self.rejected()
                frames = []
            if frames:
                share_ms = (time.perf_counter() - started) * 1000.0 / len(frames)
                for frame in frames:
                    yield frame, share_ms
                started = time.perf_counter()
            if packet is None:
                return


    def _skipped(self, packet: av.Packet) -> None:
        """A packet not decoded: the frame it held keeps its number, so the next ones keep theirs.
        Frames come out of the decoder in presentation order, some packets after they went in, so
        the number is taken once the first frame presented after it comes out (`_number`)."""
        if packet.pts is None:
            self._index += 1
        else:
            heapq.heappush(self._skipped_pts, packet.pts)
            if packet.time_base is not None:
                shown = float(packet.pts * packet.time_base)
                self._skipped_end = shown if self._skipped_end is None else max(self._skipped_end, shown)

    def _number(self, pts: int | None) -> int:
        """The number of a frame presented at `pts` (ticks) coming out of the decoder: the frames
        before it, decoded or skipped (`_skipped`); None (the end of the pass, or a frame without a
        pts): every skip so far counted."""
        while self._skipped_pts and (pts is None or self._skipped_pts[0] < pts):
            heapq.heappop(self._skipped_pts)
            self._index += 1
        return self._index

    def _joining(self, packet: av.Packet, stream: av.video.stream.VideoStream) -> bool:
        """Whether `packet` comes before the keyframe a live file joins at (`_join_from`): passed over
        undecoded and unnumbered (frame numbers count from the first delivered). The first keyframe
        at or after that time ends the joining."""
        seconds = _seconds(packet, stream)
        if packet.size > 0 and packet.is_keyframe and seconds is not None and seconds >= self._join_from:
            self._join_from = None
            return False
        return True

    def _skips(self, packet: av.Packet, stream: av.video.stream.VideoStream) -> bool:
        """Whether `skip` skips this packet (never before the pass's first frame, or without a pts)."""
        media = self._media(packet, stream)
        return media is not None and self.skip(media, packet.is_keyframe)

    def _media(self, packet: av.Packet, stream: av.video.stream.VideoStream) -> float | None:
        """The packet's media time, as `Decoded.media` counts it; None before the pass's first frame,
        or without a pts."""
        if self._media_base is None or packet.pts is None or stream.time_base is None:
            return None
        loop_offset, first_pts = self._media_base
        return loop_offset + float(packet.pts * stream.time_base) - first_pts


#: how far (seconds of media) a live file's decode worker reads ahead of the file's clock
READ_AHEAD_S = 0.5


class _LiveFileClock:
    """A live file's clock in its decode worker, as its owner paces the frames (`out.clock_start()`;
    until the owner has said it, from the worker's first packet on): the worker reads no more
    than `READ_AHEAD_S` ahead of it (`pace`: otherwise, with packets skipped while shedding, it
    would read seconds ahead, and a change of the share would reach the frames only that much
    later), and skips packets to a keyframe once it has fallen `BEHIND_S` behind it (`skip`, decode.py
    `ClockCatchUp`, told to `out.skipped()`), as a camera's does. On a clock of its own, a worker
    started before its owner's first frame would look that much late for ever."""

    def __init__(self, out, should_stop: Callable[[], bool]):
        from .session import BEHIND_S

        self.out, self.should_stop = out, should_stop
        self.catch_up = ClockCatchUp(BEHIND_S)

    def _now(self, media: float) -> float:
        """Now, with the clock set: the owner's, or the worker's own until the owner has one."""
        now = time.monotonic()
        start = self.out.clock_start()
        if start is not None:
            self.catch_up.anchor(start)
        elif self.catch_up.start is None:
            self.catch_up.anchor(now - media)
        return now

    def pace(self, media: float) -> None:
        while (ahead := media - (self._now(media) - self.catch_up.start)) > READ_AHEAD_S and not self.should_stop():
            time.sleep(min(0.1, ahead - READ_AHEAD_S))

    def skip(self, media: float, keyframe: bool) -> bool:
        if self.catch_up.skip(media, self._now(media), keyframe):
            self.out.skipped()
            return True
        return False


def _seconds(packet: av.Packet, stream) -> float | None:
    """The packet's time on its stream's clock (seconds), or None."""
    return None if packet.pts is None or stream.time_base is None else float(packet.pts * stream.time_base)


def run_file_session(spec: FileSpec, out, should_stop: Callable[[], bool]) -> tuple[str, str, dict]:
    """A decode worker's session over a file (`FileSpec.run`): every frame of `FilePasses` to `out`
    (the worker's transport, a `SessionOutput`) with its `(index, media)` position. A live file's
    worker keeps to the file's clock as a camera's would (`_LiveFileClock`; its owner paces the
    frames exactly).
    Returns `(reason, message, detail)`: `eof` when the run ended by itself (detail: `incomplete` and
    `read_error`), `aborted` when told to stop, `failed` with the `SourceError`'s line."""
    clock = _LiveFileClock(out, should_stop) if spec.live and spec.is_file else None
    passes = FilePasses(spec, out.rejected, skip=clock and clock.skip, make_recorder=out.recorder, thin=out.thin,
                        pace=clock and clock.pace)
    try:
        for item in passes:
            if should_stop():
                return "aborted", "", {}
            if out.thin is not None and out.thin.drops():  # the budget controller's, counted there
                continue
            out.frame(item.picture, item.pts, time.time(), time.monotonic(), item.decode_ms, item.vectors,
                      (item.index, item.media))
    except SourceError as error:
        return "failed", str(error), {}
    finally:
        passes.close()
    return "eof", "", {"incomplete": passes.incomplete, "read_error": passes.read_error}


def _shortfall(decoded: int, packets: int, declared: int, read_error: str | None) -> str | None:
    """Why a single pass was not whole, one line, or None: it read fewer packets than the container
    declares frames, or a read error ended it.

    Example:
        >>> _shortfall(44, 44, 897, None)
        'truncated: 44 of 897 frames decoded'
        >>> _shortfall(748, 750, 750, None) is None, _shortfall(10, 10, 0, "I/O error")
        (True, 'read error after 10 frames: I/O error')
    """
    if declared and packets < declared - TRUNCATION_SLACK:
        return f"truncated: {decoded} of {declared} frames decoded" + (f" (read error: {read_error})"
                                                                      if read_error else "")
    return f"read error after {decoded} frames: {read_error}" if read_error else None


def _failure_summary(corrupt_packets: int, read_error: str | None) -> str:
    """Why a pass gave nothing, e.g. `12 corrupt packets; read error: I/O error`."""
    parts = [f"{corrupt_packets} corrupt packets"] if corrupt_packets else []
    if read_error:
        parts.append(f"read error: {read_error}")
    return "; ".join(parts)


def _reason(error: BaseException) -> str:
    """FFmpeg's own words for an error, without the errno and file name PyAV adds."""
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


__all__ = ["FileSpec", "FilePasses", "Decoded", "open_file", "run_file_session", "DEFAULT_FPS", "TRUNCATION_SLACK"]
