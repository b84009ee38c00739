"""A weight-free appearance descriptor for object crops: colour and texture, no model file.

`describe(image_bgr, boxes)` gives one float32 row of unit length per box (x1, y1, x2, y2 in
pixels, clipped to the image); `similarity(a, b)` the cosine between rows (1: the same look).

What it is, and why:

- Each crop is resized to `CROP_W` x `CROP_H` (cheap, and every crop then counts the same number
  of pixels whatever its size) and cut into `STRIPES` horizontal stripes: the top, middle and
  bottom of a person (head, torso, legs) or a vehicle (roof, windows/body, bumper/wheels) differ,
  and a stripe keeps that layout while staying blind to left-right shifts and small misalignments
  between boxes.
- Per stripe, a colour histogram in HSV: `HUE_BINS` hue bins where each pixel counts by its
  saturation (a grey pixel's hue is noise), plus `VALUE_BINS` brightness bins where it counts by
  one minus its saturation (white, silver, grey and black are most vehicles' colours, and hue alone
  cannot tell them apart). Each pixel's weight is shared between its two nearest bins (linear soft
  binning, circular for hue), so a slight change of light moves weight smoothly.
- Per stripe, a histogram of gradient orientations (`ORIENT_BINS`, unsigned, weighted by gradient
  magnitude): texture and shape (a grille, stripes on a shirt) that colour misses. Each pixel also
  adds `GRADIENT_FLOOR` spread evenly over the bins: gradients weaker than noise have no
  orientation, and a flat stripe then reads as even rather than empty.
- Pixels near the crop's left and right edges count less (a tent from 1 at the centre to 0.5 at
  the edge): a box's corners are mostly background.
- Each histogram is normalised to sum one (colour and texture weigh the same, whatever the
  contrast), square-rooted (the Hellinger map: cosine of the result is the Bhattacharyya
  coefficient, which lets no single large bin dominate), and the whole row scaled to unit length.

A box with no area inside the image (or not finite) gets `DEGENERATE`, the constant unit row: a
defined vector, equally (and only moderately) similar to every real one. Rows are never zero.

Example:
    >>> image = np.zeros((100, 100, 3), np.uint8); image[:, 50:] = (0, 0, 255)
    >>> rows = describe(image, np.array([[0, 0, 40, 100], [60, 0, 100, 100], [5, 0, 45, 90]]))
    >>> rows.shape, rows.dtype
    ((3, 60), dtype('float32'))
    >>> bool(similarity(rows[0], rows[2]) > 0.99), bool(similarity(rows[0], rows[1]) < 0.6)
    (True, True)
"""

from __future__ import annotations

import cv2
import numpy as np

#: the side of the resized crop, in pixels (width, height)
CROP_W, CROP_H = 24, 48
#: horizontal stripes per crop
STRIPES = 3
#: hue bins (weighted by saturation), brightness bins (weighted by 1 - saturation), gradient-orientation bins
HUE_BINS, VALUE_BINS, ORIENT_BINS = 8, 4, 8
COLOUR_BINS = HUE_BINS + VALUE_BINS
STRIPE_DIM = COLOUR_BINS + ORIENT_BINS
#: the descriptor's length
DIM = STRIPES * STRIPE_DIM
#: gradient magnitude (grey levels across two pixels) each pixel adds, spread over every orientation
GRADIENT_FLOOR = 4.0
#: the row a box with no area in the image gets
DEGENERATE = np.full(DIM, 1.0 / np.sqrt(DIM), np.float32)

