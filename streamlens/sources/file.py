"""A video file (or anything else FFmpeg opens by name) as a stream of `Frame`s, decoded with PyAV.

`FileSource` demuxes and decodes packet by packet, so a corrupt packet in the middle of a file is
skipped and counted (`corrupt_packets`, `losses()["corrupt"]`) instead of ending the stream, and a
truncated file yields what can be read and then ends, with `incomplete` saying so (see
`FileSource`). It can replay a file at its own frame rate as a camera would (`live=True`), loop it
forever (`loop=True`) and thin it out to at most `max_fps`.

Where it decodes (`decode`):
- `"thread"`: on the thread that iterates `frames()`, in the graph's process. A frame carries the
  decoder's own picture (`Frame(decoded=<av.VideoFrame>)`), converted to BGR when first read.
- `"process"`: in a decode worker process (worker.py), outside the graph's GIL. The same decode
  loop (`FilePasses`) runs there; pictures cross a shared-memory ring as I420 planes
  (`Frame(decoded=<YuvPicture>)`), and the worker waits for a free slot rather than drop a frame
  (a lossless session), so a slow consumer holds it back and loses nothing, and the ring's slots
  bound what is decoded ahead. Pacing (`live`) stays here. A worker that dies (killed, out of
  memory) is a `SourceError` naming the file; a run that ends early ends its worker and removes
  its ring.
Both give the same frames: index, pts and motion vectors equal, pixels within a few levels (the
conversion to BGR differs: see `YuvPicture`).

What each field of a `Frame` means here:
- `index` is the decoded frame index from 0. It keeps counting across loops, and frames that
  `max_fps` drops still take their number, so a capped stream has gaps in `index`.
- `pts` is the presentation time in seconds as the file states it (it need not start at 0), made
  strictly increasing within one pass of the file; it restarts with each loop.
- `ts` is `time.time()` when the frame became available (here, out of the decoder or the worker's
  ring); with `live=True`, its scheduled time. `clock` is the same moment on `time.monotonic()`.
- `timings["decode"]` is the milliseconds spent reading, decoding and converting this frame (with
  `decode="process"`: the worker's decoding and packing, and the copy out of its ring).
- `motion_vectors` (only with `export_mvs=True`): the decoder's motion vectors, float32 `(N, 4)`
  rows `x, y, dx, dy` = a coded block's centre on this frame and how far its content moved per
  decoded frame (source pixels, sub-pixel precise; see `motion_vectors.py`); None on frames
  coded without them (I-frames) and for codecs that have none.

Example:
    >>> import threading
    >>> source = FileSource("cam1", "../shared/data/video/highway_720p30.mp4", max_fps=15)  # doctest: +SKIP
    >>> (source.fps, source.total_frames)                                                     # doctest: +SKIP
    (30.0, 897)
    >>> with source:                                                                          # doctest: +SKIP
    ...     first = next(iter(source.frames(threading.Event())))
    >>> (first.index, first.image.shape)                                                      # doctest: +SKIP
    (0, (720, 1280, 3))
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from ..config.common import section
from ..config.sources import SourceConfig
from ..errors import SourceError
from ..frame import Frame, YuvPicture
from ..urls import is_url, mask_url
from .base import Source
from .decode import FrameRateCap, PresentationTimes
from .host_memory import HostMemory
from .motion_vectors import ReferenceDistance, frame_motion_vectors
from .session import too_large

#: the frame rate assumed when a file states none (only used to fill in missing timestamps)
DEFAULT_FPS = 30.0
#: how far (seconds) a paced live stream may fall behind its clock before the clock is re-anchored
MAX_LIVE_LAG_S = 1.0
#: packets a pass may read short of the frame count its container declares and still count as whole.
#: The count comes from the container's index, which a whole file's packets match exactly; the slack
#: keeps an index off by a sample or two (a muxer's trailing entry) from failing a run, and a file cut
#: within its last two frames lost nothing worth reporting
TRUNCATION_SLACK = 2
#: how often a file decoded in a worker looks at the stop event while it waits for a frame (seconds)
POLL_S = 0.1


class FileSource(Source):
    """Frames of the first video stream of a file, decoded with PyAV.

    - `live`: pace frames at the file's own rate, as a camera would deliver them, and decode with
      low latency (slice threads) instead of high throughput (frame threads). A URL or a device is
      real-time already, so it is never paced, only decoded with low latency. With `export_mvs`
      a file is decoded with slice threads too: with frame threads the vectors vary from run to run.
    - `loop`: at the end of the file seek back to the start and go on; `index` keeps counting and
      `pts` restarts. A pass that decodes no frame at all ends the stream.
    - `max_fps`: drop frames so that at most `max_fps` frames a second come out, decided from `pts`
      (not the wall clock), so the same file always gives the same frames: a 30 fps file capped at
      15 gives every other frame.
    - `options`: FFmpeg options for the demuxer and decoder (`av.open(..., options=...)`).
    - `export_mvs`: ask the decoder for the motion vectors it computed anyway (FFmpeg's
      `flags2=+export_mvs`; H.264, HEVC, MPEG-2/4) and put them on `Frame.motion_vectors`, for the
      `mv` tracker. It costs about a tenth of a millisecond a 720p frame.
    - `decode`: `"thread"` (on the thread that iterates `frames()`) or `"process"` (in a decode
      worker process); see the module.

    When a single pass (no `loop`) ends by itself before the end of the file, `incomplete` says why
    once `frames()` has ended, in one line without the path: the container declares how many
    frames it holds (`stream.frames`, from its index; not every container does) and fewer packets
    than that could be read (`TRUNCATION_SLACK`), e.g. `truncated: 44 of 897 frames decoded`, or
    reading failed (`read error after 44 frames: I/O error`). Packets are compared, not decoded
    frames: an AVI's placeholder packets decode to nothing and are still part of a whole file.
    A stopped or whole pass leaves it None.

    The file is opened here, so a missing or unreadable file fails at once with a `SourceError` that
    names it. `close()` releases it (and ends a decode worker); it is also released when `frames()`
    ends, and `frames()` reopens it when called again.

    Example:
        >>> source = FileSource("cam1", "clip.mp4", loop=True, decode="process")   # doctest: +SKIP
        >>> stop = threading.Event()                                               # doctest: +SKIP
        >>> for frame in source.frames(stop):                                      # doctest: +SKIP
        ...     if frame.index == 99:
        ...         stop.set()
    """

    def __init__(self, name: str | SourceConfig, path: str | Path | None = None, *, export_mvs: bool = False,
                 **keys: Any):
        """`FileSource(cfg)` with the source's typed section, or `FileSource(name, path, **keys)`
        with keys of `SourceConfig`, checked as the pipeline file's are (`ValueError`)."""
        cfg = name if isinstance(name, SourceConfig) else section(
            SourceConfig, str(name), {"source": "file"}, name=name, uri=str(path), **keys)
        self.name = cfg.name
        self.path = cfg.uri
        self.display_path = mask_url(self.path)
        self.live = cfg.live
        self.loop = cfg.loop
        self.max_fps = cfg.max_fps
        self.options = dict(cfg.options)
        self.export_mvs = export_mvs
        self.decode = cfg.decode
        #: packets the decoder rejected and that were skipped
        self.corrupt_packets = 0
        #: why the current (or last) pass stopped reading before the end of the file, or None (with
        #: `decode="process"`: the last pass's, known once `frames()` has ended)
        self.read_error: str | None = None
        self._lock = threading.Lock()  # guards the container and the worker: decoding and close() never overlap
        self._running = False
        self._halt: threading.Event | None = None  # set by close(): the running frames() ends
        self._passes: FilePasses | None = None
        self._worker = None

        spec = FileSpec(self.path, self.display_path, self.options, live=cfg.live, loop=cfg.loop,
                        max_fps=cfg.max_fps, export_mvs=export_mvs, max_pixels=cfg.max_pixels)
        container = open_file(spec)
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate
        self.fps = float(rate) if rate else None
        #: frames the container says it holds (0: it does not say)
        self.declared_frames = max(0, stream.frames)
        self.total_frames = None if cfg.loop else self.declared_frames or None
        #: what a run over the file needs, here or in a worker
        self.spec = dataclasses.replace(spec, fps=self.fps, declared_frames=self.declared_frames)
        if cfg.decode == "process":  # the worker opens the file itself
            container.close()
            container = None
        self._container: av.container.InputContainer | None = container

    def close(self) -> None:
        """Release the file and end a decode worker. Safe to call twice, and from another thread while
        `frames()` runs: that iteration then ends at its next frame."""
        with self._lock:
            if self._halt is not None:
                self._halt.set()
            if self._container is not None:
                self._container.close()
                self._container = None
            if self._passes is not None:
                self._passes.close()
                self._passes = None
            if self._worker is not None:
                self._worker.close()
                self._worker = None

    def losses(self) -> dict[str, int]:
        """Packets the decoder rejected, all passes and all runs of `frames()` together."""
        return {"corrupt": self.corrupt_packets}

    # -- frames --------------------------------------------------------------------------------

    def frames(self, stop: threading.Event) -> Iterator[Frame]:
        """Decode, thin out and pace frames until the file ends (and does not loop) or `stop` is set.

        Raises `SourceError` when the first pass yields no frame at all because of read or decode
        errors, and when a decode worker dies. The file (and its worker) is closed when this ends,
        however it ends.
        """
        with self._lock:
            if self._running:
                raise RuntimeError(f"{self.name}: frames() is already running")
            self._running = True
            self.incomplete = None
            halt = self._halt = threading.Event()

        def stopping() -> bool:
            return stop.is_set() or halt.is_set()

        try:
            decoded = self._decode_here(stopping) if self.decode == "thread" else self._decode_in_worker(stopping)
            yield from self._paced(decoded, stop)
        finally:
            self.close()
            self._running = False

    def _paced(self, decoded: Iterator[Decoded], stop: threading.Event) -> Iterator[Frame]:
        """The decoded pictures as `Frame`s, each held back until it is due when `live` (a file only)."""
        pacer = _LivePacer(MAX_LIVE_LAG_S) if self.live and self.spec.is_file else None
        for item in decoded:
            if pacer is None:
                ts, due_monotonic = time.time(), None
            else:
                due_monotonic, ts = pacer.schedule(item.media)
                delay = due_monotonic - time.monotonic()
                if delay > 0 and stop.wait(delay):
                    return
            image, picture = (item.picture, None) if isinstance(item.picture, np.ndarray) else (None, item.picture)
            yield Frame(stream=self.name, index=item.index, pts=item.pts, ts=ts, image=image, decoded=picture,
                        timings={"decode": item.decode_ms}, motion_vectors=item.vectors, clock=due_monotonic)

    def _decode_here(self, stopping: Callable[[], bool]) -> Iterator[Decoded]:
        """`FilePasses` on this thread, a step at a time under the lock (close() may come from another)."""
        with self._lock:
            passes = self._passes = FilePasses(self.spec, self._rejected, self._container)
            self._container = None  # the passes own it now
        steps = iter(passes)
        while True:
            with self._lock:
                if stopping():
                    return
                item = next(steps, None)
                self.read_error, self.incomplete = passes.read_error, passes.incomplete
            if item is None:
                return
            yield item

    def _rejected(self) -> None:
        self.corrupt_packets += 1

    def _decode_in_worker(self, stopping: Callable[[], bool]) -> Iterator[Decoded]:
        """`FilePasses` in a decode worker process: its frames as it sends them, one ring slot each."""
        from .worker import Died, Ended, FrameReady, ProcessWorker

        host: HostMemory | None = None  # chosen at the first frame, when the detector is loaded
        corrupt_before = self.corrupt_packets  # a worker counts from 0
        with self._lock:
            if stopping():
                return
            worker = self._worker = ProcessWorker(self.name)
            try:
                worker.start()
            except OSError as error:  # no file descriptors or processes left: this file's error alone
                self._worker = None
                raise SourceError(f"{self.display_path}: cannot start its decode worker ({error})") from None
            worker.open(1, self.spec)
        while True:
            with self._lock:
                if stopping():
                    return
                event = worker.poll(POLL_S)
                if isinstance(event, FrameReady):
                    started = time.perf_counter()
                    host = host or HostMemory("auto")
                    picture, vectors = event.take(host)
                    self.corrupt_packets = corrupt_before + event.corrupt
                    index, media = event.position
                    item = Decoded(picture, index, event.pts, media,
                                   event.decode_ms + (time.perf_counter() - started) * 1000.0, vectors)
                elif isinstance(event, Ended):
                    self.corrupt_packets = corrupt_before + event.corrupt
                    self.read_error = event.detail.get("read_error")
                    self.incomplete = event.detail.get("incomplete")
                    if event.reason == "failed":
                        raise SourceError(event.message)
                    if event.reason == "refused":  # no room in shared memory for its pictures
                        raise SourceError(f"{self.display_path}: {event.message}")
                    return
                elif isinstance(event, Died):
                    raise SourceError(f"{self.display_path}: {event.message}")
                else:
                    continue
            yield item


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
    #: the file's frame rate (None: it states none) and the frames its container declares (0: none)
    fps: float | None = None
    declared_frames: int = 0
    #: the largest picture (width x height) taken: a larger one ends the run over the file with an error
    max_pixels: int | None = None

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
    if spec.export_mvs:
        stream.codec_context.options = {**stream.codec_context.options, "flags2": "+export_mvs"}
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
    step. `read_error` is the current pass's; once the run ended by itself, `incomplete` says why a
    single pass was not whole (see `FileSource`). Raises `SourceError` when the first pass gives no
    frame because of read or decode errors.
    """

    def __init__(self, spec: FileSpec, rejected: Callable[[], None],
                 container: av.container.InputContainer | None = None):
        self.spec = spec
        self.rejected = rejected
        self.container = container
        self.read_error: str | None = None
        self.incomplete: str | None = None
        self._packets = 0  # packets the current pass read from the file
        self._corrupt = 0  # packets the current pass's decoder rejected

    def close(self) -> None:
        if self.container is not None:
            self.container.close()
            self.container = None

    def __iter__(self) -> Iterator[Decoded]:
        spec = self.spec
        frame_duration = 1.0 / (spec.fps or DEFAULT_FPS)
        index = 0          # decoded frames so far, all passes
        loop_offset = 0.0  # media time at which the current pass starts, for pacing across loops
        first_pass = True
        while True:
            if self.container is None:
                self.container = open_file(spec)
            stream = self.container.streams.video[0]  # a new one when a loop reopened the file
            self.read_error, self._packets, self._corrupt = None, 0, 0
            times = PresentationTimes(stream.time_base or Fraction(1, 90000), frame_duration)
            cap = FrameRateCap(spec.max_fps) if spec.max_fps else None
            pass_first_pts = pass_last_pts = None
            anchors = ReferenceDistance()
            self._check_size(stream.codec_context.width, stream.codec_context.height)
            for frame, decode_ms in self._decode_pass(stream):
                self._check_size(frame.width, frame.height)
                pts = times.seconds(frame)
                if pass_first_pts is None:
                    pass_first_pts = pts
                pass_last_pts = pts
                frame_index = index
                index += 1
                distance = anchors.step(frame.pict_type, frame_index) if spec.export_mvs else 1
                if cap is not None and not cap.keep(pts):
                    continue
                started = time.perf_counter()
                vectors = frame_motion_vectors(frame, distance) if spec.export_mvs else None
                decode_ms += (time.perf_counter() - started) * 1000.0
                yield Decoded(frame, frame_index, pts, loop_offset + pts - pass_first_pts, decode_ms, vectors)
            if not spec.loop:
                self.incomplete = _shortfall(index, self._packets, spec.declared_frames, self.read_error)
            if pass_first_pts is None:  # nothing decoded in this pass: the end, or nothing readable
                if first_pass and (self._corrupt or self.read_error):
                    raise SourceError(f"{spec.display_path}: no frame could be decoded "
                                      f"({_failure_summary(self._corrupt, self.read_error)})")
                return
            if not spec.loop:
                return
            first_pass = False
            loop_offset += pass_last_pts - pass_first_pts + frame_duration
            self._rewind()

    def _check_size(self, width: int, height: int) -> None:
        """Raise a `SourceError` naming the file when a picture is larger than `max_pixels`."""
        refusal = too_large(width, height, self.spec.max_pixels)
        if refusal:
            raise SourceError(f"{self.spec.display_path}: {refusal}")

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
            try:
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


def run_file_session(spec: FileSpec, out, should_stop: Callable[[], bool]) -> tuple[str, str, dict]:
    """A decode worker's session over a file (`FileSpec.run`): every frame of `FilePasses` to `out`
    (the worker's transport, a `SessionOutput`) with its `(index, media)` position. Returns
    `(reason, message, detail)`: `eof` when the run ended by itself (detail: `incomplete` and
    `read_error`), `aborted` when told to stop, `failed` with the `SourceError`'s line."""
    passes = FilePasses(spec, out.rejected)
    try:
        for item in passes:
            if should_stop():
                return "aborted", "", {}
            out.frame(item.picture, item.pts, time.time(), time.monotonic(), item.decode_ms, item.vectors,
                      (item.index, item.media))
    except SourceError as error:
        return "failed", str(error), {}
    finally:
        passes.close()
    return "eof", "", {"incomplete": passes.incomplete, "read_error": passes.read_error}


class _LivePacer:
    """When each frame of a paced file is due, as a camera would deliver it.

    `schedule(media_time)` gives `(due on time.monotonic(), due on time.time())`: the clock is
    anchored at the first frame, and a frame is due its media time after it. When the consumer falls
    more than `max_lag` seconds behind, the clock is re-anchored at now instead of releasing a burst.

    Example:
        >>> pacer = _LivePacer(1.0)
        >>> due0, _ = pacer.schedule(10.0)
        >>> due1, _ = pacer.schedule(10.5)
        >>> round(due1 - due0, 3)
        0.5
    """

    def __init__(self, max_lag: float):
        self.max_lag = max_lag
        self.anchor_media: float | None = None
        self.anchor_monotonic = 0.0
        self.anchor_wall = 0.0

    def schedule(self, media_time: float) -> tuple[float, float]:
        now = time.monotonic()
        if self.anchor_media is not None:
            offset = media_time - self.anchor_media
            if now - (self.anchor_monotonic + offset) <= self.max_lag:
                return self.anchor_monotonic + offset, self.anchor_wall + offset
        self.anchor_media = media_time
        self.anchor_monotonic = now
        self.anchor_wall = time.time()
        return self.anchor_monotonic, self.anchor_wall


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
