"""Decode workers: where a source's input is opened, read and decoded, away from the graph.

A `ProcessWorker` is a CPU worker process: decoding runs outside the graph's GIL, frames come back
through a shared-memory `FrameRing` (pixels are never pickled), and a worker stuck inside FFmpeg can
always be killed, so a stop or a reconnect never waits on the network. It serves a live source (the
default there) and a file (`FileSource(decode="process")`). A `ThreadWorker` runs a camera's loop on
a thread of the graph's process (`decode: thread`): no process to start, but the decode holds the
GIL and a thread stuck in FFmpeg can only be left to end on its own (FFmpeg's timeout bounds it).

Both speak the protocol of protocol.py with their owner, one session at a time; the loop a worker
runs, in its process or on its thread, is worker_loop.py's, and how a picture crosses is pixels.py's.

`poll()` turns what arrives into `Opened`, `FrameReady`, `Ended` or `Died` (a `ClipDone` as it is).
A `FrameReady` must be `take()`n or `discard()`ed before the next `poll()`: that frees its slot. The
free slots are the worker's credits (`RING_SLOTS` of them): a frame spends one, and the owner gives
it back when it has copied the frame out. A camera's worker never waits for one: out of credits, it
drops the frame it holds (`FrameReady.worker_drops`); a file's waits (protocol.py says how).

A worker process is ended by its owner only: it ignores SIGINT and SIGTERM, which a terminal's
Ctrl-C, `docker stop` or systemd send to the whole process group, so that the owner can end its
sessions in order. It exits by itself when the owner's process is gone (its lifeline pipe closes),
even while blocked inside FFmpeg or waiting for a credit. The owner checks, before it makes a ring,
that shared memory has room for it, and reserves the ring's memory at once: a full /dev/shm is never
a worker killed by SIGBUS when it writes a frame. When there is no room (a camera that switched to a
larger picture, a small Docker /dev/shm), the owner says `NoRing` with one clear line, and the
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
import queue
import signal
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import SourceError
from ..pictures import YuvPicture
from ..urls import mask_url
from .host_memory import HostMemory
from .pixels import Buffers, layout_bytes, unpack
from .protocol import (CREDIT, QUIT, WAITING, Abort, Clip, ClipDone, Clock, Crashed, FrameSent, NeedRing, NewRing,
                       NoRing, Open, SessionEnded, SessionOpened, Thin)
from .ring import SHM_DIR, FrameRing, NoRoom, free_bytes, ring_bytes
from .session import StreamInfo
from .worker_loop import DirectOutput, serve, worker_process_main

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
    #: frames the session gave up so far at the budget controller's say (`ThinLink`)
    thinned: int = 0
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


class ThinLink:
    """A source's link between the budget controller and its decode worker's sessions:
    `follow(worker, session, event)`, called with each event the source polls (None too), tells the
    session when `thin.decode_share` or `thin.whole_groups` (a `Shedder`'s) change (a new session
    starts with every frame, by groups' ends), and gives the shedder the frames the session gave up
    since the last event (`Shedder.skipped_by_worker`); it returns that count (a camera numbers its
    frames counting them)."""

    def __init__(self, thin):
        self.thin = thin
        self.session = None
        self.told = (1.0, False)  # the share the session was told, and whether by whole groups
        self.counted = 0  # what the session gave up, counted so far

    def follow(self, worker, session: int, event) -> int:
        if session != self.session:
            self.session, self.told, self.counted = session, (1.0, False), 0
        share = (self.thin.decode_share, self.thin.whole_groups)
        if share != self.told:
            self.told = share
            worker.thin(session, *share, self.thin.phase)
        if isinstance(event, FrameReady):
            given_up = event.thinned
        elif isinstance(event, Ended):
            given_up = event.detail.get("thinned", 0)
        else:
            return 0
        if getattr(event, "session", session) != session or given_up <= self.counted:
            return 0
        new, self.counted = given_up - self.counted, given_up
        self.thin.skipped_by_worker(new)
        return new


# -- the owner's side -----------------------------------------------------------------------------

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


_context_lock = threading.Lock()


def _process_context():
    """forkserver where there is one: a fork of a small, single-threaded server that has this module
    and the file session's loaded already, motion vectors' compiled step included (preload.py: fast,
    memory shared, and safe in a process full of threads; a file's worker, or a camera's with
    motion vectors, then starts without loading numba on its own); else spawn."""
    with _context_lock:
        if "forkserver" in multiprocessing.get_all_start_methods():
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload([__name__, "streamlens.sources.file", "streamlens.sources.preload"])
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
        self._buffers = Buffers(keep=RING_SLOTS)
        self._dead = False
        self._sending = threading.Lock()  # clip requests come from the engine's thread, the rest from the source's

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
        self._send(Open(session, spec))

    def abort(self, session: int) -> None:
        self._send(Abort(session))

    def clip(self, session: int, start_s: float, end_s: float, path: str, index: int = -1) -> None:
        self._send(Clip(session, start_s, end_s, path, index))

    def thin(self, session: int, share: float, whole: bool = False, phase: float = 0.0) -> None:
        self._send(Thin(session, share, whole, phase))

    def clock(self, session: int, start: float) -> None:
        self._send(Clock(session, start))

    def _send(self, message: tuple) -> None:
        try:
            with self._sending:
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
        if type(message) is tuple:  # a frame: the one message that is a plain tuple (protocol.py)
            return self._frame_ready(FrameSent._make(message))
        if isinstance(message, SessionOpened):
            return Opened(message.session, message.info)
        if isinstance(message, SessionEnded):
            return Ended(*message)
        if isinstance(message, NeedRing):
            self._new_ring(message.session, message.slot_bytes)
            return None
        if message == WAITING:  # every frame it sent before was freed before this was read
            self._send(CREDIT)
            return None
        if isinstance(message, Crashed):
            self._dead = True
            return Died(f"decode worker failed: {message.message}")
        return message if isinstance(message, ClipDone) else None  # what became of a clip: the owner's

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
            self._send(NoRing(session, str(error)))
            return
        except NoRoom as error:  # taken meanwhile (other cameras start at the same time)
            self._send(NoRing(session, _no_room(self.name, needed, error.free, SHM_DIR)))
            return
        self._rings[ring_id] = ring
        self._send(NewRing(ring_id, ring.name, ring.slots, ring.slot_bytes))

    def _frame_ready(self, message: FrameSent) -> FrameReady:
        layout, mvs, slot = message.layout, message.mvs, message.slot
        ring = self._rings[message.ring_id]
        size = layout_bytes(layout)

        def take(host: HostMemory):
            # one copy out of the slot: BGR straight into `host` memory, planes into a buffer used again
            data = host.empty((size,)) if layout[0] == "bgr" else self._buffers.get(size)
            ring.read_image(slot, data)
            picture = unpack(layout, data, host)
            if mvs is None:
                return picture, None
            if mvs[0] == "slot":
                return picture, ring.read_extra(slot, size, mvs[1], mvs[2])
            return picture, mvs[1]

        return FrameReady(message.session, message.pts, message.ts, message.clock, message.decode_ms,
                          (layout[1], layout[2]), message.worker_drops, message.corrupt, message.thinned,
                          message.position, take, lambda: ring.release(slot))

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
                self._send(QUIT)
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
        slots, buffers = self._slots, Buffers(keep=RING_SLOTS)

        def output(conn, control, spec):
            control.slots, control.buffers = slots, buffers
            return DirectOutput(conn, control, spec)

        def main() -> None:
            try:
                serve(worker_end, output)
            except BaseException as error:  # noqa: BLE001
                worker_end.send(Crashed(mask_url(f"{type(error).__name__}: {error}")))

        self._thread = threading.Thread(target=main, name=f"streamlens-decode-{self.name}", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return not self._dead and self._thread is not None and self._thread.is_alive()

    def open(self, session: int, spec) -> None:
        if spec.lossless:
            raise ValueError(f"{self.name}: a thread worker drops frames when its slots are full; "
                             f"a lossless session needs a ProcessWorker")
        self._conn.send(Open(session, spec))

    def abort(self, session: int) -> None:
        self._conn.send(Abort(session))

    def clip(self, session: int, start_s: float, end_s: float, path: str, index: int = -1) -> None:
        self._conn.send(Clip(session, start_s, end_s, path, index))

    def thin(self, session: int, share: float, whole: bool = False, phase: float = 0.0) -> None:
        self._conn.send(Thin(session, share, whole, phase))

    def poll(self, timeout: float):
        if self._dead:
            return Died("decode thread ended")
        if not self._conn.poll(timeout):
            return None
        message = self._conn.recv()
        if type(message) is tuple:  # a frame (protocol.py)
            message = FrameSent._make(message)
            layout, data = message.layout, message.data
            mvs = None if message.mvs is None else message.mvs[1]

            def take(host: HostMemory):
                if layout[0] == "bgr" and host.pinned:
                    pinned = host.empty(data.shape)
                    np.copyto(pinned, data)
                    return unpack(layout, pinned, host), mvs
                return unpack(layout, data, host), mvs

            return FrameReady(message.session, message.pts, message.ts, message.clock, message.decode_ms,
                              (layout[1], layout[2]), message.worker_drops, message.corrupt, message.thinned,
                              None, take, self._slots.release)
        if isinstance(message, SessionOpened):
            return Opened(message.session, message.info)
        if isinstance(message, SessionEnded):
            return Ended(*message)
        if isinstance(message, Crashed):
            self._dead = True
            return Died(f"decode thread failed: {message.message}")
        return message if isinstance(message, ClipDone) else None  # what became of a clip: the owner's

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Ask the thread to end and wait at most `grace_s`; a thread blocked inside FFmpeg is left
        to end on its own when FFmpeg's timeout fires (it is a daemon thread)."""
        if self._thread is not None and not self._dead:
            self._conn.send(QUIT)
            self._thread.join(grace_s)
        self._dead = True
