"""The loop a decode worker runs, in its process or on its thread (worker.py is the owner's side):
`serve` runs the sessions its owner asks for (protocol.py), each into an output that packs the
pictures for the worker's transport: `_RingOutput` into a process worker's shared `FrameRing`,
`DirectOutput` into buffers that a thread worker's owner is handed as they are.
`worker_process_main` is a worker process's entry point (worker.py says how such a process ends)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque

from .. import logs

from ..urls import mask_url
from .pixels import layout_bytes, pack, picture_layout
from .decode import DecodeShare
from .protocol import (CREDIT, QUIT, WAITING, Abort, Clip, ClipDone, Clock, Crashed, NeedRing, NewRing, NoRing,
                       Open, SessionEnded, SessionOpened, Thin)
from .ring import FrameRing
from .session import SessionOutput, StreamInfo


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
        #: the running session's `ClipRecorder`, when it records clips
        self.recorder = None
        #: what became of clips (`ClipDone`), settled on any thread, sent to the owner from this one
        self.clips_done: deque = deque()
        #: the running session's share of frames (`Thin`)
        self.thin = DecodeShare()
        #: the running session's clock as its owner keeps it (`Clock`: a live file's), or None
        self.clock_start: float | None = None

    def handle(self, message: tuple) -> None:
        if isinstance(message, Thin):
            if message.session == self.session:
                self.thin.share = message.share
                self.thin.by_groups(message.whole, message.phase)
        elif isinstance(message, Clock):
            if message.session == self.session:
                self.clock_start = message.start
        elif isinstance(message, Abort) and message.session == self.session:
            self.aborted = True
        elif isinstance(message, Clip):
            if message.session == self.session and self.recorder is not None:
                self.recorder.request(message.start_s, message.end_s, message.path, message.index)
            else:  # its connection has ended (or has not opened its stream yet)
                self.clip_done(message.path, "the stream's connection had ended when it was asked for", True)
        elif message == QUIT:
            self.quit = True
        elif isinstance(message, NewRing):
            ring_id, name, slots, slot_bytes = message
            if self.ring is not None:
                self.ring.close()
            self.ring, self.ring_id = FrameRing.attach(name, slots, slot_bytes), ring_id
        elif isinstance(message, NoRing) and message.session == self.session:
            self.refusal = message.line
            if self.ring is not None:  # the owner has retired it: the next session asks for a new one
                self.ring.close()
                self.ring = None

    def clip_done(self, path: str, reason: str | None, refused: bool = False) -> None:
        """A `ClipRecorder`'s `on_done` (any thread): sent with the next `send_clips_done`."""
        self.clips_done.append(ClipDone(path, reason, refused))

    def send_clips_done(self) -> None:
        """What became of clips since last sent (this thread only: the one that sends frames)."""
        while self.clips_done:
            self.conn.send(self.clips_done.popleft())

    def should_stop(self) -> bool:
        while self.conn.poll(0):
            self.handle(self.conn.recv())
        self.send_clips_done()
        return self.aborted or self.quit or self.refusal is not None

    def wait_for_credit(self) -> bool:
        """Say that every slot is full and block until the owner answers with a credit (its slots are
        free then); False if the session is to end instead. No timer: an abort or quit is a message
        too, and an owner that is gone closes the pipe (and the lifeline ends the process)."""
        self.conn.send(WAITING)
        while not (self.aborted or self.quit):
            message = self.conn.recv()
            if message == CREDIT:
                return True
            self.handle(message)
        return False


def serve(conn, make_output) -> None:
    """Run sessions as the owner asks, until it says quit or goes away (`conn` closes)."""
    control = _Control(conn)
    try:
        while not control.quit:
            message = conn.recv()
            if not isinstance(message, Open):
                control.handle(message)
                control.send_clips_done()  # a clip asked of a session that has ended: refused
                continue
            control.session, spec = message
            control.aborted, control.refused, control.refusal, control.recorder = False, 0, None, None
            control.thin, control.clock_start = DecodeShare(), None
            reason, text, detail = spec.run(make_output(conn, control, spec), control.should_stop)
            if control.refusal is not None:  # the owner had no room for its pictures
                reason, text = "refused", control.refusal
            if control.refused:
                detail = {**detail, "refused": control.refused}
            if control.thin.skipped:
                detail = {**detail, "thinned": control.thin.skipped}
            control.send_clips_done()  # the session's recorder has ended: every clip of it is settled
            conn.send(SessionEnded(control.session, reason, text, control.drops, control.corrupt, detail))
    finally:
        if control.ring is not None:
            control.ring.close()


