"""Trackers: ids that stay with objects, and boxes on the frames between keyframes."""

from __future__ import annotations

from ..config import TrackerConfig
from .base import PassThrough, Tracker


def build_tracker(cfg: TrackerConfig, fps: float | None) -> Tracker:
    """One tracker for one stream."""
    return PassThrough()


__all__ = ["Tracker", "PassThrough", "build_tracker"]
