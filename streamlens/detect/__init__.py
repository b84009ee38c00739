"""Detectors: batches of frames in, `sv.Detections` per frame out.

- `motion`: background subtraction, no model (`motion.py`);
- `onnx`: any ONNX detector with a YOLOX or Ultralytics-style head, run by onnxruntime (`onnx.py`);
- `openvino`: the same models (and OpenVINO IR) run by OpenVINO (`openvino_backend.py`; the
  `openvino` extra); slower than onnxruntime on the AMD cores measured (tools/results/detect.md);
- `ultralytics`: any detection model Ultralytics loads, .pt or export, CPU or CUDA (`ultralytics_backend.py`).

Example:
    >>> from streamlens.config import DetectorConfig
    >>> build_detector(DetectorConfig(backend="motion")).names
    {0: 'motion'}
"""

from __future__ import annotations

from ..config import DetectorConfig
from ..errors import DetectorError
from .base import Detector


def build_detector(cfg: DetectorConfig, weak_floor: float | None = None) -> Detector:
    """The detector for the `detector` section of a pipeline file; a `DetectorError` names what is wrong.
    `weak_floor`: a neural detector reports its boxes down to that score too, those under `conf`
    flagged weak (`frame.WEAK`), for a tracker's second stage (`track.weak_floor`)."""
    detector = _build(cfg)
    if weak_floor is not None and hasattr(detector, "floor"):  # the neural backends
        detector.floor = weak_floor
    if cfg.backend != "motion":  # the compiled NMS, ready before the first keyframe
        from .nms import warm_up

        warm_up()
    return detector


def _build(cfg: DetectorConfig) -> Detector:
    if cfg.backend == "motion":
        from .motion import MotionDetector

        return MotionDetector(cfg)
    if cfg.model is None:
        raise DetectorError(f"detector.model: missing (backend {cfg.backend} needs a model file)")
    common = dict(imgsz=cfg.imgsz, conf=cfg.conf, iou=cfg.iou, classes=cfg.classes, names=cfg.names,
                  device=cfg.device, half=bool(cfg.half), resize=cfg.resize, max_batch=cfg.max_batch,
                  max_det=cfg.max_det, agnostic_nms=cfg.agnostic_nms)
    if cfg.backend == "onnx":
        from .onnx import OnnxDetector

        spec = cfg.input.model_dump(exclude_none=True) if cfg.input is not None else None
        return OnnxDetector(cfg.model, input=spec, threads=cfg.threads, **common)
    if cfg.backend == "openvino":
        from .openvino_backend import OpenVinoDetector  # without the openvino package: one line naming the extra

        spec = cfg.input.model_dump(exclude_none=True) if cfg.input is not None else None
        return OpenVinoDetector(cfg.model, input=spec, threads=cfg.threads, **{**common, "half": cfg.half})
    if cfg.backend == "ultralytics":
        try:
            from .ultralytics_backend import UltralyticsDetector
        except ImportError as e:
            raise DetectorError(f"detector.backend: ultralytics needs the ultralytics and torch packages "
                                f"(pip install 'streamlens[ultralytics]'): {e}") from None
        return UltralyticsDetector(cfg.model, **common)
    raise DetectorError(f"detector.backend: {cfg.backend!r}: expected onnx, openvino, ultralytics or motion")


__all__ = ["Detector", "DetectorError", "build_detector"]
