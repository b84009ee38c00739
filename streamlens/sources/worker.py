"""Decode workers: where a live source's connections are opened, read and decoded, away from the graph.

A `ProcessWorker` is a CPU worker process (the default): decoding and colour conversion run outside
the graph's GIL, frames come back through a shared-memory `FrameRing` (pixels are never pickled),
and a worker stuck inside FFmpeg can always be killed, so a stop or a reconnect never waits on the
network. A `ThreadWorker` runs the same loop on a thread of the graph's process (`decode: thread`):
no process to start, but the decode holds the GIL and a thread stuck in FFmpeg can only be left to
end on its own (FFmpeg's timeout bounds it).

Both speak the same small protocol with their owner (a `LiveSource`), one connection at a time:

    owner -> worker:  ("open", session, SessionSpec)   ("abort", session)   ("quit",)
                      ("ring", ring_id, name, slots, slot_bytes)      (process only: a new ring)
    worker -> owner:  ("opened", session, StreamInfo)   ("frame", session, ...)
                      ("ended", session, reason, message, drops, corrupt)   ("need_ring", slot_bytes)
                      ("crashed", message)

`poll()` turns what arrives into `Opened`, `FrameReady`, `Ended` or `Died`. A `FrameReady` must be
`take()`n or `discard()`ed before the next `poll()`: that frees its slot. The worker never blocks on
the owner: when every slot is full it drops the frame it holds (counted in `FrameReady.worker_drops`;
packets its decoder rejected in `FrameReady.corrupt`; both counters also come with `Ended`, and
restart with each worker). The decoder's motion vectors travel in the same slot, after the image (or
in the message when they do not fit).

A worker process is ended by its owner only: it ignores SIGINT and SIGTERM, which a terminal's
Ctrl-C, `docker stop` or systemd send to the whole process group, so that the owner can end its
connections in order. It exits by itself when the owner's process is gone (its lifeline pipe
closes), even while blocked inside FFmpeg. The owner checks, before it makes a ring, that shared
memory has room for it, and reserves the ring's memory at once: a full /dev/shm is one clear
`SourceError`, never a worker killed by SIGBUS when it writes a frame.

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
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import SourceError
from ..urls import mask_url
from .host_memory import HostMemory
from .ring import SHM_DIR, FrameRing, NoRoom, free_bytes, ring_bytes
from .session import SessionOutput, SessionSpec, StreamInfo, run_session

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
    shape: tuple[int, ...]
    #: frames the worker dropped so far because every slot was full
    worker_drops: int
    #: packets the worker's decoder rejected so far
    corrupt: int
    _take: Any = field(repr=False, default=None)
    _release: Any = field(repr=False, default=None)

    def take(self, host: HostMemory) -> tuple[np.ndarray, np.ndarray | None]:
        """The image (in `host` memory) and the motion vectors; frees the slot."""
        try:
            return self._take(host)
        finally:
            self.discard()

    def discard(self) -> None:
        if self._release is not None:
            release, self._release = self._release, None
            release()


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

    def should_stop(self) -> bool:
        while self.conn.poll(0):
            self.handle(self.conn.recv())
        return self.aborted or self.quit


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
            control.aborted = False
            reason, text = run_session(spec, make_output(conn, control, spec), control.should_stop)
            conn.send(("ended", control.session, reason, text, control.drops, control.corrupt))
    finally:
        if control.ring is not None:
            control.ring.close()


class _RingOutput(SessionOutput):
    """A process worker's output: pixels into the shared ring, a small message on the pipe."""

    def __init__(self, conn, control: _Control, spec: SessionSpec):
        self.conn, self.control, self.spec = conn, control, spec

    def opened(self, info: StreamInfo) -> None:
        self.conn.send(("opened", self.control.session, info))

    def rejected(self) -> None:
        self.control.corrupt += 1

    def frame(self, image, pts, ts, clock, decode_ms, motion_vectors) -> None:
        control = self.control
        height, width = image.shape[:2]
        need = image.nbytes + (_mv_budget(width, height) if self.spec.export_mvs else 0)
        if control.ring is None or control.ring.slot_bytes < need:
            if not self._wait_for_ring(need):
                return
        slot = control.ring.claim()
        if slot is None:
            control.drops += 1
            return
        control.ring.write_image(slot, image)
        mvs = None
        if motion_vectors is not None:
            if control.ring.write_extra(slot, image.nbytes, motion_vectors):
                mvs = ("slot", motion_vectors.dtype, motion_vectors.shape)
            else:
                mvs = ("inline", motion_vectors)
        control.ring.publish(slot)
        self.conn.send(("frame", control.session, control.ring_id, slot, image.shape, pts, ts, clock, decode_ms,
                        mvs, control.drops, control.corrupt))

    def _wait_for_ring(self, slot_bytes: int) -> bool:
        """Ask the owner for a ring whose slots hold `slot_bytes`; False if the session ends first."""
        control = self.control
        asked = control.ring_id
        self.conn.send(("need_ring", slot_bytes))
        while control.ring_id == asked:
            if control.aborted or control.quit:
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
    return (f"{stream}: not enough shared memory for the camera's frame ring ({RING_SLOTS} frames): it needs "
            f"{needed} bytes, {path} has {free} free; give the container more (docker run --shm-size={suggest}m, "
            f"or shm_size in compose; each camera like this one takes {needed / mib:.1f} MiB) or run fewer or "
            f"smaller cameras")


