"""Clips around events from a source's own compressed packets (`analytics.clips`): no decoding, no
re-encoding, the camera's codec and picture size.

A `ClipRecorder` lives where a source demuxes (its decode worker process, its decode thread, or a
file's reading thread) and is given every packet as it is read (`packet()`, before decoding, so a
decoder that skips packets to catch up with its camera still records them). It keeps the packets of
the last `keep_s` seconds and back to the key frame before them (`PacketWindow`), copied out of
FFmpeg's buffers, at most `MAX_WINDOW_BYTES`. `request(start_s, end_s, path)` (any thread) opens a
clip: the packets from the key frame at or before `start_s` are taken from the window at once, and
each packet read after joins it until one is past `end_s`; the clip then goes to the recorder's
writer thread, which muxes it into an MP4 written aside (`path` + `.part`) and renamed when whole.
A request whose window begins before an open clip of the same path ends extends it.

Nothing here waits on the disk in the reader's way: the writer thread has a queue of at most
`MAX_PENDING` clips (more are dropped, counted in `lost`); a write that fails (a full disk, a folder
that cannot be made) loses that clip, counted in `lost`. Each clip's outcome goes to `on_done(path,
reason, refused)` (reason None: written; else why it is lost, one line; `refused`: a request that
came too late for this recorder, which leaves a clip already asked for into that path as it is),
whose owner tells it (the engine's clip stage: one warning per stream, every loss counted;
streamlens/graph/publish/clips.py): the recorder itself logs only at debug level. `retain` (days,
bytes) is applied to the clips folder after each write: the oldest files past either go.

Times are the source's presentation times in seconds (packet pts x time base), the same clock as
the frames' `pts`. A session that ends (a camera reconnecting, the end of a file) closes the clips
still open with what they have.

Example (a file's packets, read here by hand):
    >>> import av, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> with av.open("samples/traffic.mp4") as container:           # doctest: +SKIP
    ...     stream = container.streams.video[0]
    ...     recorder = ClipRecorder(stream, keep_s=2.0)
    ...     for packet in container.demux(stream):
    ...         recorder.packet(packet)
    ...         if recorder.newest_s is not None and recorder.newest_s >= 5.0 and not recorder.opened:
    ...             recorder.request(3.0, 6.0, os.path.join(folder, "a.mp4"))
    ...     recorder.close()
"""

from __future__ import annotations

import io
import logging
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("streamlens.clips")

#: the most a window keeps, whatever its `keep_s` (a 4K camera at 25 Mbit/s keeps 10 s in 31 MB)
MAX_WINDOW_BYTES = 64 << 20
#: clips waiting for the writer; more are dropped and counted
MAX_PENDING = 8
#: the longest one clip may be, whatever the requests that extend it ask
MAX_CLIP_S = 300.0
#: at a session's end, how long the reader waits for the clips still to be written (the owner gives
#: a worker that records clips this long to end, `CLOSE_S`, before it kills it)
CLOSE_S = 3.0
#: a `.part` file this old is left from a process that ended mid-write: `prune_clips` deletes it
STALE_PART_S = 600.0
#: the most a window keeps beyond `pre_s` once events came late (`ClipRecorder.request`), seconds
MAX_MARGIN_S = 5.0


@dataclass(slots=True)
class _Packet:
    data: bytes
    pts: int | None
    dts: int | None
    keyframe: bool
    seconds: float


#: a packet as a `PacketWindow` holds it (its bytes, pts, dts, keyframe flag, seconds): the public
#: name, for what fills a window by hand (tools/experiments/bench_clip_window.py)
Packet = _Packet


class PacketWindow:
    """The packets of the last `keep_s` seconds, and back to the key frame before them: what a clip
    that starts `keep_s` before now needs. Bounded by `MAX_WINDOW_BYTES` too."""

    def __init__(self, keep_s: float, max_bytes: int = MAX_WINDOW_BYTES):
        self.keep_s, self.max_bytes = keep_s, max_bytes
        self.packets: deque[_Packet] = deque()
        self.keys: deque[_Packet] = deque()  # the key frames among `packets`, in order
        self.bytes = 0

    def add(self, packet: _Packet) -> None:
        """One packet (the reader's, once per packet: no pass over the window)."""
        self.packets.append(packet)
        self.bytes += len(packet.data)
        if packet.keyframe:
            self.keys.append(packet)
        horizon = packet.seconds - self.keep_s
        # drop whole GOPs from the front while the next key frame is still at or before the horizon
        while len(self.keys) > 1 and (self.keys[1].seconds <= horizon or self.bytes > self.max_bytes):
            self.keys.popleft()
            while self.packets[0] is not self.keys[0]:
                self.bytes -= len(self.packets.popleft().data)

    def since(self, start_s: float) -> list[_Packet]:
        """The packets from the last key frame at or before `start_s`, else from the first key frame
        kept (a clip never starts with pictures that cannot be decoded)."""
        packets = list(self.packets)
        first = next((i for i, p in enumerate(packets) if p.keyframe), len(packets))
        for i, p in enumerate(packets):
            if p.seconds > start_s:
                break
            if p.keyframe:
                first = i
        return packets[first:]

    def clear(self) -> None:
        self.packets.clear()
        self.keys.clear()
        self.bytes = 0


