"""The `reid` section as one more `embed` entry of the secondary stage (streamlens/secondary): the
same looks per track (from a track's second keyframe, at the detector's own box), the same worker,
batches and cache, the same `embedding` messages, named `reid`.

- `reid_entry(cfg)`: the entry, made from the `reid` section (`samples` becomes `max_attempts`:
  the track's appearance is the mean of at most that many looks' unit vectors).
- `reid_model(cfg)`: its model: `DescriptorModel` (the weight-free colour and texture
  descriptor, streamlens/reid/appearance.py) without `reid.model`, else the ONNX model through the
  secondary stage's `CropModel` (its first output, flattened, is the vector).

Example:
    >>> from streamlens.config.model import ReidConfig
    >>> model = reid_model(ReidConfig())
    >>> [o.shape for o in model.run([np.zeros((40, 30, 3), np.uint8)])]
    [(1, 60)]
    >>> reid_entry(ReidConfig()).max_attempts
    8
"""

from __future__ import annotations

import numpy as np

from ..config.secondary import SecondaryConfig
from .appearance import CROP_H, CROP_W, DIM, describe_crops

#: the name of the reid entry, its embeddings and their messages
NAME = "reid"
#: what stands for the descriptor where a model's path would be
DESCRIPTOR = "<appearance>"


class DescriptorModel:
    """The weight-free descriptor with the face of a secondary model (`CropModel`): `run(crops)`
    gives one output, a (N, DIM) float32 array of unit rows."""

    path = DESCRIPTOR
    where = "reid"
    outputs = ["appearance"]
    names = None
    imgsz = max(CROP_W, CROP_H)
    #: what the cache keys its outputs by: a new version of the descriptor gets new keys
    id = f"appearance-v1-{CROP_W}x{CROP_H}-{DIM}"
    row_shapes = [(DIM,)]

    def run(self, crops: list[np.ndarray]) -> list[np.ndarray]:
        return [describe_crops(crops)] if crops else []

    def fits(self, outputs: list[np.ndarray]) -> bool:
        return (len(outputs) == 1 and outputs[0].dtype == np.float32 and outputs[0].shape == (DIM,)
                and bool(np.isfinite(outputs[0]).all()))

    def output_index(self, output, where: str | None = None) -> int:
        return 0


def reid_model(cfg):
    """The model of `cfg` (a `ReidConfig`): the descriptor, or its ONNX model (a clear error naming
    `reid.model` when it cannot be loaded)."""
    if cfg.model is None:
        return DescriptorModel()
    from ..secondary.model import CropModel

    return CropModel(cfg.model, imgsz=cfg.imgsz, threads=cfg.threads, where="reid.model", mean=cfg.mean, std=cfg.std)


def reid_entry(cfg) -> SecondaryConfig:
    """The `secondary` entry of kind `embed` that `cfg` (a `ReidConfig`) stands for."""
    return SecondaryConfig.model_construct(
        name=NAME, kind="embed", model=cfg.model if cfg.model is not None else DESCRIPTOR, output=None,
        labels=None, classes=cfg.classes, min_size=cfg.min_size, imgsz=cfg.imgsz, padding=cfg.padding,
        regrow=0.2, every_s=cfg.every_s, max_attempts=cfg.samples, max_batch=cfg.max_batch,
        max_wait_ms=cfg.max_wait_ms, threads=cfg.threads, mean=cfg.mean, std=cfg.std,
        cache=cfg.cache if cfg.cache is not None else cfg.model is not None)


__all__ = ["DescriptorModel", "reid_model", "reid_entry", "NAME"]