# -- the owner's side -----------------------------------------------------------------------------

_context_lock = threading.Lock()


def _process_context():
    """forkserver where there is one: a fork of a small, single-threaded server that has this module
    loaded already (fast, memory shared, and safe in a process full of threads); else spawn."""
    with _context_lock:
        if "forkserver" in multiprocessing.get_all_start_methods():
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload([__name__])
            return ctx
        return multiprocessing.get_context("spawn")


class ProcessWorker:
    """A decode worker process and its frame ring; owned by one live source."""

    def __init__(self, name: str, host: HostMemory | None = None):
        self.name = name
        self.host = host
        self._process = None
        self._conn = None
        self._lifeline = None
        self._rings: dict[int, FrameRing] = {}
        self._ring_ids = itertools.count(1)
        self._dead = False

    def start(self) -> None:
        ctx = _process_context()
        self._conn, child = ctx.Pipe(duplex=True)
        lifeline, self._lifeline = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=worker_process_main, args=(child, lifeline), daemon=True,
                                    name=f"streamlens-decode-{self.name}")
        self._process.start()
        child.close()
        lifeline.close()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def alive(self) -> bool:
        return not self._dead and self._process is not None and self._process.is_alive()

    def open(self, session: int, spec: SessionSpec) -> None:
        self._send(("open", session, spec))

    def abort(self, session: int) -> None:
        self._send(("abort", session))

    def _send(self, message: tuple) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError):
            self._dead = True  # noticed by poll()

    def poll(self, timeout: float):
        """The next event, or None if nothing arrived within `timeout` seconds. Raises `SourceError`
        when the ring the worker asks for does not fit in shared memory."""
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
            self._new_ring(message[1])
            return None
        if kind == "crashed":
            self._dead = True
            return Died(f"decode worker failed: {message[1]}")
        return None

    def _new_ring(self, slot_bytes: int) -> None:
        # Every frame of an older ring came before this request and has been taken: retire them.
        for ring in self._rings.values():
            ring.close()
        self._rings.clear()
        ring_id = next(self._ring_ids)
        needed = ring_bytes(RING_SLOTS, slot_bytes)
        check_shared_memory(self.name, needed)
        try:
            ring = FrameRing.create(RING_SLOTS, slot_bytes)
        except NoRoom as error:  # taken meanwhile (other cameras start at the same time)
            raise SourceError(_no_room(self.name, needed, error.free, SHM_DIR)) from None
        self._rings[ring_id] = ring
        self._send(("ring", ring_id, ring.name, ring.slots, ring.slot_bytes))

    def _frame_ready(self, message: tuple) -> FrameReady:
        _, session, ring_id, slot, shape, pts, ts, clock, decode_ms, mvs, drops, corrupt = message
        ring = self._rings[ring_id]

        def take(host: HostMemory):
            image = host.empty(shape)
            ring.read_image(slot, image)
            if mvs is None:
                return image, None
            if mvs[0] == "slot":
                return image, ring.read_extra(slot, image.nbytes, mvs[1], mvs[2])
            return image, mvs[1]

        return FrameReady(session, pts, ts, clock, decode_ms, tuple(shape), drops, corrupt, take,
                          lambda: ring.release(slot))

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


class _DirectOutput(SessionOutput):
    """A thread worker's output: the decoded array itself, at most `RING_SLOTS` frames in flight."""

    def __init__(self, conn, control: _Control, spec: SessionSpec):
        self.conn, self.control = conn, control

    def opened(self, info: StreamInfo) -> None:
        self.conn.send(("opened", self.control.session, info))

    def rejected(self) -> None:
        self.control.corrupt += 1

    def frame(self, image, pts, ts, clock, decode_ms, motion_vectors) -> None:
        control = self.control
        if not control.slots.acquire(blocking=False):
            control.drops += 1
            return
        self.conn.send(("frame", control.session, image, pts, ts, clock, decode_ms, motion_vectors,
                        control.drops, control.corrupt))


class ThreadWorker:
    """The same decode loop on a daemon thread of this process (`decode: thread`)."""

    def __init__(self, name: str, host: HostMemory | None = None):
        self.name = name
        self._thread: threading.Thread | None = None
        self._conn: _QueueEnd | None = None
        self._slots = threading.BoundedSemaphore(RING_SLOTS)
        self._dead = False

    def start(self) -> None:
        to_worker, to_owner = queue.SimpleQueue(), queue.SimpleQueue()
        self._conn = _QueueEnd(to_owner, to_worker)
        worker_end = _QueueEnd(to_worker, to_owner)
        slots = self._slots

        def output(conn, control, spec):
            control.slots = slots
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

    def open(self, session: int, spec: SessionSpec) -> None:
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
            _, session, image, pts, ts, clock, decode_ms, mvs, drops, corrupt = message
            slots = self._slots

            def take(host: HostMemory):
                if not host.pinned:
                    return image, mvs
                pinned = host.empty(image.shape)
                np.copyto(pinned, image)
                return pinned, mvs

            return FrameReady(session, pts, ts, clock, decode_ms, image.shape, drops, corrupt, take, slots.release)
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
