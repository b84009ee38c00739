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
from pathlib import Path
from typing import Any

import av
import numpy as np

from ..config.common import section
from ..config.sources import SourceConfig
from ..errors import SourceError
from ..frame import Frame
from ..urls import mask_url
from .base import Source
from .clip_outcomes import ClipOutcomes, settle_worker
from .clips import CLOSE_S as CLIPS_CLOSE_S, ClipRecorder, ClipSpec
from .decode import ClockCatchUp
from .file_passes import Decoded, FilePasses, FileSpec, open_file
from .host_memory import HostMemory
from .protocol import ClipDone
from .session import BEHIND_S

#: how far (seconds) a paced live stream may fall behind its clock before the clock is re-anchored
#: (a process that was suspended, a machine that stalled): a burst of old frames is never released
MAX_LIVE_LAG_S = 5.0
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
    - `thin`: set by the runtime before `frames()` for a live file (the budget controller's
      `Shedder`): the frames it sheds are given up where the file is decoded, here (`thin.skips`
      asked before each packet) or in the decode worker (worker.py `ThinLink`), mostly undecoded
      (the ends of groups of pictures; on its last rung every packet but the keyframes).

    When a single pass (no `loop`) ends by itself before the end of the file, `incomplete` says why
    once `frames()` has ended, in one line without the path: the container declares how many
    frames it holds (`stream.frames`, from its index; not every container does) and fewer packets
    than that could be read (`file_passes.TRUNCATION_SLACK`), e.g. `truncated: 44 of 897 frames decoded`, or
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
                 clips: ClipSpec | None = None, **keys: Any):
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
        #: packets of a paced file not decoded to catch up with its clock (here or in its decode worker)
        self.skipped_packets = 0
        #: why the current (or last) pass stopped reading before the end of the file, or None (with
        #: `decode="process"`: the last pass's, known once `frames()` has ended)
        self.read_error: str | None = None
        self._lock = threading.Lock()  # guards the container and the worker: decoding and close() never overlap
        self._running = False
        self._halt: threading.Event | None = None  # set by close(): the running frames() ends
        self._passes: FilePasses | None = None
        self._worker = None
        self._recorder = None  # decode="thread": the current pass's ClipRecorder
        self._worker_running = False  # the decode worker's session has not ended yet
        #: what became of the clips asked of it (`clip_outcomes`)
        self.clips = ClipOutcomes()
        #: the budget controller's `Shedder`, asked before each packet is decoded (see the class docs)
        self.thins = True  # the budget controller's shedder gives frames up where they are decoded
        self.thin = None
        #: whether `thin` is asked on the graph's thread (else the decode worker has the share)
        self.thins_here = cfg.decode == "thread"

        spec = FileSpec(self.path, self.display_path, self.options, live=cfg.live, loop=cfg.loop,
                        max_fps=cfg.max_fps, export_mvs=export_mvs, fast_decode=cfg.fast_decode,
                        start_s=cfg.start_s, max_pixels=cfg.max_pixels,
                        clips=None if clips is None else dataclasses.replace(clips, stream=cfg.name))
        container = open_file(spec)
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate
        self.fps = float(rate) if rate else None
        #: frames the container says it holds (0: it does not say, or `start_s` skips some)
        self.declared_frames = 0 if cfg.start_s else max(0, stream.frames)
        self.total_frames = None if cfg.loop else self.declared_frames or None
        length = container.duration / 1_000_000 if container.duration else None  # av.time_base: microseconds
        if cfg.start_s and length is not None and cfg.start_s >= length:
            container.close()
            raise SourceError(f"{self.display_path}: start_s {cfg.start_s:g} is past the file's end ({length:.3g} s)")
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
                from .worker import CLOSE_GRACE_S

                if self.spec.clips and self._worker_running and self._worker.alive:  # its clips written, told
                    settle_worker(self._worker, 1, self.clips, CLIPS_CLOSE_S + 1)
                self._worker.close(CLIPS_CLOSE_S + 1 if self.spec.clips else CLOSE_GRACE_S)  # its clips written first
                self._worker = None

    def losses(self) -> dict[str, int]:
        """Packets the decoder rejected (`corrupt`) and, for a live (paced) file, packets skipped to
        catch up with its clock (`decoder`, as a camera's), all passes and runs of `frames()` together."""
        return {"corrupt": self.corrupt_packets, **({"decoder": self.skipped_packets} if self.live else {})}

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

        pacer = _LivePacer(MAX_LIVE_LAG_S) if self.live and self.spec.is_file else None
        try:
            if self.decode == "thread":
                decoded = self._decode_here(stopping, pacer.skip if pacer is not None else None)
            else:
                decoded = self._decode_in_worker(stopping)
            yield from self._paced(decoded, stop, pacer)
        finally:
            self.close()
            self._running = False

    def _paced(self, decoded: Iterator[Decoded], stop: threading.Event,
               pacer: _LivePacer | None) -> Iterator[Frame]:
        """The decoded pictures as `Frame`s, each held back by `pacer` until it is due (a live file)."""
        for item in decoded:
            if pacer is None:
                ts, due_monotonic = time.time(), None
            else:
                start = pacer.start
                due_monotonic, ts = pacer.schedule(item.media)
                if pacer.start != start and self._worker is not None:  # the worker reads on this clock
                    self._worker.clock(1, pacer.start)
                delay = due_monotonic - time.monotonic()
                if delay > 0 and stop.wait(delay):
                    return
            image, picture = (item.picture, None) if isinstance(item.picture, np.ndarray) else (None, item.picture)
            yield Frame(stream=self.name, index=item.index, pts=item.pts, ts=ts, image=image, decoded=picture,
                        timings={"decode": item.decode_ms}, motion_vectors=item.vectors, clock=due_monotonic)

    def _decode_here(self, stopping: Callable[[], bool],
                     skip: Callable[[float, bool], bool] | None) -> Iterator[Decoded]:
        """`FilePasses` on this thread, a step at a time under the lock (close() may come from another);
        `skip`: the pacer's, for a live file (see `_LivePacer`)."""
        skipped_before = self.skipped_packets
        with self._lock:
            passes = self._passes = FilePasses(self.spec, self._rejected, self._container, skip,
                                               self._make_recorder if self.spec.clips else None, self.thin)
            self._container = None  # the passes own it now
        steps = iter(passes)
        while True:
            with self._lock:
                if stopping():
                    return
                item = next(steps, None)
                self.read_error, self.incomplete = passes.read_error, passes.incomplete
                self.skipped_packets = skipped_before + passes.skipped
            if item is None:
                return
            yield item

    def _make_recorder(self, stream):
        self._recorder = ClipRecorder.for_spec(stream, self.spec.clips, self.clips.add)
        return self._recorder

    def clip_outcomes(self) -> list:
        return self.clips.take()

    def clip(self, start_s: float, end_s: float, path: str, index: int = -1) -> bool:
        """As `Source.clip`: the current pass's recorder (here or in the decode worker) records it."""
        if self.spec.clips is None:
            return False
        worker, recorder = self._worker, self._recorder
        if worker is not None:
            worker.clip(1, start_s, end_s, path, index)
            return True
        if recorder is not None:
            recorder.request(start_s, end_s, path, index)
            return True
        return False

    def _rejected(self) -> None:
        self.corrupt_packets += 1

    def _decode_in_worker(self, stopping: Callable[[], bool]) -> Iterator[Decoded]:
        """`FilePasses` in a decode worker process: its frames as it sends them, one ring slot each."""
        from .worker import Died, Ended, FrameReady, ProcessWorker, ThinLink

        host: HostMemory | None = None  # chosen at the first frame, when the detector is loaded
        corrupt_before, skipped_before = self.corrupt_packets, self.skipped_packets  # a worker counts from 0
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
            self._worker_running = True
        link = ThinLink(self.thin) if self.thin is not None else None
        while True:
            with self._lock:
                if stopping():
                    return
                event = worker.poll(POLL_S)
                if link is not None:
                    link.follow(worker, 1, event)
                if isinstance(event, FrameReady):
                    started = time.perf_counter()
                    host = host or HostMemory("auto")
                    picture, vectors = event.take(host)
                    self.corrupt_packets = corrupt_before + event.corrupt
                    self.skipped_packets = skipped_before + event.worker_drops  # a live file's catch-up
                    index, media = event.position
                    item = Decoded(picture, index, event.pts, media,
                                   event.decode_ms + (time.perf_counter() - started) * 1000.0, vectors)
                elif isinstance(event, Ended):
                    self._worker_running = False
                    self.corrupt_packets = corrupt_before + event.corrupt
                    self.skipped_packets = skipped_before + event.worker_drops
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
                    if isinstance(event, ClipDone):
                        self.clips.add(*event)
                    continue
            yield item


