"""Decode workers: where a source's input is opened, read and decoded, away from the graph.

A `ProcessWorker` is a CPU worker process: decoding runs outside the graph's GIL, frames come back
through a shared-memory `FrameRing` (pixels are never pickled), and a worker stuck inside FFmpeg can
always be killed, so a stop or a reconnect never waits on the network. It serves a live source (the
default there) and a file (`FileSource(decode="process")`). A `ThreadWorker` runs a camera's loop on
a thread of the graph's process (`decode: thread`): no process to start, but the decode holds the
GIL and a thread stuck in FFmpeg can only be left to end on its own (FFmpeg's timeout bounds it).

Both speak the same small protocol with their owner, one session at a time. A session is what a
spec says: a `SessionSpec` (session.py) is one connection to a camera, a `FileSpec` (file.py) one run
over a file, its loops included; `spec.run()` is the loop, `spec.lossless` how full slots are met.

    owner -> worker:  ("open", session, spec)   ("abort", session)   ("quit",)
                      ("ring", ring_id, name, slots, slot_bytes)      (process only: a new ring)
                      ("no_ring", session, line)                      (process only: no room for it)
                      ("credit",)                                     (process only: the answer to waiting)
    worker -> owner:  ("opened", session, StreamInfo)   ("frame", session, ...)
                      ("ended", session, reason, message, drops, corrupt, detail)
                      ("need_ring", session, slot_bytes)   ("waiting",)   ("crashed", message)

`poll()` turns what arrives into `Opened`, `FrameReady`, `Ended` or `Died`. A `FrameReady` must be
`take()`n or `discard()`ed before the next `poll()`: that frees its slot. The free slots are the
worker's credits (`RING_SLOTS` of them): a frame spends one, and the owner gives it back when it has
copied the frame out.
- A camera's worker never waits for the owner: when every slot is full it drops the frame it holds
  (counted in `FrameReady.worker_drops`, with the packets it skipped to catch up with a camera it
  fell behind: session.py `BEHIND_S`; packets its decoder rejected in `FrameReady.corrupt`; both
  counters also come with `Ended`, and restart with each worker).
- A file's worker (a lossless session) waits instead: out of credits, it says `("waiting",)` and
  blocks on its pipe. The owner answers `("credit",)` as soon as it reads that: it has freed every
  frame sent before by then, since it frees each one before it reads the next message. So a file
  loses no frame to a slow consumer, the slots bound what is decoded ahead of it, and while the
  owner keeps up no message is spent on credits. An abort or quit ends the wait too.

A picture crosses as the decoder made it: yuv420p and yuvj420p as I420 planes (Y, then U, then V,
tightly packed: half the bytes of BGR), followed by the scene-cut grey sample (`thumbnail_step`),
made here so the graph need not; the owner gets a `YuvPicture` (frame.py), converted to BGR only
when something reads `Frame.image`. Other pixel formats are converted to BGR here and cross as
such. The decoder's motion vectors travel in the same slot, after the picture (or in the message
when they do not fit).

A worker process is ended by its owner only: it ignores SIGINT and SIGTERM, which a terminal's
Ctrl-C, `docker stop` or systemd send to the whole process group, so that the owner can end its
sessions in order. It exits by itself when the owner's process is gone (its lifeline pipe closes),
even while blocked inside FFmpeg or waiting for a credit. The owner checks, before it makes a ring,
that shared memory has room for it, and reserves the ring's memory at once: a full /dev/shm is never
a worker killed by SIGBUS when it writes a frame. When there is no room (a camera that switched to a
larger picture, a small Docker /dev/shm), the owner says `no_ring` with one clear line, and the
session ends as `refused` with that line: the source's own trouble, which it retries (a camera) or
ends with (a file); the other streams never notice. A picture larger than the source's
`max_pixels` ends its session the same way (session.py `too_large`). Refused pictures are counted
in `Ended.detail["refused"]`.

Example:
    >>> from streamlens.sources.session import SessionSpec       # doctest: +SKIP
    >>> worker = ProcessWorker("cam1"); worker.start()            # doctest: +SKIP
    >>> worker.open(1, SessionSpec("rtsp://127.0.0.1:8554/cam1", {"rtsp_transport": "tcp"}))  # doctest: +SKIP
    >>> event = worker.poll(5.0)                                  # doctest: +SKIP
    >>> event                                                     # doctest: +SKIP
    Opened(session=1, info=StreamInfo(width=640, height=360, fps=30.0, codec='h264'))
    >>> worker.close()                                            # doctest: +SKIP
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import SourceError
from ..frame import I420_FORMATS, YuvPicture, i420_bytes, thumbnail_step, to_bgr
from ..urls import mask_url
from .host_memory import HostMemory
from .ring import SHM_DIR, FrameRing, NoRoom, free_bytes, ring_bytes
from .session import SessionOutput, StreamInfo

#: slots in a process worker's ring (and frames in flight from a thread worker)
RING_SLOTS = 4
#: how long `close()` waits for a worker to end by itself before it is killed
CLOSE_GRACE_S = 0.5
#: how long the owner waits for a worker whose pipe closed to be reaped, to say how it ended
DEATH_NOTE_WAIT_S = 0.5


# -- what the owner receives --------------------------------------------------------------------

@dataclass
class Opened:
    session: int
    info: StreamInfo


@dataclass
class Ended:
    session: int
    reason: str
    message: str
    #: the worker's counters when the session ended (as in `FrameReady`)
    worker_drops: int = 0
    corrupt: int = 0
    #: what the session says of its end beyond that (a file's: `incomplete`, `read_error`)
    detail: dict = field(default_factory=dict)


@dataclass
class Died:
    """The worker is gone (killed, crashed): its current session is over, and it must be replaced."""

    message: str


@dataclass
class FrameReady:
    """A decoded frame waiting in the worker's transport: `take()` it or `discard()` it."""

    session: int
    pts: float
    #: `time.time()` and `time.monotonic()` when the worker decoded it
    ts: float
    clock: float
    decode_ms: float
    #: the picture's width and height
    size: tuple[int, int]
    #: frames the worker dropped so far because every slot was full
    worker_drops: int
    #: packets the worker's decoder rejected so far
    corrupt: int
    #: a file's `(index, media seconds since the run began)`, else None
    position: tuple[int, float] | None = None
    _take: Any = field(repr=False, default=None)
    _release: Any = field(repr=False, default=None)

    def take(self, host: HostMemory) -> tuple[YuvPicture | np.ndarray, np.ndarray | None]:
        """The picture and the motion vectors; frees the slot. The picture is a `YuvPicture` (its BGR
        image made in `host` memory when read) or, for other pixel formats, BGR already in `host`."""
        try:
            return self._take(host)
        finally:
            self.discard()

    def discard(self) -> None:
        if self._release is not None:
            release, self._release = self._release, None
            release()


