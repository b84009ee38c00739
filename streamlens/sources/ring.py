"""A ring of frame slots in shared memory: how a decode worker process hands pixels to the graph.

The parent (the graph's process) creates the ring, owns it and unlinks it; the worker attaches by
name and writes a decoded frame into a free slot; a small message on a pipe says which slot holds
what; the parent copies the pixels out (one memcpy) and frees the slot at once. Pixels are never
pickled.

Layout: one flag byte per slot (0 free, 1 full), padded to 64 bytes, then the slots. A slot holds
the picture (I420 planes and a grey sample, or BGR for other pixel formats: see pixels.py) and,
after it, the frame's motion vectors when they fit. Each flag has one writer per transition: the
worker sets it to 1 after it filled the slot, the parent sets it to 0 after it copied the slot out,
so no lock is needed. The parent frees a slot as soon as it has copied it, so a worker rarely finds
the ring full; when it does, a camera's worker drops the frame it holds (a live stream keeps the
freshest frames) and counts it, and a file's waits until the parent says a slot is free.

A segment is named `streamlens-<owner's pid>-<random>`, so one left in /dev/shm says whose it was
(multiprocessing's resource tracker removes those of an owner killed with SIGKILL, unless it was
killed too).

The segment's memory is reserved when it is made (`posix_fallocate` on its file in /dev/shm): a
tmpfs that is full, as Docker's 64 MB /dev/shm soon is, would otherwise hand out the segment and
kill with SIGBUS whichever process first touches a page it cannot back. Here `create()` raises
`NoRoom` instead.

Why copy instead of lending the slot to the graph: a frame lives on in queues, the tracker and
the sinks for an unbounded time; a lent slot would tie the worker's progress to the slowest sink,
and a segment unmapped under a live array would crash the process. One copy of a 1080p frame
costs about a millisecond.

Example:
    >>> import numpy as np
    >>> ring = FrameRing.create(slots=2, slot_bytes=2 * 4 * 3)
    >>> worker = FrameRing.attach(ring.name, 2, 2 * 4 * 3)         # in the worker
    >>> slot = worker.claim()
    >>> worker.view(slot, 24)[:] = 7; worker.publish(slot)
    >>> out = np.empty((2, 4, 3), np.uint8)
    >>> ring.read_image(slot, out); ring.release(slot)
    >>> int(out.sum()), worker.claim() is not None
    (168, True)
    >>> worker.close(); ring.close()
"""

from __future__ import annotations

import errno
import os
import secrets
from multiprocessing import resource_tracker, shared_memory

import numpy as np

#: bytes before the first slot: one flag per slot, padded to a cache line
HEADER_ALIGN = 64
#: where POSIX shared memory lives on Linux
SHM_DIR = "/dev/shm"
#: how a ring's segment is named: this, the owner's pid, a dash, 8 random hex digits
NAME_PREFIX = "streamlens-"


