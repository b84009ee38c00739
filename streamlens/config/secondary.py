"""The `secondary` section, and `runtime.cache`, where the secondary models' outputs are kept."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from ..urls import mask_url
from .common import (MAX_BATCH, MAX_IMGSZ, MAX_MS, MAX_SECONDS, MAX_THREADS, ModelKey, PathKey, _base, _Keys,
                     model_checked, resolve)
from .problems import invalid


#: three numbers, one per colour channel (R, G, B), in 0..1 units
Channels = Annotated[list[Annotated[float, Field(ge=-1, le=1, allow_inf_nan=False)]], Field(min_length=3, max_length=3)]
#: the same, each above zero (a divisor)
PositiveChannels = Annotated[list[Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)]],
                             Field(min_length=3, max_length=3)]


class SecondaryConfig(_Keys):
    """One entry of `secondary`: a model run on the crops of tracked objects, a few times per track
    (see streamlens/secondary)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$", description="the attribute's name in each object's "
                                                               "`attributes` (classify) or the embedding's (embed)")
    kind: Literal["classify", "embed"] = Field(description="classify: labels and scores; embed: a vector per track")
    model: ModelKey = Field(description="an ONNX model (or an Ultralytics classification .pt), or models:NAME")
    output: int | str | None = Field(None, description="which of the model's outputs (index or name; default "
                                                       "the first): entries of one model share one run per crop")
    labels: list[str] | PathKey | None = Field(None, description="the class names, or a file of them, one per "
                                                                 "line (default: the model's metadata)")
    classes: list[str] | None = Field(None, description="the object labels it runs on (default: all)")
    min_size: int = Field(24, ge=1, le=MAX_IMGSZ, description="the least side of a box it runs on, in pixels")
    imgsz: int | None = Field(None, ge=8, le=MAX_IMGSZ, description="the model's input side (default: the "
                                                                    "model's own, else 224)")
    padding: float = Field(0.1, ge=0, le=2, description="crop margin, as a share of the box's size")
    mean: Channels | None = Field(None, description="per channel (RGB, in 0..1 units): the input becomes "
                                                    "(x - mean) / std, e.g. ImageNet's [0.485, 0.456, 0.406] "
                                                    "(default: none)")
    std: PositiveChannels | None = Field(None, description="per channel (RGB, in 0..1 units), e.g. ImageNet's "
                                                           "[0.229, 0.224, 0.225] (default: none)")
    regrow: float = Field(0.2, gt=0, le=100, description="run again when the box has grown by this share of "
                                                         "its area")
    every_s: float | None = Field(None, gt=0, le=MAX_SECONDS, description="run again after this long")
    max_attempts: int = Field(3, ge=1, le=1000, description="runs per track, at most; the answer is the "
                                                            "score-weighted vote over them")
    max_batch: int = Field(8, ge=1, le=MAX_BATCH, description="crops per model call, at most")
    max_wait_ms: float = Field(20.0, ge=0, le=MAX_MS, description="how long a batch waits to fill")
    threads: int | None = Field(None, ge=1, le=MAX_THREADS, description="onnxruntime's intra-op threads "
                                                                        "(default 1)")
    cache: bool = Field(True, description="look its outputs up by the crop's pixel hash (runtime.cache)")

    @field_validator("model")
    @classmethod
    def _model(cls, path: Path) -> Path:
        model_checked(path, folder_ok=False)
        if path.suffix.lower() not in (".onnx", ".pt"):
            raise invalid(f"expected an .onnx or .pt model, got {path.name}")
        return path

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            path = resolve(_base(info), value)
            if not path.is_file():
                raise invalid(f"file not found: {path}")
            return path
        return value


def _unique_secondary(entries: list[SecondaryConfig]) -> list[SecondaryConfig]:
    names = [e.name for e in entries]
    again = sorted({n for n in names if names.count(n) > 1})
    if again:
        raise invalid(f"names must differ: {', '.join(again)} used twice")
    return entries


class CacheConfig(_Keys):
    """`runtime.cache`: the secondary models' outputs by the pixel hash of their crops."""

    items: int = Field(10_000, ge=0, le=10_000_000, description="outputs kept in memory (LRU; 0: none)")
    redis: str | None = Field(None, description="redis://HOST:PORT/DB shared by pipelines and engines "
                                                "(default: memory only)")
    ttl_s: float | None = Field(86_400.0, gt=0, le=MAX_SECONDS * 365, description="how long Redis keeps an output")

    @field_validator("redis")
    @classmethod
    def _redis(cls, url: str) -> str:
        if not re.match(r"^(redis|rediss|unix)://.+", url):
            raise invalid(f"expected redis://HOST:PORT/DB, got {mask_url(url)!r}")
        try:
            import redis  # noqa: F401 - only whether it is there
        except ImportError:
            raise invalid("needs the redis package (pip install 'streamlens[redis]')") from None
        return url
