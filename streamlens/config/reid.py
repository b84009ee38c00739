"""The `reid` section: an appearance per track, and identities across cameras (see docs/reid.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from .common import MAX_BATCH, MAX_IMGSZ, MAX_MS, MAX_SECONDS, MAX_THREADS, ModelKey, _Keys, model_checked
from .problems import invalid
from .secondary import Channels, PositiveChannels


class ReidConfig(_Keys):
    """`reid:`: each confirmed track's appearance, sampled on keyframes (streamlens/reid), published as
    `embedding` messages named `reid`; with `across`, a `global_id` shared by the cameras of a group."""

    model: ModelKey | None = Field(None, description="an ONNX re-identification model (one image input, "
                                                     "one vector out), or models:NAME; default: the "
                                                     "weight-free colour and texture descriptor")
    imgsz: int | None = Field(None, ge=8, le=MAX_IMGSZ, description="the model's input side (default: "
                                                                    "the model's own, else 224)")
    threads: int | None = Field(None, ge=1, le=MAX_THREADS, description="onnxruntime's intra-op threads "
                                                                        "(default 1)")
    classes: list[str] | None = Field(None, description="the object labels it describes (default: all)")
    min_size: int = Field(16, ge=1, le=MAX_IMGSZ, description="the least side of a box it describes, "
                                                              "in pixels")
    padding: float = Field(0.0, ge=0, le=2, description="crop margin, as a share of the box's size")
    mean: Channels | None = Field(None, description="a model's input normalisation per channel (RGB, in 0..1 "
                                                    "units): (x - mean) / std; torchreid's OSNet exports want "
                                                    "ImageNet's [0.485, 0.456, 0.406] (default: none)")
    std: PositiveChannels | None = Field(None, description="per channel (RGB, in 0..1 units); ImageNet's: "
                                                           "[0.229, 0.224, 0.225] (default: none)")
    samples: int = Field(8, ge=1, le=100, description="looks per track, at most; the track's "
                                                      "appearance is their mean")
    every_s: float = Field(0.5, gt=0, le=MAX_SECONDS, description="the least time between two looks "
                                                                  "at a track (unless its box grew)")
    max_batch: int = Field(16, ge=1, le=MAX_BATCH, description="crops per model call, at most")
    max_wait_ms: float = Field(20.0, ge=0, le=MAX_MS, description="how long a batch waits to fill")
    cache: bool | None = Field(None, description="look a model's outputs up by the crop's pixel hash "
                                                 "(runtime.cache); default: on for a model, off for "
                                                 "the descriptor (cheaper than the lookup)")
    across: list[str] | None = Field(None, min_length=2, description="source names whose objects share "
                                                                     "a `global_id`")
    window_s: float = Field(60.0, gt=0, le=MAX_SECONDS, description="how long after a track was last "
                                                                    "seen another camera may link to it")
    threshold: float = Field(0.5, ge=-1, le=1, description="the least appearance similarity of a link "
                                                           "(cosine, centred on the group's mean "
                                                           "appearance: a random pair scores about 0)")
    margin: float = Field(0.1, ge=0, le=2, description="how much a link's similarity must beat the "
                                                        "next candidate's")
    clock: Literal["auto", "wall", "media"] = Field(
        "auto", description="the time that links compare: wall (decode time; cameras), media (each "
                            "stream's own time; files that start together); auto: wall when every "
                            "source of the group is live")

    @field_validator("model")
    @classmethod
    def _model(cls, path: Path) -> Path:
        model_checked(path, folder_ok=False)
        if path.suffix.lower() != ".onnx":
            raise invalid(f"expected an .onnx model, got {path.name}")
        return path

    @field_validator("across")
    @classmethod
    def _across(cls, names: list[str]) -> list[str]:
        again = sorted({n for n in names if names.count(n) > 1})
        if again:
            raise invalid(f"each camera once: {', '.join(again)} named twice")
        return names


def check_across(reid: ReidConfig | None, sources: list, secondary: list = ()) -> None:
    """`reid.across` names sources of the file, and no `secondary` entry takes the name `reid`
    (the section's embeddings have it); the root model calls it."""
    if reid is None:
        return
    for i, entry in enumerate(secondary):
        if entry.name == "reid":
            raise invalid("a name taken", **{f"secondary[{i}].name": "'reid' is the reid section's; "
                                                                     "choose another"})
    if reid.across is None:
        return
    names = {source.name for source in sources}
    missing = [name for name in reid.across if name not in names]
    if missing:
        raise invalid("unknown sources", **{"reid.across": f"no source named {', '.join(map(repr, missing))} "
                                                           f"(sources: {', '.join(sorted(names))})"})


__all__ = ["ReidConfig", "check_across"]
