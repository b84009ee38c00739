"""An object's mask as it travels with its track: a small bitmap pinned to the object's box.

A `BoxMask` is a bitmap (`bits`, bool, at most `MAX_SIDE` a side) laid over `region`, a rectangle in
source pixels, together with `box`, the object's box when the mask was made, and `at`, when the
frame it was made on came (`Frame.clock`; None: unknown). Between fresh masks the mask rides with
its track: `follow(new_box)` moves and scales the region the way the box moved and scaled, and
keeps the same bitmap (no pixels are read). The same form holds a mask from SAM (cut from its
low-resolution logits, `from_logits`) and one from a `-seg` detector.

What the result contract carries (`mask` of an object, see docs/results.md):
- `polygon` (`polygons()`): COCO's polygon form, a list of outlines `[x1, y1, x2, y2, ...]` in source
  pixels, the outer edges of each part of the mask;
- `rle` (`rle()`): COCO's compressed run-length form `{"size": [height, width], "counts": "..."}` of
  the whole frame, column by column, as pycocotools writes and reads it (`rle_decode` reads it back).

Example:
    >>> bits = np.zeros((4, 4), bool); bits[1:3, 1:3] = True
    >>> mask = BoxMask(bits, (10.0, 10.0, 50.0, 50.0), (10.0, 10.0, 50.0, 50.0))
    >>> mask.polygons()
    [[20.0, 20.0, 20.0, 40.0, 40.0, 40.0, 40.0, 20.0]]
    >>> moved = mask.follow((110.0, 10.0, 190.0, 50.0))   # 100 px right, twice as wide
    >>> moved.region, moved.polygons()
    ((110.0, 10.0, 190.0, 50.0), [[130.0, 20.0, 130.0, 40.0, 170.0, 40.0, 170.0, 20.0]])
    >>> full = rle_decode(moved.rle(100, 200)); int(full.sum()), full[20:40, 130:170].all()
    (800, np.True_)
"""

from __future__ import annotations

import cv2
import numpy as np

#: the longest side of a mask's bitmap (pixels): enough for an outline and a tint at any box size
MAX_SIDE = 128
#: a fresh mask's region: the object's box grown by this share of its size on each side (a mask may
#: reach past its box: an arm, a mirror)
MARGIN = 0.1


