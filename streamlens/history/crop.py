"""A JPEG crop as a search query: its size read from its header before anything is decoded, then
decoded by OpenCV and described as the `reid` embeddings are (streamlens/reid/appearance.py), the
whole picture one box.

Example:
    >>> import cv2, numpy as np
    >>> ok, jpeg = cv2.imencode(".jpg", np.full((64, 32, 3), 128, np.uint8))
    >>> jpeg_size(jpeg.tobytes())
    (32, 64)
    >>> name, vector = describe_jpeg(jpeg.tobytes())
    >>> name, vector.shape == (DIM,), round(float(np.linalg.norm(vector)), 3)
    ('reid', True, 1.0)
"""

from __future__ import annotations

import cv2
import numpy as np

from ..reid.appearance import DIM, describe

#: the embedding name a crop is compared with: the `reid` section's
NAME = "reid"
#: the largest crop decoded, in pixels a side (a crop of an object, not a panorama)
MAX_SIDE = 4096

#: JPEG markers that start a frame and carry its size (SOF0-SOF15 but DHT, JPG and DAC)
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


class BadPicture(ValueError):
    """A query picture that is no JPEG, is damaged, or is too large: one line saying which."""


def jpeg_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a JPEG's frame header, reading no pixel; `BadPicture` when `data` is no
    JPEG or has no frame header."""
    if data[:2] != b"\xff\xd8":
        raise BadPicture("not a JPEG picture (it does not start with FF D8)")
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            raise BadPicture(f"not a sound JPEG picture (no marker at byte {at})")
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            at += 2
            continue
        length = int.from_bytes(data[at + 2:at + 4], "big")
        if marker in _SOF and at + 9 <= len(data):
            return int.from_bytes(data[at + 7:at + 9], "big"), int.from_bytes(data[at + 5:at + 7], "big")
        if marker in (0xD9, 0xDA) or length < 2:  # the end, or the pixels before any frame header
            break
        at += 2 + length
    raise BadPicture("not a sound JPEG picture (no frame header)")


def describe_jpeg(data: bytes) -> tuple[str, np.ndarray]:
    """(`NAME`, the crop's unit descriptor) of JPEG `data`; `BadPicture` with one line when it is no
    JPEG, cannot be decoded, or is larger than `MAX_SIDE` a side."""
    width, height = jpeg_size(data)
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise BadPicture(f"a crop of at most {MAX_SIDE} x {MAX_SIDE} pixels, got {width} x {height}")
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise BadPicture("the JPEG picture cannot be decoded")
    h, w = image.shape[:2]
    return NAME, describe(image, np.array([[0, 0, w, h]], np.float64))[0]


__all__ = ["BadPicture", "jpeg_size", "describe_jpeg", "NAME", "MAX_SIDE", "DIM"]