@dataclass(frozen=True)
class ClipSpec:
    """What a source records for `analytics.clips` (picklable: it crosses to a decode worker):
    `pre_s`, and `margin_s` more seconds of packets kept for the time an event takes to come back
    from the engine (the window keeps `keep_s`, their sum, and back to the key frame before), the
    clips `folder`, `retain_days` and `retain_bytes` (None: no such bound), and the `stream` named
    in the log."""

    pre_s: float
    margin_s: float
    folder: str
    retain_days: float | None
    retain_bytes: float | None
    stream: str = ""

    @property
    def keep_s(self) -> float:
        return self.pre_s + self.margin_s


@dataclass
class _Clip:
    path: Path
    start_s: float
    end_s: float
    packets: list = field(default_factory=list)


class ClipRecorder:
    """Records clips of one stream from its packets (see the module). `template`: the PyAV input
    stream the packets come from (its codec parameters go into each clip). `stream`: the stream's
    name, for the log. `retain`: (days, bytes) or None, applied to `folder` after each write.
    `on_done(path, reason)`: each clip's outcome (see the module), from whichever thread settles it."""

    def __init__(self, template, keep_s: float, *, stream: str = "", folder: str | Path | None = None,
                 retain: tuple[float | None, float | None] | None = None, pre_s: float | None = None,
                 on_done: Callable[[str, str | None, bool], None] | None = None):
        """`pre_s`: the clips' pre-roll, when `keep_s` is it plus a margin: a request that comes
        later than the margin allows widens the window (see `request`)."""
        # the input stream's codec parameters, copied into a stream of our own (of an output that is
        # never written): the input's container may be closed or reopened while clips are written
        import av

        self._holder = av.open(io.BytesIO(), "w", format="mp4")
        self.template = self._holder.add_stream_from_template(template)
        self.time_base = Fraction(template.time_base or Fraction(1, 90000))
        self.window = PacketWindow(keep_s)
        self.stream, self.folder, self.retain = stream, Path(folder) if folder else None, retain
        self.pre_s = pre_s
        self.newest_s: float | None = None
        #: a file's pass: the index of its first frame; a request for a frame before it (an event of
        #: the pass before a loop, come late) is refused, counted in `lost` (None: no such check)
        self.first_index: int | None = None
        self.opened: list[_Clip] = []  # clips still taking packets
        self._held: _Packet | None = None  # the newest packet, until the next shows it is not part of it
        self._closed = False
        self.written = self.lost = 0
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self.on_done = on_done
        self._writer = threading.Thread(target=self._write_loop, name=f"clips-{stream}", daemon=True)
        self._writer.start()

    def packet(self, packet) -> None:
        """One packet as demuxed (the reader's thread)."""
        ticks = packet.pts if packet.pts is not None else packet.dts
        if not packet.size or ticks is None:  # no time (an RTSP stream's parameter sets): no place in a clip
            return
        seconds = float(ticks * self.time_base)
        kept = _Packet(bytes(packet), packet.pts, packet.dts, bool(packet.is_keyframe), seconds)
        with self._lock:
            held, self._held = self._held, kept
            if held is not None and (held.pts, held.dts) == (kept.pts, kept.dts):
                # one picture in two packets (an RTSP camera's parameter sets, then its key frame): one
                # access unit for the muxer, which refuses two packets of one time
                self._held = _Packet(held.data + kept.data, kept.pts, kept.dts, held.keyframe or kept.keyframe, seconds)
                return
            if held is not None:
                self._keep(held)

    @classmethod
    def for_spec(cls, template, spec: ClipSpec, on_done: Callable[[str, str | None, bool], None] | None = None
                 ) -> ClipRecorder:
        """The recorder `spec` asks for, of packets of the input stream `template`."""
        return cls(template, spec.keep_s, stream=spec.stream, folder=spec.folder,
                   retain=(spec.retain_days, spec.retain_bytes), pre_s=spec.pre_s, on_done=on_done)

    def _done(self, path: Path, reason: str | None, refused: bool = False) -> None:
        """A clip written (`reason` None) or lost (counted in `lost`), told to `on_done`."""
        if reason is None:
            self.written += 1
        else:
            self.lost += 1
            log.debug("%s: clip %s lost: %s", self.stream, path, reason)
        if self.on_done is not None:
            self.on_done(str(path), reason, refused)

    def _keep(self, kept: _Packet) -> None:
        """One packet into the window and the clips that take it (under the lock)."""
        seconds = kept.seconds
        self.newest_s = seconds if self.newest_s is None else max(self.newest_s, seconds)
        self.window.add(kept)
        done = []
        for clip in self.opened:
            clip.packets.append(kept)
            if seconds > clip.end_s:
                done.append(clip)
        for clip in done:
            self.opened.remove(clip)
            self._hand_over(clip)

    def request(self, start_s: float, end_s: float, path: str | Path, index: int | None = None) -> None:
        """A clip of [start_s, end_s] into `path` (any thread); one still open into the same path is
        extended instead. `index`: the event's frame (see `first_index`)."""
        path = Path(path)
        if self.first_index is not None and index is not None and 0 <= index < self.first_index:
            self._done(path, "its event came from the file's pass before it looped", True)
            return
        with self._lock:
            closed = self._closed  # the session or pass has ended: too late for this one
            if not closed:
                self._widen(start_s)
                clip = next((c for c in self.opened if c.path == path), None)
                if clip is not None:
                    clip.end_s = min(max(clip.end_s, end_s), clip.start_s + MAX_CLIP_S)
                else:
                    self.opened.append(_Clip(path, start_s, min(end_s, start_s + MAX_CLIP_S),
                                             self.window.since(start_s)))
        if closed:
            self._done(path, "the stream's connection or pass had ended when it was asked for", True)

    def _widen(self, start_s: float) -> None:
        """An event that came back later than the window's margin allows (the newest packet read is
        further past the event than `keep_s - pre_s`): from now on the window keeps twice that lag
        beyond `pre_s` (at most `MAX_MARGIN_S`), so the next clip starts where it should. This one
        starts at the oldest key frame still kept."""
        if self.pre_s is None or self.newest_s is None:
            return
        lag = self.newest_s - (start_s + self.pre_s)
        margin = self.window.keep_s - self.pre_s
        if lag > margin and margin < MAX_MARGIN_S:
            self.window.keep_s = self.pre_s + min(MAX_MARGIN_S, 2 * lag)
            log.info("%s: an event came %.2f s after its frame was read; clips now keep %.2f s of packets",
                     self.stream, lag, self.window.keep_s)

    def close(self, wait_s: float = 0.0) -> None:
        """The session (or a file's pass) has ended: clips still open are written with what they
        have; the writer ends once they are written, waited for at most `wait_s` (at the end of a
        session, whose container and process may end next)."""
        with self._lock:
            self._closed = True
            if self._held is not None:
                self._keep(self._held)
                self._held = None
            for clip in self.opened:
                self._hand_over(clip)
            self.opened.clear()
            self.window.clear()
        self._queue.put(None)
        if wait_s:
            self._writer.join(wait_s)

    def _hand_over(self, clip: _Clip) -> None:
        if self._queue.qsize() >= MAX_PENDING:
            self._done(clip.path, f"{MAX_PENDING} clips already waited for the disk")
            return
        self._queue.put(clip)

    def _write_loop(self) -> None:
        while True:
            clip = self._queue.get()
            if clip is None:
                self._holder.close()
                return
            try:
                write_clip(self.template, clip.packets, clip.path, self.time_base)
            except (OSError, ValueError) as e:  # PyAV's errors are OSError and ValueError subclasses
                self._done(clip.path, getattr(e, "strerror", None) or str(e))
                continue
            self._done(clip.path, None)
            if self.folder is not None and self.retain is not None:
                prune_clips(self.folder, *self.retain)


