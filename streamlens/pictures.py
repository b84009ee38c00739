"""Decoded pictures and their pixels: the I420 planes a decode worker hands over (`YuvPicture`), and
their conversion to BGR, whole (`to_bgr`) or straight at the size a detector needs (`scaled_bgr`).
`Frame` (frame.py) carries one and converts it when asked; frame.py names all of these too.
"""

from __future__ import annotations

import threading

import numpy as np

_converters = threading.local()


def _converter():
    """This thread's PyAV `VideoReformatter`, made at its first use (see `to_bgr`)."""
    converter = getattr(_converters, "converter", None)
    if converter is None:
        from av.video.reformatter import VideoReformatter

        converter = _converters.converter = VideoReformatter()
    return converter


def to_bgr(picture, threads: int = 0) -> np.ndarray:
    """A decoded PyAV `VideoFrame` (or a `YuvPicture`: see there) as an H x W x 3 BGR uint8 array;
    `threads`: swscale's, 0 for one per CPU (PyAV's default), 1 where many processes convert side by
    side (a decode worker that sends BGR).

    `picture.to_ndarray(format="bgr24")` makes a new converter for each picture, and since PyAV 17
    a converter starts its own pool of swscale threads (one per CPU): each conversion would set up a
    context and start threads. Here each thread keeps one converter, whose context and threads are
    reused as long as the pictures' size and format stay the same (on 2 cores, a 720p conversion
    took 2.0 ms of CPU against 2.2, medians of alternating runs; more threads are started where there
    are more cores).
    """
    if isinstance(picture, YuvPicture):
        return picture.to_bgr(threads)
    return _converter().reformat(picture, format="bgr24", threads=threads).to_ndarray()


#: how `scaled_bgr` interpolates: swscale's area averaging (the mean of the source pixels each output
#: pixel covers), the closest of its filters to the full conversion and OpenCV's bilinear resize on
#: the detector's inputs measured (tools/results/scaled_input.md)
SCALE_INTERPOLATION = "AREA"


def scaled_bgr(picture, width: int, height: int) -> np.ndarray:
    """A decoded PyAV `VideoFrame` or a `YuvPicture` as `height` x `width` x 3 BGR uint8, scaled and
    converted by one swscale pass on one thread (this thread's converter, see `to_bgr`)."""
    if isinstance(picture, YuvPicture):
        picture = picture.av_frame()
    return _converter().reformat(picture, format="bgr24", width=width, height=height,
                              interpolation=SCALE_INTERPOLATION, threads=1).to_ndarray()


#: pixel formats whose first plane is 8-bit luma
_LUMA_FIRST = frozenset({"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "nv12", "nv21",
                         "yuv411p", "yuv410p", "yuv440p", "gray"})


#: scene cuts: about how many pixels wide a frame's thumbnail is (see graph/schedule/keyframes.py)
THUMBNAIL_WIDTH = 64


