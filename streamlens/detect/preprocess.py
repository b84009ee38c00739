"""From a source frame to a model input, and from model pixels back to source pixels, exactly.

Three ways to fit a frame into a model input (`detector.resize`):
- `letterbox` (default): scale by one factor so the whole frame fits, no distortion, and fill the rest
  with a pad value (top-left corner or centred, as the model was trained).
- `resize`: stretch the frame to the input size (distorts unless the aspect ratios match).
- `bucket`: letterbox into the smallest stride-multiple rectangle that holds the frame at the scale
  `letterbox` would use (a 16:9 frame at imgsz 416 goes into 416x256, not 416x416: 40% less work).
  Frames of different shapes land in different rectangles (buckets); a batch runs once per bucket.
  Needs a model with a dynamic input height and width.

Every placement is a `Geometry`: `x_input = x_source * scale_x + pad_x` (the same for y). The scales
are the ratios of the sizes actually resized to (`round(w * r) / w`), not the nominal factor `r`, so
mapping back is exact: cv2's resize maps pixel edges to pixel edges, and a box edge at source x lands
at `x * scale_x + pad_x` in the input.

Example:
    >>> g = letterbox_geometry((1280, 720), (416, 416), center=False)
    >>> (g.placed_size, g.pad_x, g.pad_y)
    ((416, 234), 0, 0)
    >>> g.to_source(np.array([[0.0, 0.0, 416.0, 234.0]], np.float32)).tolist()
    [[0.0, 0.0, 1280.0, 720.0]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

RESIZE_MODES = ("letterbox", "resize", "bucket")
PAD_PLACES = ("corner", "center")
CHANNEL_ORDERS = ("bgr", "rgb")


@dataclass(frozen=True, slots=True)
class Geometry:
    """Where a source frame went in the model input: `x_input = x_source * scale_x + pad_x`.

    Sizes are (width, height). `placed_size` is the size the frame was resized to, at (pad_x, pad_y).

    Example:
        >>> g = resize_geometry((640, 360), (320, 320))
        >>> g.to_input(np.array([[64.0, 36.0, 640.0, 360.0]], np.float32)).tolist()
        [[32.0, 32.0, 320.0, 320.0]]
    """

    source_size: tuple[int, int]
    input_size: tuple[int, int]
    placed_size: tuple[int, int]
    pad_x: int
    pad_y: int
    #: where what was placed begins in the frame: (0, 0) for the whole frame, the region's corner for
    #: a region fitted to a fixed input (`InputSpec.region_geometry`; `source_size` is the region's)
    origin: tuple[int, int] = (0, 0)

    @property
    def scale_x(self) -> float:
        return self.placed_size[0] / self.source_size[0]

    @property
    def scale_y(self) -> float:
        return self.placed_size[1] / self.source_size[1]

    def to_source(self, xyxy: np.ndarray) -> np.ndarray:
        """Boxes (N x 4, x1 y1 x2 y2) in input pixels -> float32 boxes in frame pixels, clipped to what
        was placed (the frame, or the region of it)."""
        out = np.empty((len(xyxy), 4), np.float32)
        (ox, oy), (sw, sh) = self.origin, self.source_size
        out[:, 0::2] = (np.asarray(xyxy[:, 0::2], np.float64) - self.pad_x) / self.scale_x + ox
        out[:, 1::2] = (np.asarray(xyxy[:, 1::2], np.float64) - self.pad_y) / self.scale_y + oy
        np.clip(out[:, 0::2], ox, ox + sw, out=out[:, 0::2])
        np.clip(out[:, 1::2], oy, oy + sh, out=out[:, 1::2])
        return out

    def window(self, x1: int, y1: int, x2: int, y2: int) -> Geometry:
        """The geometry of the window (x1, y1, x2, y2) of this input, as an input of its own: its
        pads may then be negative (the placed frame starts before the window). Not for `place`."""
        return Geometry(self.source_size, (x2 - x1, y2 - y1), self.placed_size, self.pad_x - x1, self.pad_y - y1,
                        self.origin)

    def to_input(self, xyxy: np.ndarray) -> np.ndarray:
        """Boxes in frame pixels -> float32 boxes in input pixels (the inverse of `to_source`)."""
        out = np.empty((len(xyxy), 4), np.float32)
        out[:, 0::2] = (np.asarray(xyxy[:, 0::2], np.float64) - self.origin[0]) * self.scale_x + self.pad_x
        out[:, 1::2] = (np.asarray(xyxy[:, 1::2], np.float64) - self.origin[1]) * self.scale_y + self.pad_y
        return out


def letterbox_geometry(source_size: tuple[int, int], input_size: tuple[int, int], *, center: bool) -> Geometry:
    """Fit `source_size` (w, h) into `input_size` (w, h) with one scale; pad at the corner or both sides.

    Centred padding splits as Ultralytics does: the odd pixel goes right and below.

    Example:
        >>> letterbox_geometry((1280, 720), (416, 416), center=True).pad_y
        91
    """
    (sw, sh), (iw, ih) = source_size, input_size
    r = min(iw / sw, ih / sh)
    pw, ph = min(iw, max(1, round(sw * r))), min(ih, max(1, round(sh * r)))
    pad_x, pad_y = ((iw - pw) // 2, (ih - ph) // 2) if center else (0, 0)
    return Geometry((sw, sh), (iw, ih), (pw, ph), pad_x, pad_y)


def resize_geometry(source_size: tuple[int, int], input_size: tuple[int, int]) -> Geometry:
    """Stretch `source_size` (w, h) to fill `input_size` (w, h)."""
    return Geometry(tuple(source_size), tuple(input_size), tuple(input_size), 0, 0)


def bucket_size(source_size: tuple[int, int], max_size: tuple[int, int], stride: int = 32) -> tuple[int, int]:
    """The input (w, h) for `source_size` in `bucket` mode: the letterboxed size rounded up to `stride`.

    Example:
        >>> bucket_size((1280, 720), (416, 416)), bucket_size((640, 480), (416, 416))
        ((416, 256), (416, 320))
    """
    (sw, sh), (mw, mh) = source_size, max_size
    r = min(mw / sw, mh / sh)
    pw, ph = max(1, round(sw * r)), max(1, round(sh * r))
    return (min(mw, math.ceil(pw / stride) * stride), min(mh, math.ceil(ph / stride) * stride))


@dataclass(frozen=True, slots=True)
class InputSpec:
    """What a model wants: its input size, how frames are fitted, and how pixels are coded.

    `size` is (width, height); for `bucket` it is the largest input. `channels` is the model's channel
    order; a pixel value v becomes `(v - mean) / std` per channel, in the model's channel order
    (YOLOX: mean 0, std 1; Ultralytics: mean 0, std 255). `pad` is `corner` or `center`.

    Example:
        >>> spec = InputSpec((416, 416), channels="bgr", mean=(0, 0, 0), std=(1, 1, 1), pad="corner")
        >>> spec.geometry((1280, 720)).placed_size
        (416, 234)
    """

    size: tuple[int, int]
    channels: str = "rgb"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (255.0, 255.0, 255.0)
    pad: str = "center"
    pad_value: int = 114
    resize: str = "letterbox"
    stride: int = 32

    def geometry(self, source_size: tuple[int, int]) -> Geometry:
        """Where a frame of `source_size` (w, h) goes in the input."""
        if self.resize == "resize":
            return resize_geometry(source_size, self.size)
        size = bucket_size(source_size, self.size, self.stride) if self.resize == "bucket" else self.size
        return letterbox_geometry(source_size, size, center=self.pad == "center")

    def region_geometry(self, frame_size: tuple[int, int], region: tuple[int, int, int, int]) -> Geometry:
        """Where the `region` (x1, y1, x2, y2, whole pixels) of a frame of `frame_size` goes in an input
        of one fixed size: fitted to it as a frame of the region's size would be (letterboxed or
        stretched: a zoom). See `place_region` for the modes that run at any size.

        Example:
            >>> spec = InputSpec((416, 416), pad="corner")
            >>> g = spec.region_geometry((1280, 720), (640, 360, 960, 568))
            >>> g.input_size, g.placed_size, g.origin
            ((416, 416), (416, 270), (640, 360))
        """
        x1, y1, x2, y2 = region
        g = self.geometry((x2 - x1, y2 - y1))
        return Geometry(g.source_size, g.input_size, g.placed_size, g.pad_x, g.pad_y, (x1, y1))

    def region_window(self, whole: Geometry, region: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        """The window (x1, y1, x2, y2, input pixels) of the whole frame's input `whole` that holds
        `region` (frame pixels), its edges on multiples of the stride: a model that runs at any size
        then sees the very pixels, on the very grid, that it sees on the whole frame.

        Example:
            >>> spec = InputSpec((416, 416), pad="corner", resize="bucket")
            >>> whole = spec.geometry((1280, 720))
            >>> spec.region_window(whole, (640, 360, 960, 568))
            (192, 96, 320, 192)
        """
        (ix, iy), s = whole.input_size, self.stride
        box = whole.to_input(np.array([region], np.float64))[0]
        x1, y1 = (max(0, math.floor(v / s) * s) for v in box[:2])
        x2, y2 = min(ix, math.ceil(box[2] / s) * s), min(iy, math.ceil(box[3] / s) * s)
        return (x1, y1, max(x2, x1 + min(s, ix - x1)), max(y2, y1 + min(s, iy - y1)))


def place(image: np.ndarray, geometry: Geometry, pad_value: int = 114, out: np.ndarray | None = None) -> np.ndarray:
    """`image` (H x W x 3 uint8) resized and padded as `geometry` says: an input-sized uint8 image.

    Bilinear interpolation (as YOLOX and Ultralytics train). Writes into `out` when given.

    Example:
        >>> img = np.full((720, 1280, 3), 7, np.uint8)
        >>> canvas = place(img, letterbox_geometry((1280, 720), (416, 416), center=False))
        >>> canvas.shape, int(canvas[0, 0, 0]), int(canvas[300, 0, 0])
        ((416, 416, 3), 7, 114)
    """
    iw, ih = geometry.input_size
    pw, ph = geometry.placed_size
    x, y = geometry.pad_x, geometry.pad_y
    if out is None:
        out = np.empty((ih, iw, 3), np.uint8)
    if (pw, ph) == (image.shape[1], image.shape[0]):
        out[y:y + ph, x:x + pw] = image
    else:
        out[y:y + ph, x:x + pw] = cv2.resize(image, (pw, ph), interpolation=cv2.INTER_LINEAR)
    if y:
        out[:y] = pad_value
    if y + ph < ih:
        out[y + ph:] = pad_value
    if x:
        out[y:y + ph, :x] = pad_value
    if x + pw < iw:
        out[y:y + ph, x + pw:] = pad_value
    return out


def place_region(image: np.ndarray, spec: InputSpec, region: tuple[int, int, int, int]) -> tuple[np.ndarray, Geometry]:
    """The model input (uint8, H x W x 3) for the `region` (x1, y1, x2, y2) of the frame `image`, and
    its geometry (boxes map back to frame pixels). `bucket`: the window of the whole frame's input
    that holds the region (`InputSpec.region_window`): the pixels the model would see there on the
    whole frame, in a smaller input. Other modes (one fixed input size): the region fitted to the
    input (`InputSpec.region_geometry`).

    Example:
        >>> spec = InputSpec((416, 416), pad="corner", resize="bucket")
        >>> canvas, g = place_region(np.zeros((720, 1280, 3), np.uint8), spec, (640, 360, 960, 568))
        >>> canvas.shape, g.to_source(np.array([[0.0, 0.0, 128.0, 96.0]])).round().tolist()
        ((96, 128, 3), [[591.0, 295.0, 985.0, 591.0]])
    """
    height, width = image.shape[:2]
    if spec.resize != "bucket":
        x1, y1, x2, y2 = region
        geometry = spec.region_geometry((width, height), region)
        return place(image[y1:y2, x1:x2], geometry, spec.pad_value), geometry
    whole = spec.geometry((width, height))
    x1, y1, x2, y2 = spec.region_window(whole, region)
    return place(image, whole, spec.pad_value)[y1:y2, x1:x2], whole.window(x1, y1, x2, y2)


def to_chw(canvas: np.ndarray, spec: InputSpec, out: np.ndarray | None = None) -> np.ndarray:
    """A placed BGR uint8 image as the model's 3 x H x W float32 input: channel order and normalisation.

    Example:
        >>> spec = InputSpec((2, 1), channels="rgb", std=(255.0, 255.0, 255.0))
        >>> to_chw(np.array([[[0, 0, 255], [0, 0, 0]]], np.uint8), spec)[0].tolist()  # red, as R first
        [[1.0, 0.0]]
    """
    order = (2, 1, 0) if spec.channels == "rgb" else (0, 1, 2)
    if out is None:
        out = np.empty((3, canvas.shape[0], canvas.shape[1]), np.float32)
    for dst, src in enumerate(order):
        channel = out[dst]
        channel[...] = canvas[:, :, src]
        if spec.mean[dst]:
            channel -= spec.mean[dst]
        if spec.std[dst] != 1.0:
            channel /= spec.std[dst]
    return out
