"""The decoder's motion vectors in the layout of `Frame.motion_vectors`, for every source that decodes.

FFmpeg computes motion vectors anyway when it decodes H.264, HEVC or MPEG-2/4, and hands them out as
frame side data `MOTION_VECTORS` when the decoder is opened with `flags2=+export_mvs`. A source turns
them into a compact float32 array, one row per coded block: `x, y, dx, dy` = the block's centre on
this frame and how far its content moved per decoded frame, in source pixels (the `mv` tracker's
input, see `streamlens.track.motion.vectors`).

Example:
    >>> distance = ReferenceDistance()
    >>> [distance.step(t, i) for i, t in enumerate([1, 3, 2, 3, 2])]   # I B P B P (FFmpeg's pict_type)
    [1, 1, 2, 1, 2]
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba import njit

#: FFmpeg's AVPictureType of the frames later ones are predicted from: I, P, SI, SP
ANCHOR_PICTURES = (1, 2, 5, 6)
#: FFmpeg's AVPictureType of a B-frame
B_PICTURE = 3
#: the record PyAV's `MotionVectors.to_ndarray()` gives (FFmpeg's AVMotionVector)
MV_DTYPE = np.dtype({"names": ["source", "w", "h", "src_x", "src_y", "dst_x", "dst_y", "flags", "motion_x",
                               "motion_y", "motion_scale"],
                     "formats": ["<i4", "u1", "u1", "<i2", "<i2", "<i2", "<i2", "<u8", "<i4", "<i4", "<u2"],
                     "offsets": [0, 4, 5, 6, 8, 10, 12, 16, 24, 28, 32], "itemsize": 40, "aligned": True})


def frame_motion_vectors(frame, distance: int = 1) -> np.ndarray | None:
    """A decoded `av.VideoFrame`'s `MOTION_VECTORS` side data in `Frame.motion_vectors`' layout, or
    None (an I-frame, a decoder opened without `flags2=+export_mvs`, or a B-frame whose every vector
    is zero: see `carries_motion`). `distance`: see `ReferenceDistance`. The frame's side data cannot
    be read again afterwards (see `release_side_data`)."""
    container = frame.side_data
    side_data = container.get("MOTION_VECTORS")
    vectors = None
    if side_data is not None:
        records = _record_bytes(side_data)
        if carries_motion(records, frame.pict_type):
            vectors = _past_vectors(records, int(distance))
        del records
    del side_data
    release_side_data(frame, container)
    return vectors


#: whether FFmpeg's side data bytes are laid out as `MV_DTYPE` here (None: not looked at yet)
_BYTES_AS_RECORDS: bool | None = None


def _record_bytes(side_data) -> np.ndarray:
    """The side data's records as `MV_DTYPE` bytes: its own bytes (no copy) where they are laid out
    so, as PyAV's copy of them into a record array reads them (checked on the first frame), else
    that copy (`_as_record_bytes`). The copy costs about as much as turning the records into vectors
    (37 us a 720p frame of 3,900 blocks)."""
    global _BYTES_AS_RECORDS
    try:
        data = np.frombuffer(side_data, np.uint8)
    except (TypeError, ValueError):  # no buffer to read
        data = None
    if data is not None and len(data) % MV_DTYPE.itemsize == 0:
        if _BYTES_AS_RECORDS is None:
            raw = side_data.to_ndarray()
            _BYTES_AS_RECORDS = raw.dtype == MV_DTYPE and raw.tobytes() == data.tobytes()
        if _BYTES_AS_RECORDS:
            return data
    return _as_record_bytes(side_data.to_ndarray())


def _as_record_bytes(raw: np.ndarray) -> np.ndarray:
    """FFmpeg's records as PyAV gives them (`to_ndarray()`) as contiguous `MV_DTYPE` bytes, copied
    field by field where laid out otherwise."""
    if raw.dtype != MV_DTYPE or not raw.flags.c_contiguous:
        records = np.zeros(len(raw), MV_DTYPE)
        for name in ("source", "dst_x", "dst_y", "motion_x", "motion_y", "motion_scale"):
            records[name] = raw[name]
        raw = records
    return raw.view(np.uint8).reshape(-1)


def carries_motion(records: np.ndarray, pict_type: int) -> bool:
    """Whether a frame's vectors (FFmpeg's records, as `MV_DTYPE` bytes) say anything of motion:
    False for a B-frame whose every vector, past and future, is exactly zero. FFmpeg's MPEG-4 Part 2
    decoder exports its B-frames so whatever moved (a moving square drawn and encoded with B-frames:
    every vector of every B-frame zero, some moving on the P-frames; tests/test_track_motion.py), and
    taken as measured they would stop every box on two frames in three; as a frame without vectors
    the tracker carries the boxes by their velocity. (A B-frame where nothing moved says no more
    than its neighbours.)

    Example:
        >>> still = np.zeros(2, MV_DTYPE).view(np.uint8)   # two blocks, neither moved
        >>> carries_motion(still, 3), carries_motion(still, 2)   # a B-frame, a P-frame
        (False, True)
    """
    return int(pict_type) != B_PICTURE or _any_motion(records)


def release_side_data(frame, container) -> bool:
    """Break the reference cycle PyAV makes when a frame's side data is read, so that the decoded
    picture is freed as soon as the last reference to the frame goes; True if it was broken.

    PyAV (up to 18.1 at least) caches the `SideDataContainer` on the frame, and the container, and
    each side data in it, points back at the frame. Only Python's cycle collector frees such a
    frame, and it runs rarely: it counts objects, not the megabytes a picture holds, so hundreds of
    decoded pictures piled up (about 250 MB a pass of a 720p clip). Here the container's list and
    dict of side data are emptied and its pointer to the frame is set to None. That pointer is a
    C field the container does not expose: it is written only where the container's layout is the
    one checked here (the frame at the first field, then a list and a dict); elsewhere nothing is
    touched and False is returned, and the runtime then collects cycles itself (`SIDE_DATA_CYCLE`).
    """
    global SIDE_DATA_CYCLE
    base = id(container)
    if not _container_layout_known(type(container)):
        SIDE_DATA_CYCLE = True
        return False
    fields = [ctypes.c_void_p.from_address(base + _OBJECT_HEAD + k * _POINTER).value for k in range(3)]
    if fields[0] != id(frame):
        SIDE_DATA_CYCLE = True
        return False
    by_index = ctypes.cast(fields[1], ctypes.py_object).value
    by_type = ctypes.cast(fields[2], ctypes.py_object).value
    if type(by_index) is not list or type(by_type) is not dict:
        SIDE_DATA_CYCLE = True
        return False
    by_index.clear()  # the side data objects, each pointing at the frame, go
    by_type.clear()
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(None))
    ctypes.c_void_p.from_address(base + _OBJECT_HEAD).value = id(None)
    ctypes.pythonapi.Py_DecRef(ctypes.py_object(frame))  # the reference the container held
    return True


#: True once a frame's side data could not be released (an unknown PyAV layout): the reference
#: cycles stay, and a pipeline reading motion vectors collects them itself (graph/run/pipeline.py)
SIDE_DATA_CYCLE = False
_POINTER = ctypes.sizeof(ctypes.c_void_p)
_OBJECT_HEAD = 2 * _POINTER  # a PyObject's reference count and type
_layouts: dict[type, bool] = {}


def _container_layout_known(kind: type) -> bool:
    """Whether PyAV's side data container class holds the frame, a list and a dict, in that
    order, right after the object's head, and nothing more (its C base class's size)."""
    known = _layouts.get(kind)
    if known is None:
        base = next((k for k in kind.__mro__ if k.__name__ == "_SideDataContainer"), None)
        known = _layouts[kind] = base is not None and base.__basicsize__ == _OBJECT_HEAD + 3 * _POINTER
    return known


def vectors_from_side_data(raw: np.ndarray, distance: int = 1) -> np.ndarray:
    """FFmpeg's `AVMotionVector` records (PyAV's `MotionVectors.to_ndarray()`) to the compact
    `(N, 4)` float32 `x, y, dx, dy` layout of `Frame.motion_vectors`: motion per frame.

    FFmpeg gives `dst` (the block's centre here) and the exact offset to where the block comes from
    in its reference frame, `motion_x / motion_scale` = src - dst, and only the direction of that
    reference (`source` -1: a past frame, +1: a future one), not how many frames away it is. Blocks
    predicted from the past are kept and their motion divided by `distance`, the frames since the
    previous I- or P-frame (the reference of a P-frame, and the past reference of a B-frame, in
    common encoder set-ups); blocks predicted from the future are left out (the next anchor frame is
    not known yet when a B-frame comes out). Blocks that an encoder predicted from further back
    (several reference frames) read too fast; the tracker takes medians.

    Example:
        >>> raw = np.zeros(2, [("source", "i4"), ("dst_x", "i2"), ("dst_y", "i2"), ("motion_x", "i4"),
        ...                    ("motion_y", "i4"), ("motion_scale", "u2")])
        >>> raw[0] = (-1, 40, 24, -20, 4, 4)     # came from 5 px to the left, 1 px below, 2 frames back
        >>> raw[1] = (1, 56, 24, 8, 0, 4)        # predicted from a future frame: left out
        >>> vectors_from_side_data(raw, distance=2).tolist()
        [[40.0, 24.0, 2.5, -0.5]]
    """
    return _past_vectors(_as_record_bytes(raw), int(distance))  # one pass over the bytes


def warm_up() -> None:
    """Load the compiled `_past_vectors` now rather than on a stream's first P-frame: that first
    call loads numba's machinery and the function from its cache, most of a second on a 2-core
    machine (more with several workers starting at once), and a live stream's frames pile up
    behind it and come out too old. Called by the tracker's warm-up (track/kernels.py) and in the
    decode workers' forkserver before it forks any worker (preload.py)."""
    copied = np.zeros(MV_DTYPE.itemsize, np.uint8)  # as PyAV's copy comes
    shared = copied.copy()
    shared.flags.writeable = False  # as the side data's own bytes come (`_record_bytes`): compiled apart
    for records in (copied, shared):
        _past_vectors(records, 1)
        _any_motion(records)


class ReferenceDistance:
    """Frames since the previous I- or P-frame, in presentation order: call `step(pict_type, index)`
    for every decoded frame in order (frames a rate cap drops too), with the frame's `pict_type`
    (PyAV: `frame.pict_type`, an int) and its index."""

    def __init__(self):
        self.anchor: int | None = None

    def step(self, pict_type: int, index: int) -> int:
        distance = 1 if self.anchor is None else max(1, index - self.anchor)
        if int(pict_type) in ANCHOR_PICTURES:
            self.anchor = index
        return distance


@njit(cache=True)
def _any_motion(records):
    """Whether any of FFmpeg's `AVMotionVector` records (their bytes, as `_past_vectors` reads them)
    moves at all (`carries_motion`)."""
    i32 = records.view(np.int32)
    for i in range(len(records) // 40):
        if i32[10 * i + 6] != 0 or i32[10 * i + 7] != 0:  # motion_x, motion_y
            return True
    return False


@njit(cache=True)
def _past_vectors(records, distance):
    """FFmpeg's `AVMotionVector` records (their bytes, 40 a record, contiguous, little-endian as
    `MV_DTYPE` lays them out) to `(N, 4)` float32 `x, y, dx, dy` per frame, for the blocks predicted
    from the past (`source` < 0): see `vectors_from_side_data`. Compiled: it runs on every frame."""
    i32 = records.view(np.int32)  # a record is 10 int32, 20 int16 or uint16
    i16 = records.view(np.int16)
    u16 = records.view(np.uint16)
    count = len(records) // 40
    n = 0
    for i in range(count):
        if i32[10 * i] < 0:  # source
            n += 1
    out = np.empty((n, 4), np.float32)
    frames = np.float32(max(distance, 1))
    j = 0
    for i in range(count):
        if i32[10 * i] < 0:
            scale = np.float32(-1.0) / (np.float32(max(int(u16[20 * i + 16]), 1)) * frames)  # motion_scale
            out[j, 0] = i16[20 * i + 5]  # dst_x
            out[j, 1] = i16[20 * i + 6]  # dst_y
            out[j, 2] = i32[10 * i + 6] * scale  # motion_x
            out[j, 3] = i32[10 * i + 7] * scale  # motion_y
            j += 1
    return out