def write_clip(template, packets: list[_Packet], path: Path, time_base: Fraction | None = None) -> None:
    """Mux `packets` (starting at a key frame) into an MP4 at `path`, written aside and renamed;
    `template`: a stream with the packets' codec parameters, `time_base` their times' unit
    (default: the template's)."""
    import av

    first_key = next((i for i, p in enumerate(packets) if p.keyframe), None)
    if first_key is None:
        raise ValueError("no key frame among its packets")
    packets = packets[first_key:]  # a clip never starts with pictures that cannot be decoded
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    base = min(p.dts if p.dts is not None else p.pts or 0 for p in packets)
    time_base = time_base or template.time_base
    try:
        with av.open(str(part), "w", format="mp4") as out:
            stream = out.add_stream_from_template(template)
            for p in packets:
                packet = av.Packet(p.data)
                packet.pts = None if p.pts is None else p.pts - base
                packet.dts = None if p.dts is None else p.dts - base
                packet.time_base = time_base
                packet.is_keyframe = p.keyframe
                packet.stream = stream
                out.mux(packet)
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def prune_clips(folder: Path, days: float | None, max_bytes: float | None, now: float | None = None) -> int:
    """Delete the oldest `.mp4` files under `folder` past `days` of age or while all of them together
    are over `max_bytes`; returns how many were deleted."""
    now = time.time() if now is None else now
    for part in folder.rglob("*.mp4.part"):  # left by a process that ended while writing it
        try:
            if now - part.stat().st_mtime > STALE_PART_S:
                part.unlink()
        except OSError:
            pass
    files = []
    for path in folder.rglob("*.mp4"):
        try:
            st = path.stat()
        except OSError:
            continue
        files.append((st.st_mtime, st.st_size, path))
    files.sort()
    total, deleted = sum(size for _, size, _ in files), 0
    for mtime, size, path in files:
        old = days is not None and now - mtime > days * 86400
        big = max_bytes is not None and total > max_bytes
        if not (old or big):
            break
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        deleted += 1
    return deleted


__all__ = ["ClipRecorder", "ClipSpec", "PacketWindow", "write_clip", "prune_clips", "MAX_PENDING", "MAX_WINDOW_BYTES"]