class _Output(SessionOutput):
    """What both workers' outputs count the same way: rejected packets (`corrupt`), refused
    pictures, and packets skipped to catch up with a camera (counted with the drops)."""

    def __init__(self, conn, control: _Control, spec):
        self.conn, self.control, self.spec = conn, control, spec
        self.thin = control.thin

    def opened(self, info: StreamInfo) -> None:
        self.conn.send(SessionOpened(self.control.session, info))

    def rejected(self) -> None:
        self.control.corrupt += 1

    def clock_start(self) -> float | None:
        return self.control.clock_start

    def refused(self) -> None:
        self.control.refused += 1

    def skipped(self) -> None:
        self.control.drops += 1

    def recorder(self, stream):
        clips = getattr(self.spec, "clips", None)
        if clips is None:
            return None
        from .clips import ClipRecorder

        self.control.recorder = ClipRecorder.for_spec(stream, clips, self.control.clip_done)
        return self.control.recorder


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
        pack(picture, layout, control.ring.view(slot, size))
        mvs = None
        if motion_vectors is not None:
            if control.ring.write_extra(slot, size, motion_vectors):
                mvs = ("slot", motion_vectors.dtype, motion_vectors.shape)
            else:
                mvs = ("inline", motion_vectors)
        control.ring.publish(slot)
        decode_ms += (time.perf_counter() - started) * 1000.0
        # a FrameSent's fields, as a plain tuple (protocol.py)
        self.conn.send((control.session, layout, pts, ts, clock, decode_ms, mvs, control.drops, control.corrupt,
                        control.thin.skipped, position, control.ring_id, slot, None))

    def _wait_for_ring(self, slot_bytes: int) -> bool:
        """Ask the owner for a ring whose slots hold `slot_bytes`; False if the session ends first."""
        control = self.control
        asked = control.ring_id
        self.conn.send(NeedRing(control.session, slot_bytes))
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


class DirectOutput(_Output):
    """A thread worker's output: the packed picture itself, at most `RING_SLOTS` frames in flight
    (`control.slots`, a semaphore its owner releases; `control.buffers`, the `Buffers` it packs into)."""

    def frame(self, picture, pts, ts, clock, decode_ms, motion_vectors, position=None) -> None:
        control = self.control
        if not control.slots.acquire(blocking=False):
            control.drops += 1
            return
        started = time.perf_counter()
        layout = picture_layout(picture)
        data = control.buffers.get(layout_bytes(layout))
        pack(picture, layout, data)
        decode_ms += (time.perf_counter() - started) * 1000.0
        mvs = None if motion_vectors is None else ("inline", motion_vectors)
        # a FrameSent's fields, as a plain tuple (protocol.py): no position, ring or slot
        self.conn.send((control.session, layout, pts, ts, clock, decode_ms, mvs, control.drops, control.corrupt,
                        control.thin.skipped, None, 0, 0, data))


def worker_process_main(conn, lifeline) -> None:
    """A decode worker process's entry point. `lifeline`: the reading end of a pipe that only the
    owner's process holds open; when it closes, the owner is gone and the worker exits at once."""
    # Ctrl-C in a terminal, `docker stop` and systemd signal the whole process group: the owner
    # decides when a worker ends, after its own shutdown has ended the connections in order
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logs.setup(logging.WARNING)  # its warnings on stderr as the owner's are, control characters escaped
    threading.Thread(target=_exit_with_owner, args=(lifeline,), name="lifeline", daemon=True).start()
    try:
        serve(conn, _RingOutput)
    except (EOFError, OSError):  # the owner went away
        pass
    except BaseException as error:  # noqa: BLE001 - report in one line, never a traceback with a URL
        try:
            conn.send(Crashed(mask_url(f"{type(error).__name__}: {error}")))
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