def _header_bytes(slots: int) -> int:
    return -(-slots // HEADER_ALIGN) * HEADER_ALIGN


def ring_bytes(slots: int, slot_bytes: int) -> int:
    """The size of the segment that holds a ring of `slots` slots of `slot_bytes` bytes."""
    return _header_bytes(slots) + slots * slot_bytes


def free_bytes(path: str = SHM_DIR) -> int:
    """Bytes an unprivileged process may still allocate on the file system at `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def remove_rings_of(pid: int, path: str = SHM_DIR, *, tracked_here: bool = False) -> list[str]:
    """Remove the rings that the process `pid` made and left behind (it was killed: it could not
    remove them itself); returns their names. Only for a process that has ended. `tracked_here`:
    `pid` registered its rings with this process's resource tracker (a child started by `spawn`
    shares its parent's), which is told they are gone, so that it does not warn of them as leaked
    and try to remove them again when this process ends.

    Example:
        >>> remove_rings_of(2 ** 22 + 1)   # no such process made any
        []
    """
    prefix = f"{NAME_PREFIX}{pid}-"
    removed = []
    try:
        names = [n for n in os.listdir(path) if n.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        try:
            os.unlink(os.path.join(path, name))
            removed.append(name)
        except OSError:
            continue
        if tracked_here:
            resource_tracker.unregister(f"/{name}", "shared_memory")
    return removed


class NoRoom(OSError):
    """Shared memory has no room for a ring: `needed` bytes, `free` left."""

    def __init__(self, needed: int, free: int):
        super().__init__(errno.ENOSPC, f"no room in shared memory for {needed} bytes ({free} free)")
        self.needed, self.free = needed, free


class FrameRing:
    """`slots` slots of `slot_bytes` bytes each in one shared memory segment.

    `create()` in the parent (the owner: `close()` unlinks), `attach()` in the worker.
    """

    def __init__(self, shm: shared_memory.SharedMemory, slots: int, slot_bytes: int, owner: bool):
        self._shm = shm
        self.name = shm.name
        self.slots = slots
        self.slot_bytes = slot_bytes
        self.owner = owner
        self._header = _header_bytes(slots)
        self._flags = np.ndarray((slots,), np.uint8, shm.buf, 0)
        self._next = 0

    @classmethod
    def create(cls, slots: int, slot_bytes: int) -> FrameRing:
        if slots < 1 or slot_bytes < 1:
            raise ValueError(f"a ring needs at least one slot of at least one byte, got {slots} x {slot_bytes}")
        size = ring_bytes(slots, slot_bytes)
        shm = shared_memory.SharedMemory(name=f"{NAME_PREFIX}{os.getpid()}-{secrets.token_hex(4)}", create=True,
                                         size=size)
        try:
            _reserve(shm, size)
        except BaseException:
            shm.close()
            shm.unlink()
            raise
        ring = cls(shm, slots, slot_bytes, owner=True)
        ring._flags[:] = 0
        return ring

    @classmethod
    def attach(cls, name: str, slots: int, slot_bytes: int) -> FrameRing:
        # Attaching registers the name with the resource tracker the parent shares with us; that
        # is the parent's own registration, which its unlink removes: nothing to undo here.
        return cls(shared_memory.SharedMemory(name=name), slots, slot_bytes, owner=False)

    def _slot(self, slot: int, offset: int, nbytes: int) -> memoryview:
        start = self._header + slot * self.slot_bytes + offset
        return self._shm.buf[start:start + nbytes]

    # -- the worker's side ---------------------------------------------------------------------

    def claim(self) -> int | None:
        """A free slot to write into, round-robin, or None when every slot is full."""
        for step in range(self.slots):
            slot = (self._next + step) % self.slots
            if self._flags[slot] == 0:
                self._next = (slot + 1) % self.slots
                return slot
        return None

    def view(self, slot: int, nbytes: int) -> np.ndarray:
        """The slot's first `nbytes` bytes as a writable 1-D uint8 array, to write the picture into.
        Drop it before `close()` (a view keeps the segment mapped)."""
        return np.ndarray((nbytes,), np.uint8, self._slot(slot, 0, nbytes))

    def write_extra(self, slot: int, offset: int, data: np.ndarray) -> bool:
        """Copy `data`'s bytes into the slot at `offset` (after the picture); False if they don't fit."""
        if offset + data.nbytes > self.slot_bytes:
            return False
        self._slot(slot, offset, data.nbytes)[:] = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        return True

    def publish(self, slot: int) -> None:
        """Mark the slot full: its message may go to the parent now."""
        self._flags[slot] = 1

    # -- the parent's side ---------------------------------------------------------------------

    def read_image(self, slot: int, out: np.ndarray) -> None:
        """Copy the slot's picture into `out` (its size says how many bytes)."""
        np.copyto(out, np.ndarray(out.shape, np.uint8, self._slot(slot, 0, out.nbytes)))

    def read_extra(self, slot: int, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A copy of the array of `dtype` and `shape` stored at `offset` in the slot."""
        count = int(np.prod(shape))
        nbytes = np.dtype(dtype).itemsize * count
        return np.frombuffer(self._slot(slot, offset, nbytes), dtype, count).reshape(shape).copy()

    def release(self, slot: int) -> None:
        """The slot was copied out: the worker may reuse it."""
        self._flags[slot] = 0

    def close(self) -> None:
        """Unmap the segment; the owner also removes it. Safe to call twice."""
        if self._shm is None:
            return
        self._flags = None
        shm, self._shm = self._shm, None
        shm.close()
        if self.owner:
            try:
                shm.unlink()
            except FileNotFoundError:
                pass


def _reserve(shm: shared_memory.SharedMemory, size: int) -> None:
    """Back every page of the segment now; `NoRoom` when its file system cannot. (Where the segment is
    not a file in `SHM_DIR`, or the file system cannot reserve, pages are found when first written.)"""
    path = os.path.join(SHM_DIR, shm.name.lstrip("/"))
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise NoRoom(size, free_bytes(SHM_DIR)) from None
    finally:
        os.close(fd)