# -- how a picture crosses ------------------------------------------------------------------------

def picture_layout(picture) -> tuple:
    """What crosses for a decoded PyAV `VideoFrame`: `("i420", width, height, format, colorspace,
    color_range, sample_step)` for the formats that cross as planes, else `("bgr", width, height)`."""
    width, height = picture.width, picture.height
    name = picture.format.name
    if name in I420_FORMATS:
        return "i420", width, height, name, int(picture.colorspace), int(picture.color_range), thumbnail_step(width)
    return "bgr", width, height


def layout_bytes(layout: tuple) -> int:
    """Bytes a picture of `layout` takes in a slot: I420 and its grey sample, or BGR."""
    if layout[0] == "bgr":
        return layout[1] * layout[2] * 3
    rows, columns = _sample_shape(layout)
    return i420_bytes(layout[1], layout[2]) + rows * columns


def _sample_shape(layout: tuple) -> tuple[int, int]:
    width, height, step = layout[1], layout[2], layout[6]
    return -(-height // step), -(-width // step)


def _pack(picture, layout: tuple, out: np.ndarray) -> None:
    """Write `picture` into `out` (1-D uint8, `layout_bytes(layout)` long) as `layout` says."""
    if layout[0] == "bgr":
        # one swscale thread: decode workers run side by side, one process per camera or file
        np.copyto(out.reshape(layout[2], layout[1], 3), to_bgr(picture, threads=1))
        return
    planes = i420_bytes(layout[1], layout[2])
    YuvPicture.pack(picture, out[:planes])
    step = layout[6]
    luma = out[:layout[1] * layout[2]].reshape(layout[2], layout[1])
    np.copyto(out[planes:].reshape(_sample_shape(layout)), luma[::step, ::step])


def _unpack(layout: tuple, data: np.ndarray, host: HostMemory) -> YuvPicture | np.ndarray:
    """The picture `_pack` wrote into `data`, which it keeps (no copy): a `YuvPicture` whose planes
    and sample are views of `data`, or the BGR image."""
    if layout[0] == "bgr":
        return data.reshape(layout[2], layout[1], 3)
    _, width, height, name, colorspace, color_range, step = layout
    planes = i420_bytes(width, height)
    return YuvPicture(data[:planes], width, height, name, colorspace, color_range,
                      sample=(step, data[planes:].reshape(_sample_shape(layout))),
                      allocate=host.empty if host.pinned else None)


class _Buffers:
    """Buffers that pictures are copied out of a ring into, each used again once it is free: when
    nothing but this list holds it (a `YuvPicture`, its planes and every view of them are views of
    its buffer, and hold it). A fresh buffer per frame would be new memory whose pages fault when
    first written: measured up to 1000 faults, 2.5 ms of CPU, per 1080p frame, as the allocator's
    history had it. At most `keep` free buffers stay; one of another size is let go when free."""

    def __init__(self, keep: int):
        self.keep = keep
        self._buffers: list[np.ndarray] = []

    def get(self, size: int) -> np.ndarray:
        chosen, spare, kept = None, 0, []
        for buffer in self._buffers:
            # references while free: the list, `buffer` here and getrefcount's own argument
            if sys.getrefcount(buffer) > 3:
                kept.append(buffer)
            elif buffer.size == size and (chosen is None or spare < self.keep):
                if chosen is None:
                    chosen = buffer
                else:
                    spare += 1
                kept.append(buffer)
        if chosen is None:
            chosen = np.empty(size, np.uint8)
            kept.append(chosen)
        self._buffers = kept
        return chosen


# -- the loop a worker runs (in its process or thread) --------------------------------------------

class _Control:
    """The worker's view of its owner's commands while a session runs."""

    def __init__(self, conn):
        self.conn = conn
        self.session = 0
        self.aborted = False
        self.quit = False
        self.ring: FrameRing | None = None
        self.ring_id = 0
        self.drops = 0
        self.corrupt = 0
        #: pictures this session refused (too large, or no room for their ring), and why it ends so
        self.refused = 0
        self.refusal: str | None = None

    def handle(self, message: tuple) -> None:
        kind = message[0]
        if kind == "abort" and message[1] == self.session:
            self.aborted = True
        elif kind == "quit":
            self.quit = True
        elif kind == "ring":
            _, ring_id, name, slots, slot_bytes = message
            if self.ring is not None:
                self.ring.close()
            self.ring, self.ring_id = FrameRing.attach(name, slots, slot_bytes), ring_id
        elif kind == "no_ring" and message[1] == self.session:
            self.refusal = message[2]
            if self.ring is not None:  # the owner has retired it: the next session asks for a new one
                self.ring.close()
                self.ring = None

    def should_stop(self) -> bool:
        while self.conn.poll(0):
            self.handle(self.conn.recv())
        return self.aborted or self.quit or self.refusal is not None

    def wait_for_credit(self) -> bool:
        """Say that every slot is full and block until the owner answers with a credit (its slots are
        free then); False if the session is to end instead. No timer: an abort or quit is a message
        too, and an owner that is gone closes the pipe (and the lifeline ends the process)."""
        self.conn.send(("waiting",))
        while not (self.aborted or self.quit):
            message = self.conn.recv()
            if message[0] == "credit":
                return True
            self.handle(message)
        return False


def serve(conn, make_output) -> None:
    """Run sessions as the owner asks, until it says quit or goes away (`conn` closes)."""
    control = _Control(conn)
    try:
        while not control.quit:
            message = conn.recv()
            if message[0] != "open":
                control.handle(message)
                continue
            _, control.session, spec = message
            control.aborted, control.refused, control.refusal = False, 0, None
            reason, text, detail = spec.run(make_output(conn, control, spec), control.should_stop)
            if control.refusal is not None:  # the owner had no room for its pictures
                reason, text = "refused", control.refusal
            if control.refused:
                detail = {**detail, "refused": control.refused}
            conn.send(("ended", control.session, reason, text, control.drops, control.corrupt, detail))
    finally:
        if control.ring is not None:
            control.ring.close()


class _Output(SessionOutput):
    """What both workers' outputs count the same way: rejected packets (`corrupt`), refused
    pictures, and packets skipped to catch up with a camera (counted with the drops)."""

    def __init__(self, conn, control: _Control, spec):
        self.conn, self.control, self.spec = conn, control, spec

    def opened(self, info: StreamInfo) -> None:
        self.conn.send(("opened", self.control.session, info))

    def rejected(self) -> None:
        self.control.corrupt += 1

    def refused(self) -> None:
        self.control.refused += 1

    def skipped(self) -> None:
        self.control.drops += 1


class _RingOutput(_Output):
    """A process worker's output: pixels into the shared ring, a small message on the pipe."""

    def frame(self, picture, pts, ts, clock, decode_ms, motion_vectors, position=None) -> None:
        control = self.control
        started = time.perf_counter()
        layout = picture_layout(picture)
        size = layout_bytes(layout)
        need = size + (_mv_budget(layout[1], layout[2]) if self.spec.export_mvs else 0)
        if control.ring is None or control.ring.slot_bytes < need:
            if not self._wait_for_ring(need):
                if control.refusal is not None:
                    control.refused += 1
                return
        slot = control.ring.claim()
        while slot is None and self.spec.lossless:
            waited = time.perf_counter()
            if not control.wait_for_credit():
                return
            started += time.perf_counter() - waited  # waiting for the owner is not decoding
            slot = control.ring.claim()
        if slot is None:
            control.drops += 1
            return
        _pack(picture, layout, control.ring.view(slot, size))
        mvs = None
        if motion_vectors is not None:
            if control.ring.write_extra(slot, size, motion_vectors):
                mvs = ("slot", motion_vectors.dtype, motion_vectors.shape)
            else:
                mvs = ("inline", motion_vectors)
        control.ring.publish(slot)
        decode_ms += (time.perf_counter() - started) * 1000.0
        self.conn.send(("frame", control.session, control.ring_id, slot, layout, pts, ts, clock, decode_ms,
                        mvs, control.drops, control.corrupt, position))

    def _wait_for_ring(self, slot_bytes: int) -> bool:
        """Ask the owner for a ring whose slots hold `slot_bytes`; False if the session ends first."""
        control = self.control
        asked = control.ring_id
        self.conn.send(("need_ring", control.session, slot_bytes))
        while control.ring_id == asked:
            if control.aborted or control.quit or control.refusal is not None:
                return False
            if self.conn.poll(0.1):
                control.handle(self.conn.recv())
        return True


def _mv_budget(width: int, height: int) -> int:
    """Bytes kept in a slot for motion vectors (`Frame.motion_vectors`: float32 rows of 4): one row
    per 8x8 block; H.264 exports one per 16x16 macroblock or partition, and more than this goes in
    the message instead."""
    return (width // 8 + 1) * (height // 8 + 1) * 16


def worker_process_main(conn, lifeline) -> None:
    """A decode worker process's entry point. `lifeline`: the reading end of a pipe that only the
    owner's process holds open; when it closes, the owner is gone and the worker exits at once."""
    # Ctrl-C in a terminal, `docker stop` and systemd signal the whole process group: the owner
    # decides when a worker ends, after its own shutdown has ended the connections in order
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_with_owner, args=(lifeline,), name="lifeline", daemon=True).start()
    try:
        serve(conn, _RingOutput)
    except (EOFError, OSError):  # the owner went away
        pass
    except BaseException as error:  # noqa: BLE001 - report in one line, never a traceback with a URL
        try:
            conn.send(("crashed", mask_url(f"{type(error).__name__}: {error}")))
        except (OSError, ValueError):
            pass


def _exit_with_owner(lifeline) -> None:
    """Wait for the owner's end of the lifeline to close, then end this process at once: the main
    thread may be inside FFmpeg for up to its timeout (an orphan would hold the camera that long)."""
    try:
        lifeline.recv_bytes()  # nothing is ever sent: this returns only by EOF
    except (EOFError, OSError):
        pass
    os._exit(0)


def check_shared_memory(stream: str, needed: int, free: int | None = None, path: str = SHM_DIR) -> None:
    """Raise a `SourceError` naming `stream` when a ring of `needed` bytes does not fit in the shared
    memory left: `free` bytes, by default what the file system at `path` has free now.

    Example:
        >>> check_shared_memory("cam6", 11_059_264, free=3_145_728)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        streamlens.errors.SourceError: cam6: not enough shared memory ...: it needs 11059264 bytes, ...
        >>> check_shared_memory("cam1", 11_059_264, free=64 << 20)
    """
    if free is None:
        free = free_bytes(path)
    if needed > free:
        raise SourceError(_no_room(stream, needed, free, path))


def _no_room(stream: str, needed: int, free: int, path: str) -> str:
    """The line that says so, with a shared memory size to give a container: room for 16 such rings."""
    mib = 1 << 20
    suggest = -(-16 * needed // (256 * mib)) * 256
    return (f"{stream}: not enough shared memory for the stream's frame ring ({RING_SLOTS} frames): it needs "
            f"{needed} bytes, {path} has {free} free; give the container more (docker run --shm-size={suggest}m, "
            f"or shm_size in compose; each stream like this one takes {needed / mib:.1f} MiB) or run fewer or "
            f"smaller cameras or files")


# -- the owner's side -----------------------------------------------------------------------------

_context_lock = threading.Lock()


def _process_context():
    """forkserver where there is one: a fork of a small, single-threaded server that has this module
    and the file session's loaded already (fast, memory shared, and safe in a process full of
    threads; a file's worker, or a camera's with motion vectors, then starts without importing
    numba on its own); else spawn."""
    with _context_lock:
        if "forkserver" in multiprocessing.get_all_start_methods():
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload([__name__, "streamlens.sources.file"])
            return ctx
        return multiprocessing.get_context("spawn")


class ProcessWorker:
    """A decode worker process and its frame ring; owned by one source (a camera's `LiveSource`, or
    a `FileSource` that decodes in a process). `name`: the stream's, for its process and errors."""

    def __init__(self, name: str):
        self.name = name
        self._process = None
        self._conn = None
        self._lifeline = None
        self._rings: dict[int, FrameRing] = {}
        self._ring_ids = itertools.count(1)
        self._buffers = _Buffers(keep=RING_SLOTS)
        self._dead = False

    def start(self) -> None:
        """Start the process. Raises `OSError` when it cannot be started (no file descriptors, no
        processes left): whatever was made for it is closed again first."""
        ctx = _process_context()
        made = []
        try:
            self._conn, child = ctx.Pipe(duplex=True)
            made += [self._conn, child]
            lifeline, self._lifeline = ctx.Pipe(duplex=False)
            made += [lifeline, self._lifeline]
            process = ctx.Process(target=worker_process_main, args=(child, lifeline), daemon=True,
                                  name=f"streamlens-decode-{self.name}")
            process.start()
        except BaseException:
            for end in made:
                end.close()
            self._conn = self._lifeline = None
            self._dead = True
            raise
        self._process = process  # only once started: close() joins it
        child.close()
        lifeline.close()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def alive(self) -> bool:
        return not self._dead and self._process is not None and self._process.is_alive()

    def open(self, session: int, spec) -> None:
        """Start a session of `spec` (a `SessionSpec` or a `FileSpec`)."""
        self._send(("open", session, spec))

    def abort(self, session: int) -> None:
        self._send(("abort", session))

    def _send(self, message: tuple) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError):
            self._dead = True  # noticed by poll()

    def poll(self, timeout: float):
        """The next event, or None if nothing arrived within `timeout` seconds. A ring the worker asks
        for that does not fit in shared memory ends its session: `Ended(reason="refused")`."""
        if self._dead:
            return Died(self._death_note())
        try:
            if not self._conn.poll(timeout):
                return None
            message = self._conn.recv()
        except (EOFError, OSError):
            self._dead = True
            return Died(self._death_note())
        kind = message[0]
        if kind == "frame":
            return self._frame_ready(message)
        if kind == "opened":
            return Opened(message[1], message[2])
        if kind == "ended":
            return Ended(*message[1:])
        if kind == "need_ring":
            self._new_ring(message[1], message[2])
            return None
        if kind == "waiting":  # every frame it sent before was freed before this was read
            self._send(("credit",))
            return None
        if kind == "crashed":
            self._dead = True
            return Died(f"decode worker failed: {message[1]}")
        return None

    def _new_ring(self, session: int, slot_bytes: int) -> None:
        """Make the ring the worker asks for; when shared memory has no room for it, tell the worker,
        whose session then ends as `refused` with that line (the source's own trouble: retried)."""
        # Every frame of an older ring came before this request and has been taken: retire them.
        for ring in self._rings.values():
            ring.close()
        self._rings.clear()
        ring_id = next(self._ring_ids)
        needed = ring_bytes(RING_SLOTS, slot_bytes)
        try:
            check_shared_memory(self.name, needed)
            ring = FrameRing.create(RING_SLOTS, slot_bytes)
        except SourceError as error:
            self._send(("no_ring", session, str(error)))
            return
        except NoRoom as error:  # taken meanwhile (other cameras start at the same time)
            self._send(("no_ring", session, _no_room(self.name, needed, error.free, SHM_DIR)))
            return
        self._rings[ring_id] = ring
        self._send(("ring", ring_id, ring.name, ring.slots, ring.slot_bytes))

    def _frame_ready(self, message: tuple) -> FrameReady:
        _, session, ring_id, slot, layout, pts, ts, clock, decode_ms, mvs, drops, corrupt, position = message
        ring = self._rings[ring_id]
        size = layout_bytes(layout)

        def take(host: HostMemory):
            # one copy out of the slot: BGR straight into `host` memory, planes into a buffer used again
            data = host.empty((size,)) if layout[0] == "bgr" else self._buffers.get(size)
            ring.read_image(slot, data)
            picture = _unpack(layout, data, host)
            if mvs is None:
                return picture, None
            if mvs[0] == "slot":
                return picture, ring.read_extra(slot, size, mvs[1], mvs[2])
            return picture, mvs[1]

        return FrameReady(session, pts, ts, clock, decode_ms, (layout[1], layout[2]), drops, corrupt, position,
                          take, lambda: ring.release(slot))

    def _death_note(self) -> str:
        """`decode worker ended`, and how: its pipe closed as it died, so it is reaped within moments."""
        if self._process is None:
            return "decode worker ended"
        self._process.join(DEATH_NOTE_WAIT_S)
        code = self._process.exitcode
        if code is None:
            return "decode worker ended"
        if code < 0:
            try:
                return f"decode worker ended (killed by {signal.Signals(-code).name})"
            except ValueError:
                pass
        return f"decode worker ended (exit code {code})"

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """End the worker: ask, wait `grace_s`, then kill. Safe to call twice."""
        if self._process is not None:
            if not self._dead:
                self._send(("quit",))
            self._process.join(grace_s)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(1.0)
            if not self._process.is_alive():
                self._process.close()
            self._process = None
        for end in (self._conn, self._lifeline):
            if end is not None:
                end.close()
        self._conn = self._lifeline = None
        for ring in self._rings.values():
            ring.close()
        self._rings.clear()
        self._dead = True


class _QueueEnd:
    """One end of an in-process pipe made of two queues: `send`, `recv`, `poll` like a Connection."""

    def __init__(self, inbox: queue.SimpleQueue, outbox: queue.SimpleQueue):
        self._inbox, self._outbox = inbox, outbox
        self._held = collections.deque()

    def send(self, message) -> None:
        self._outbox.put(message)

    def poll(self, timeout: float = 0.0) -> bool:
        if self._held:
            return True
        try:
            self._held.append(self._inbox.get(timeout=timeout) if timeout > 0 else self._inbox.get_nowait())
        except queue.Empty:
            return False
        return True

    def recv(self):
        return self._held.popleft() if self._held else self._inbox.get()


class _DirectOutput(_Output):
    """A thread worker's output: the packed picture itself, at most `RING_SLOTS` frames in flight."""

    def frame(self, picture, pts, ts, clock, decode_ms, motion_vectors, position=None) -> None:
        control = self.control
        if not control.slots.acquire(blocking=False):
            control.drops += 1
            return
        started = time.perf_counter()
        layout = picture_layout(picture)
        data = control.buffers.get(layout_bytes(layout))
        _pack(picture, layout, data)
        decode_ms += (time.perf_counter() - started) * 1000.0
        self.conn.send(("frame", control.session, layout, data, pts, ts, clock, decode_ms, motion_vectors,
                        control.drops, control.corrupt))


class ThreadWorker:
    """A camera's decode loop on a daemon thread of this process (`decode: thread`). Camera
    sessions only: a file decoded in this process needs no worker (`FileSource(decode="thread")`)."""

    def __init__(self, name: str):
        self.name = name
        self._thread: threading.Thread | None = None
        self._conn: _QueueEnd | None = None
        self._slots = threading.BoundedSemaphore(RING_SLOTS)
        self._dead = False

    def start(self) -> None:
        to_worker, to_owner = queue.SimpleQueue(), queue.SimpleQueue()
        self._conn = _QueueEnd(to_owner, to_worker)
        worker_end = _QueueEnd(to_worker, to_owner)
        slots, buffers = self._slots, _Buffers(keep=RING_SLOTS)

        def output(conn, control, spec):
            control.slots, control.buffers = slots, buffers
            return _DirectOutput(conn, control, spec)

        def main() -> None:
            try:
                serve(worker_end, output)
            except BaseException as error:  # noqa: BLE001
                worker_end.send(("crashed", mask_url(f"{type(error).__name__}: {error}")))

        self._thread = threading.Thread(target=main, name=f"streamlens-decode-{self.name}", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return not self._dead and self._thread is not None and self._thread.is_alive()

    def open(self, session: int, spec) -> None:
        if spec.lossless:
            raise ValueError(f"{self.name}: a thread worker drops frames when its slots are full; "
                             f"a lossless session needs a ProcessWorker")
        self._conn.send(("open", session, spec))

    def abort(self, session: int) -> None:
        self._conn.send(("abort", session))

    def poll(self, timeout: float):
        if self._dead:
            return Died("decode thread ended")
        if not self._conn.poll(timeout):
            return None
        message = self._conn.recv()
        kind = message[0]
        if kind == "frame":
            _, session, layout, data, pts, ts, clock, decode_ms, mvs, drops, corrupt = message

            def take(host: HostMemory):
                if layout[0] == "bgr" and host.pinned:
                    pinned = host.empty(data.shape)
                    np.copyto(pinned, data)
                    return _unpack(layout, pinned, host), mvs
                return _unpack(layout, data, host), mvs

            return FrameReady(session, pts, ts, clock, decode_ms, (layout[1], layout[2]), drops, corrupt, None,
                              take, self._slots.release)
        if kind == "opened":
            return Opened(message[1], message[2])
        if kind == "ended":
            return Ended(*message[1:])
        if kind == "crashed":
            self._dead = True
            return Died(f"decode thread failed: {message[1]}")
        return None

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Ask the thread to end and wait at most `grace_s`; a thread blocked inside FFmpeg is left
        to end on its own when FFmpeg's timeout fires (it is a daemon thread)."""
        if self._thread is not None and not self._dead:
            self._conn.send(("quit",))
            self._thread.join(grace_s)
        self._dead = True