_ROWS = CROP_H // STRIPES
# each pixel's weight across the crop's width: 1 at the centre, 0.5 at the edges
_TENT = (1.0 - 0.5 * np.abs(np.linspace(-1.0, 1.0, CROP_W))).astype(np.float32)
# each pixel's stripe, as a (H, 1) column
_STRIPE_OF_ROW = (np.arange(CROP_H) // _ROWS).clip(max=STRIPES - 1).reshape(CROP_H, 1)


def clip_boxes(boxes: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """`boxes` (N, 4) as integer pixel rectangles inside a `width` x `height` image, and which of
    them have any area there (non-finite boxes have none)."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    finite = np.isfinite(boxes).all(1)
    safe = np.where(finite[:, None], boxes, 0.0)
    x1 = np.floor(safe[:, 0]).clip(0, width)
    y1 = np.floor(safe[:, 1]).clip(0, height)
    x2 = np.ceil(safe[:, 2]).clip(0, width)
    y2 = np.ceil(safe[:, 3]).clip(0, height)
    rects = np.stack([x1, y1, x2, y2], 1).astype(np.int64)
    return rects, finite & (x2 > x1) & (y2 > y1)


def soft_bins(position: np.ndarray, bins: int, circular: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For positions in bin units (0..bins), the lower bin, the upper bin and the upper's share."""
    base = np.floor(position - 0.5)
    share = (position - 0.5 - base).astype(np.float32)
    low, high = base.astype(np.int64), base.astype(np.int64) + 1
    if circular:
        return low % bins, high % bins, share
    # at the ends, all the weight stays in the end bin
    return low.clip(0, bins - 1), high.clip(0, bins - 1), share


def _histograms(crops: np.ndarray) -> np.ndarray:
    """(N, H, W, 3) uint8 BGR crops -> (N, STRIPES, STRIPE_DIM) raw weighted histograms."""
    n = len(crops)
    hsv = cv2.cvtColor(crops.reshape(n * CROP_H, CROP_W, 3), cv2.COLOR_BGR2HSV_FULL).reshape(crops.shape)
    hue = hsv[..., 0].astype(np.float32) * (HUE_BINS / 256.0)
    sat = hsv[..., 1].astype(np.float32) / 255.0
    val = hsv[..., 2].astype(np.float32) * (VALUE_BINS / 256.0)

    gray = cv2.cvtColor(crops.reshape(n * CROP_H, CROP_W, 3), cv2.COLOR_BGR2GRAY).reshape(n, CROP_H, CROP_W)
    gray = gray.astype(np.float32)
    gx = np.zeros_like(gray)
    gy = np.zeros_like(gray)
    gx[:, :, 1:-1] = gray[:, :, 2:] - gray[:, :, :-2]   # within each crop only: no bleed between crops
    gy[:, 1:-1, :] = gray[:, 2:, :] - gray[:, :-2, :]
    magnitude = np.sqrt(gx * gx + gy * gy)
    orient = (np.arctan2(gy, gx) % np.pi) * (ORIENT_BINS / np.pi)

    # where each pixel's weight goes: (crop, stripe) block, then the bin inside the block
    block = (np.arange(n).reshape(n, 1, 1) * STRIPES + _STRIPE_OF_ROW) * STRIPE_DIM
    block = np.broadcast_to(block, (n, CROP_H, CROP_W))
    tent = _TENT.reshape(1, 1, CROP_W)
    parts = [(hue, HUE_BINS, True, 0, sat * tent),
             (val, VALUE_BINS, False, HUE_BINS, (1.0 - sat) * tent),
             (orient, ORIENT_BINS, True, COLOUR_BINS, magnitude * tent)]
    size = n * STRIPES * STRIPE_DIM
    counts = np.zeros(size, np.float64)
    for position, bins, circular, offset, weight in parts:
        low, high, share = soft_bins(position, bins, circular)
        where = block + offset
        counts += np.bincount((where + low).ravel(), (weight * (1.0 - share)).ravel(), size)
        counts += np.bincount((where + high).ravel(), (weight * share).ravel(), size)
    return counts.reshape(n, STRIPES, STRIPE_DIM)


def describe_crops(crops: list[np.ndarray]) -> np.ndarray:
    """The appearance of each crop (HxWx3 uint8 BGR, any sizes): (N, DIM) float32 unit rows; an
    empty crop gets `DEGENERATE`."""
    out = np.tile(DEGENERATE, (len(crops), 1))
    index = [i for i, c in enumerate(crops) if c.ndim == 3 and c.shape[2] == 3 and c.shape[0] and c.shape[1]]
    if not index:
        return out
    resized = np.empty((len(index), CROP_H, CROP_W, 3), np.uint8)
    for k, i in enumerate(index):
        resized[k] = cv2.resize(crops[i], (CROP_W, CROP_H), interpolation=cv2.INTER_AREA)
    out[index] = _rows(_histograms(resized))
    return out


def describe(image_bgr: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """The appearance of each box of `image_bgr` (HxWx3 uint8 BGR): (N, DIM) float32, unit rows
    (see the module's docstring). `boxes`: (N, 4) x1, y1, x2, y2 in pixels, clipped to the image."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    if not len(boxes) or image_bgr.ndim != 3 or image_bgr.shape[2] != 3:
        return np.tile(DEGENERATE, (len(boxes), 1))
    height, width = image_bgr.shape[:2]
    rects, good = clip_boxes(boxes, width, height)
    empty = np.zeros((0, 0, 3), np.uint8)
    return describe_crops([image_bgr[y1:y2, x1:x2] if ok else empty
                           for (x1, y1, x2, y2), ok in zip(rects.tolist(), good.tolist())])


def _rows(counts: np.ndarray) -> np.ndarray:
    """Raw histograms (N, STRIPES, STRIPE_DIM) -> (N, DIM) float32 unit rows."""
    colour = counts[:, :, :COLOUR_BINS]
    texture = counts[:, :, COLOUR_BINS:]
    colour = colour / np.maximum(colour.sum(2, keepdims=True), 1e-12)
    # gradients weaker than the noise have no orientation to speak of: a floor spread evenly over
    # the bins, so that a flat stripe reads as even (not as zeros) and a nearly flat one nearly so
    texture = texture + GRADIENT_FLOOR * _TENT.sum() * _ROWS / ORIENT_BINS
    texture = texture / texture.sum(2, keepdims=True)
    rows = np.sqrt(np.concatenate([colour, texture], 2)).reshape(len(counts), DIM)
    # every stripe's colour sums to one, so no row is zero
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32)


def similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray | float:
    """The cosine between descriptors: two rows give a number, (N, D) and (M, D) an (N, M) array, a
    row and (M, D) an (M,) array. Rows need not be unit (each is scaled); a zero row scores 0.

    Example:
        >>> float(similarity(np.array([1.0, 0.0]), np.array([1.0, 1.0])))   # doctest: +ELLIPSIS
        0.7071...
    """
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    an = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
    bn = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    if an.ndim == 1 and bn.ndim == 1:
        return float(an @ bn)
    return an @ bn.T if bn.ndim == 2 else an @ bn


__all__ = ["describe", "describe_crops", "similarity", "clip_boxes", "soft_bins", "DIM", "DEGENERATE", "CROP_W",
           "CROP_H", "STRIPES"]
