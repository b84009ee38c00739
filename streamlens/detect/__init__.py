"""Detectors: batches of frames in, `sv.Detections` per frame out."""

from __future__ import annotations

from ..config import DetectorConfig
from ..errors import DetectorError
from .base import Detector


def build_detector(cfg: DetectorConfig) -> Detector:
    """The detector for the `detector` section of a pipeline file."""
    if cfg.backend == "motion":
        from .motion import MotionDetector

        return MotionDetector(**cfg.options)
    raise DetectorError(f"detector.backend: {cfg.backend!r} is not available in this version yet; "
                        f"use backend: motion")


__all__ = ["Detector", "build_detector"]