class BoxMask:
    """A bitmap over `region` (x1, y1, x2, y2 in source pixels), made for an object whose box was
    `box` (see the module's docstring). Never changed once made: `follow` makes a new one that
    shares the bitmap and its outlines."""

    __slots__ = ("bits", "region", "box", "_outline", "at")

    def __init__(self, bits: np.ndarray, region, box, _outline: list | None = None, at: float | None = None):
        self.bits = bits
        self.region = tuple(float(v) for v in region)
        self.box = tuple(float(v) for v in box)
        self._outline = _outline
        self.at = at

    def follow(self, box) -> BoxMask:
        """The same mask for the object's box now: the region moved and scaled as the box was."""
        bx1, by1, bx2, by2 = self.box
        nx1, ny1, nx2, ny2 = (float(v) for v in box)
        sx = (nx2 - nx1) / max(bx2 - bx1, 1e-6)
        sy = (ny2 - ny1) / max(by2 - by1, 1e-6)
        x1, y1, x2, y2 = self.region
        region = (nx1 + (x1 - bx1) * sx, ny1 + (y1 - by1) * sy, nx1 + (x2 - bx1) * sx, ny1 + (y2 - by1) * sy)
        return BoxMask(self.bits, region, (nx1, ny1, nx2, ny2), self.outline(), self.at)

    def outline(self) -> list[np.ndarray]:
        """The outer edges of each part of the bitmap, as (K, 2) arrays in 0..1 of the region (made once)."""
        if self._outline is None:
            h, w = self.bits.shape
            # a frame of empty pixels, so that a part touching the edge is outlined along it
            padded = np.zeros((h + 2, w + 2), np.uint8)
            padded[1:-1, 1:-1] = self.bits
            contours, _ = cv2.findContours(padded, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            out = []
            for c in contours:
                p = cv2.approxPolyDP(c, 0.5, True).reshape(-1, 2).astype(np.float64) - 1  # pixel indices
                if len(p) >= 3:
                    # from pixel centres to the pixels' outer edges: half a pixel away from the part's middle
                    p = p + 0.5 + 0.5 * np.sign(p - p.mean(axis=0))
                    out.append(p / (w, h))
            self._outline = out
        return self._outline

    def polygons(self, decimals: int = 1) -> list[list[float]]:
        """COCO polygons in source pixels: one flat list `[x1, y1, x2, y2, ...]` per part."""
        x1, y1, x2, y2 = self.region
        scale = np.array([x2 - x1, y2 - y1])
        return [np.round(part * scale + (x1, y1), decimals).ravel().tolist() for part in self.outline()]

    def pixel_box(self, width: int, height: int) -> tuple[int, int, int, int] | None:
        """The region in whole pixels within a `width` x `height` frame (x0, y0, x1, y1; ends
        exclusive), None when nothing of it is inside."""
        x1, y1, x2, y2 = self.region
        x0, y0 = max(0, int(np.floor(x1))), max(0, int(np.floor(y1)))
        xe, ye = min(width, int(np.ceil(x2))), min(height, int(np.ceil(y2)))
        return (x0, y0, xe, ye) if xe > x0 and ye > y0 else None

    def raster(self, width: int, height: int) -> tuple[np.ndarray, tuple[int, int, int, int]] | None:
        """The mask in frame pixels over `pixel_box`: (bool array of that box, the box), or None.
        Each frame pixel takes the bitmap's value at its centre."""
        inside = self.pixel_box(width, height)
        if inside is None:
            return None
        x0, y0, xe, ye = inside
        x1, y1, x2, y2 = self.region
        h, w = self.bits.shape
        cols = ((np.arange(x0, xe) + 0.5 - x1) * w / max(x2 - x1, 1e-6)).astype(np.int64)
        rows = ((np.arange(y0, ye) + 0.5 - y1) * h / max(y2 - y1, 1e-6)).astype(np.int64)
        cols_ok, rows_ok = (cols >= 0) & (cols < w), (rows >= 0) & (rows < h)
        part = self.bits[np.clip(rows, 0, h - 1)][:, np.clip(cols, 0, w - 1)]
        part &= rows_ok[:, None] & cols_ok[None, :]
        return part, inside

    def points(self, most: int = 32) -> np.ndarray:
        """The centres of the mask's pixels in source pixels (N x 2), the bitmap sampled down to at
        most `most` a side: what `analytics.zone_anchor: mask` tests against a zone."""
        h, w = self.bits.shape
        step = max(1, -(-max(h, w) // most))
        rows, cols = np.nonzero(self.bits[::step, ::step])
        x1, y1, x2, y2 = self.region
        return np.stack([x1 + (cols * step + 0.5) * (x2 - x1) / w, y1 + (rows * step + 0.5) * (y2 - y1) / h], 1)

    def rle(self, height: int, width: int) -> dict:
        """COCO compressed RLE of the mask over the whole `height` x `width` frame."""
        made = self.raster(width, height)
        if made is None:
            return {"size": [height, width], "counts": rle_string([height * width])}
        part, (x0, y0, xe, ye) = made
        columns = np.zeros((height, xe - x0), bool)  # the region's columns, whole: column-major runs
        columns[y0:ye] = part
        flat = np.concatenate([[False], columns.ravel(order="F"), [False]])
        edges = np.flatnonzero(flat[1:] != flat[:-1])  # where runs start and end, inside `columns`
        counts = np.diff(np.concatenate([[0], edges, [columns.size]])).tolist()
        counts[0] += x0 * height  # the zeros of the columns before the region
        counts[-1] += (width - xe) * height  # ... and after it (the last run is one of zeros)
        if len(counts) > 1 and counts[-1] == 0:  # the mask reaches the frame's last pixel: no zeros after it
            counts.pop()
        return {"size": [height, width], "counts": rle_string(counts)}

    def __repr__(self) -> str:
        return f"BoxMask(region={tuple(round(v, 1) for v in self.region)}, bits={self.bits.shape})"


def from_logits(logits: np.ndarray, boxes: np.ndarray, to_logits, width: int, height: int,
                threshold: float = 0.0, *, offset=(0.0, 0.0), margin: float = MARGIN) -> list[BoxMask]:
    """One `BoxMask` per box (source pixels) from mask logits `logits` (N x H x W, one per box) laid
    over the frame so that source pixel (x, y) is logit cell (x * sx + ox, y * sy + oy), with
    `to_logits` = sx (or (sx, sy)) and `offset` = (ox, oy) (SAM: L / S of the model's side S, times
    its resize factor, no offset; a `-seg` detector: its prototypes' share of the input, and the
    letterbox's pad), thresholded at `threshold`. Each mask's region is its box grown by `margin`
    of its size on each side (0: the mask is cut at its box, as Ultralytics cuts a `-seg` model's),
    clipped to the frame, sampled (bilinear) onto at most `MAX_SIDE` a side."""
    sx, sy = (to_logits, to_logits) if np.isscalar(to_logits) else to_logits
    ox, oy = offset
    out = []
    for grid, box in zip(logits, np.asarray(boxes, np.float64)):
        x1, y1, x2, y2 = box
        mx, my = margin * (x2 - x1), margin * (y2 - y1)
        rx1, ry1 = max(0.0, x1 - mx), max(0.0, y1 - my)
        rx2, ry2 = min(float(width), x2 + mx), min(float(height), y2 + my)
        rw, rh = max(rx2 - rx1, 1.0), max(ry2 - ry1, 1.0)
        scale = min(1.0, MAX_SIDE / max(rw, rh))
        bw, bh = max(1, round(rw * scale)), max(1, round(rh * scale))
        # bitmap pixel (j, i) centre -> the logits' (x, y), both in pixel-centre coordinates
        kx, ky = rw / bw * sx, rh / bh * sy
        matrix = np.array([[kx, 0, rx1 * sx + ox + 0.5 * kx - 0.5], [0, ky, ry1 * sy + oy + 0.5 * ky - 0.5]])
        sampled = cv2.warpAffine(np.ascontiguousarray(grid, np.float32), matrix, (bw, bh),
                                 flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REPLICATE)
        out.append(BoxMask(sampled > threshold, (rx1, ry1, rx1 + rw, ry1 + rh), box))
    return out


def rle_string(counts: list[int]) -> str:
    """COCO's compressed form of run lengths (zeros first): each count less the one two before it
    (from the third on), in 5-bit groups, low first, each a character from 48 on; a group with more
    to come has its 6th bit set (as pycocotools' `rleToString`).

    Example:
        >>> rle_string([4, 2]), rle_decode({"size": [2, 3], "counts": "42"}).astype(int).tolist()
        ('42', [[0, 0, 1], [0, 0, 1]])
    """
    chars = []
    for i, x in enumerate(counts):
        x = int(x) - (int(counts[i - 2]) if i > 2 else 0)
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            if more:
                c |= 0x20
            chars.append(chr(c + 48))
    return "".join(chars)


def rle_counts(text: str) -> list[int]:
    """The run lengths of a COCO compressed string (the inverse of `rle_string`)."""
    counts: list[int] = []
    p = 0
    while p < len(text):
        x, k, more = 0, 0, True
        while more:
            c = ord(text[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def rle_decode(rle: dict) -> np.ndarray:
    """A COCO RLE (`counts` compressed or a list) as a bool array of its `size` (height, width)."""
    height, width = rle["size"]
    counts = rle["counts"] if isinstance(rle["counts"], list) else rle_counts(rle["counts"])
    values = np.zeros(len(counts), bool)
    values[1::2] = True
    flat = np.repeat(values, counts)
    if flat.size != height * width:
        raise ValueError(f"RLE counts cover {flat.size} pixels, not {height} x {width}")
    return flat.reshape((height, width), order="F")


__all__ = ["BoxMask", "from_logits", "rle_string", "rle_counts", "rle_decode", "MAX_SIDE", "MARGIN"]
