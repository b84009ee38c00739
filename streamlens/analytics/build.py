"""The `analytics:` section made into each stream's `StreamAnalytics`, and the clock its rules read.

A rule's points are in source pixels, or all in 0..1 as fractions of the frame: those are scaled
by the stream's frame size, so each stream is built on its first frame. A rule with `streams`
applies to those streams only.
"""

from __future__ import annotations

import cv2
import numpy as np

from ..frame import MediaClock  # re-exported: it is the stream's clock (streamlens/frame.py)
from .rules import LineRule, ZoneRule
from .stream import StreamAnalytics


def _scaled(points, width: int, height: int) -> list[tuple[float, float]]:
    if all(0.0 <= v <= 1.0 for p in points for v in p):
        return [(x * width, y * height) for x, y in points]
    return [tuple(p) for p in points]


def build_stream_analytics(cfg, stream: str, width: int, height: int) -> StreamAnalytics | None:
    """`stream`'s analytics under `cfg` (an `AnalyticsConfig`), None when it has rules and none
    applies to this stream; a section without rules gives every stream its objects' life events."""
    def applies(rule) -> bool:
        return rule.streams is None or stream in rule.streams

    lines = [(LineRule(r.name, tuple(_scaled(r.points, width, height)), margin_px=r.margin_px,
                        min_frames=r.min_frames),
              set(r.classes) if r.classes is not None else None) for r in cfg.lines if applies(r)]
    zones = [(ZoneRule(r.name, _scaled(r.polygon, width, height), inertia=r.inertia, loiter_s=r.loiter_s),
              set(r.classes) if r.classes is not None else None) for r in cfg.zones if applies(r)]
    ground = None if cfg.ground is None else ground_homography(_scaled(cfg.ground.points, width, height),
                                                                cfg.ground.width_m, cfg.ground.length_m)
    if not lines and not zones and cfg.pixels_per_metre is None and ground is None and (cfg.lines or cfg.zones):
        return None  # rules for other streams only (a section without rules: the objects' life events)
    return StreamAnalytics(lines, zones, anchor=cfg.anchor, zone_anchor=cfg.zone_anchor,
                           pixels_per_metre=cfg.pixels_per_metre,
                           end_after_s=cfg.end_after_s, ground=ground)


def ground_homography(points, width_m: float, length_m: float) -> np.ndarray:
    """The 3x3 homography from source pixels to metres on the ground: `points` are the image
    corners of a ground rectangle, in order around it, the first two `width_m` apart and the second
    and third `length_m` apart; the first point becomes (0, 0). Scaled so that the third
    homogeneous coordinate is positive on the ground's side of its horizon.

    Example:
        >>> h = ground_homography([(100, 400), (300, 400), (260, 100), (140, 100)], 3.5, 40.0)
        >>> x, y, w = h @ (200, 100, 1.0)
        >>> round(float(x / w), 2), round(float(y / w), 2)
        (1.75, 40.0)
    """
    src = np.asarray(points, np.float32)
    dst = np.asarray([(0, 0), (width_m, 0), (width_m, length_m), (0, length_m)], np.float32)
    h = cv2.getPerspectiveTransform(src, dst).astype(np.float64)
    w = h[2] @ (float(src[0, 0]), float(src[0, 1]), 1.0)
    return h if w > 0 else -h  # w > 0 on the ground's side of its horizon, w <= 0 beyond it


__all__ = ["build_stream_analytics", "ground_homography", "MediaClock"]
