"""How a decoded picture crosses from a decode worker to its owner (see worker.py): the layout that
the frame message names, and the bytes it takes in a ring's slot or a thread worker's buffer.

A picture crosses as the decoder made it: yuv420p and yuvj420p as I420 planes (Y, then U, then V,
tightly packed: half the bytes of BGR), followed by the scene-cut grey sample (`thumbnail_step`),
made here so the graph need not; the owner gets a `YuvPicture` (frame.py), converted to BGR only
when something reads `Frame.image`. Other pixel formats are converted to BGR here and cross as
such. The decoder's motion vectors travel in the same slot, after the picture (or in the message
when they do not fit).
"""

from __future__ import annotations

import sys

import numpy as np

from ..pictures import I420_FORMATS, YuvPicture, i420_bytes, thumbnail_step, to_bgr
from .host_memory import HostMemory


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


def pack(picture, layout: tuple, out: np.ndarray) -> None:
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


def unpack(layout: tuple, data: np.ndarray, host: HostMemory) -> YuvPicture | np.ndarray:
    """The picture `pack` wrote into `data`, which it keeps (no copy): a `YuvPicture` whose planes
    and sample are views of `data`, or the BGR image."""
    if layout[0] == "bgr":
        return data.reshape(layout[2], layout[1], 3)
    _, width, height, name, colorspace, color_range, step = layout
    planes = i420_bytes(width, height)
    return YuvPicture(data[:planes], width, height, name, colorspace, color_range,
                      sample=(step, data[planes:].reshape(_sample_shape(layout))),
                      allocate=host.empty if host.pinned else None)


class Buffers:
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