class _LivePacer:
    """When each frame of a paced file is due, as a camera would deliver it, and what a camera's
    decoder would skip to catch up.

    `schedule(media_time)` gives `(due on time.monotonic(), due on time.time())`: the clock is
    anchored when the first frame comes, at media time 0, and a frame is due its media time after
    that (a first frame later than 0, of a live file that joined at a keyframe after `start_s`,
    waits for its time). A live file that falls
    behind its clock (decoding or the graph short of CPU) catches up as a camera does: `skip(media,
    keyframe)`, asked before each packet is decoded, skips packets once they are `BEHIND_S` late, up
    to a keyframe less than half that late (decode.py `CatchUp`, on the packets' media time), so that
    it goes on delivering fresh frames rather than every frame late. Only past `max_lag` (a process
    that was suspended) is the clock re-anchored at now, and the catch-up starts afresh.

    Example:
        >>> pacer = _LivePacer(5.0)
        >>> first, _ = pacer.schedule(0.7)   # joined 0.7 s after start_s
        >>> later, _ = pacer.schedule(1.2)
        >>> round(first - pacer.start, 3), round(later - first, 3)
        (0.7, 0.5)
    """

    def __init__(self, max_lag: float):
        self.max_lag = max_lag
        self.anchor_media: float | None = None
        self.anchor_monotonic = 0.0
        self.anchor_wall = 0.0
        self._catch_up = ClockCatchUp(BEHIND_S)

    @property
    def start(self) -> float | None:
        """The clock: media time 0 on `time.monotonic()` (None before the first frame)."""
        return None if self.anchor_media is None else self.anchor_monotonic - self.anchor_media

    def schedule(self, media_time: float) -> tuple[float, float]:
        now = time.monotonic()
        if self.anchor_media is not None:
            offset = media_time - self.anchor_media
            if now - (self.anchor_monotonic + offset) <= self.max_lag:
                return self.anchor_monotonic + offset, self.anchor_wall + offset
            self.anchor_media = media_time
        else:  # media time 0 is now: a first frame later than 0 (a file that joined late) waits for it
            self.anchor_media = min(0.0, media_time)
        self.anchor_monotonic = now
        self.anchor_wall = time.time()
        self._catch_up.anchor(self.start)
        offset = media_time - self.anchor_media
        return self.anchor_monotonic + offset, self.anchor_wall + offset

    def skip(self, media_time: float, keyframe: bool) -> bool:
        """Whether the packet at `media_time` is to be skipped, undecoded, to catch up (decode.py
        `ClockCatchUp`: on this clock)."""
        return self._catch_up.skip(media_time, time.monotonic(), keyframe)