def thumbnail_step(width: int) -> int:
    """The pixel step that samples a frame `width` wide down to about twice `THUMBNAIL_WIDTH`: the
    `grey_sample` a scene-cut test reads on every frame.

    Example:
        >>> [thumbnail_step(w) for w in (1280, 1920, 640, 100)]
        [10, 15, 5, 1]
    """
    return max(1, width // (2 * THUMBNAIL_WIDTH))


#: the pixel formats that cross from a decode worker as I420 planes (others cross as BGR)
I420_FORMATS = frozenset({"yuv420p", "yuvj420p"})


def i420_bytes(width: int, height: int) -> int:
    """Bytes of a `width` x `height` picture as I420: the luma plane, then two chroma planes of
    ceil(width/2) x ceil(height/2)."""
    return width * height + 2 * ((width + 1) // 2) * ((height + 1) // 2)


class YuvPicture:
    """A decoded 4:2:0 picture as I420, the form in which a decode worker hands it over: one
    contiguous uint8 buffer `data` of `i420_bytes(width, height)`, Y then U then V, tightly packed,
    with `y`, `u`, `v` as 2-D views of it (chroma ceil(w/2) x ceil(h/2)).

    `format` ("yuv420p" or "yuvj420p"), `colorspace` and `color_range` are the decoder's (FFmpeg's
    numbers, as PyAV gives them): `to_bgr()` converts with swscale as PyAV does the decoder's own
    picture, through a PyAV frame over `data` (some sizes: a copy of the planes), so the pixels are
    the thread path's, at the same CPU (OpenCV's I420 conversion, a few levels off swscale's, saves
    at most 0.1 ms of a 1080p frame, and only on one thread: see tools/results/decode.md).
    `sample`, when the worker made it: `(step, grey_sample(step))`, contiguous. `allocate(shape)`
    makes the BGR array (pinned host memory when a CUDA detector reads it); None: as PyAV makes it.

    Example:
        >>> picture = YuvPicture(np.full(i420_bytes(4, 2), 128, np.uint8), 4, 2)
        >>> picture.y.shape, picture.u.shape, picture.to_bgr().shape
        ((2, 4), (1, 2), (2, 4, 3))
    """

    __slots__ = ("data", "width", "height", "format", "colorspace", "color_range", "y", "u", "v", "sample",
                 "allocate")

    def __init__(self, data: np.ndarray, width: int, height: int, format: str = "yuv420p", colorspace: int = 2,
                 color_range: int = 0, sample: tuple[int, np.ndarray] | None = None, allocate=None):
        self.data, self.width, self.height = data, width, height
        self.format, self.colorspace, self.color_range = format, colorspace, color_range
        self.y, self.u, self.v = _planes(data, width, height)
        self.sample = sample
        self.allocate = allocate

    @staticmethod
    def pack(picture, out: np.ndarray) -> None:
        """Copy a decoded PyAV `VideoFrame` (one of `I420_FORMATS`) into `out`, 1-D uint8 of
        `i420_bytes(width, height)`, as I420 (the decoder's rows are padded: they are packed here)."""
        for plane, into in zip(picture.planes, _planes(out, picture.width, picture.height)):
            rows = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)
            np.copyto(into, rows[:into.shape[0], :into.shape[1]])

    def grey_sample(self, step: int) -> np.ndarray:
        """Every `step`-th pixel of every `step`-th row of the luma plane (the worker's copy for its step)."""
        if self.sample is not None and self.sample[0] == step:
            return self.sample[1]
        return self.y[::step, ::step]

    def av_frame(self):
        """A PyAV `VideoFrame` of this picture, with its colorspace and range, for swscale."""
        import av

        width, height = self.width, self.height
        # a PyAV frame over `data` itself, no copy (PyAV reads a 4:2:0 array's height as rows // 6 * 4)
        if width % 2 == 0 and height % 4 == 0:
            picture = av.VideoFrame.from_numpy_buffer(self.data.reshape(height * 3 // 2, width), format=self.format)
        else:  # the planes copied into a PyAV frame of its own
            picture = av.VideoFrame(width, height, self.format)
            for plane, data in zip(picture.planes, (self.y, self.u, self.v)):
                np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)[:data.shape[0], :data.shape[1]] = data
        picture.colorspace, picture.color_range = self.colorspace, self.color_range
        return picture

    def to_bgr(self, threads: int = 0) -> np.ndarray:
        """The picture as H x W x 3 BGR uint8, as PyAV converts the decoder's own (see `to_bgr`)."""
        image = to_bgr(self.av_frame(), threads)
        if self.allocate is None:
            return image
        out = self.allocate(image.shape)
        np.copyto(out, image)
        return out


def _planes(data: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Y, U and V planes of an I420 buffer, as 2-D views."""
    chroma_w, chroma_h = (width + 1) // 2, (height + 1) // 2
    luma, chroma = width * height, chroma_w * chroma_h
    return (data[:luma].reshape(height, width), data[luma:luma + chroma].reshape(chroma_h, chroma_w),
            data[luma + chroma:luma + 2 * chroma].reshape(chroma_h, chroma_w))
