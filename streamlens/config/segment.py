"""The `segment` section: masks for tracked objects (streamlens/segment)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .common import MAX_SECONDS, MAX_THREADS, ModelKey, _Keys, model_checked
from .problems import invalid


class SegmentConfig(_Keys):
    """`segment`: a mask per tracked object, by SAM (its image encoder once per keyframe, its prompt
    decoder once per object, the box as the prompt), or, without `model`, as the detector gives them
    (an Ultralytics `-seg` model); between fresh masks each rides with its track's box."""

    model: ModelKey | None = Field(None, description="an Ultralytics SAM / MobileSAM / SAM 2 .pt, or a SAM-format "
                                                    "ONNX image encoder (default: the detector's own masks)")
    decoder: ModelKey | None = Field(None, description="the ONNX prompt decoder of an ONNX `model`, as "
                                                      "segment-anything's export writes it")
    classes: list[str] | None = Field(None, description="the object labels that get masks (default: all)")
    every_s: float = Field(2.0, gt=0, le=MAX_SECONDS, description="fresh masks for all tracks together, once per "
                                                                  "this many seconds of the source's time (on the "
                                                                  "first keyframe of each step; a new track at once); "
                                                                  "in between each moves and scales with its box")
    output: Literal["polygon", "rle", "none"] = Field("polygon", description="each object's `mask` in results: "
                                                      "COCO polygons or COCO RLE, or none (drawn and used, not sent)")
    min_size: int = Field(8, ge=1, le=10_000, description="the least side of a box that gets a mask, in pixels")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda|cuda:[0-9]+)$", description="a .pt model's device: "
                                                                                      "auto, cpu, cuda, cuda:N")
    runtime: Literal["auto", "torch", "onnx", "openvino"] = Field(
        "auto", description="what runs the image encoder: a .pt's encoder exported once to ONNX (kept beside it) "
                            "and run by onnxruntime or OpenVINO, or torch; auto: OpenVINO where installed, else "
                            "onnxruntime (torch on a GPU)")
    bf16: bool = Field(True, description="run the encoder in bfloat16 (OpenVINO) where the CPU has it "
                                         "(avx512_bf16 or amx_bf16); false: always float32")
    threads: int | None = Field(None, ge=1, le=MAX_THREADS, description="the encoder's threads for onnxruntime and "
                                                                        "OpenVINO (default: every core; with "
                                                                        "runtime.workers, each engine its share)")
    cache: bool = Field(True, description="keep the encoder's embeddings by the frame's pixel hash "
                                          "(runtime.cache.redis is shared with them)")
    cache_items: int = Field(16, ge=0, le=10_000, description="embeddings kept in memory (LRU; each is a few MB)")

    @field_validator("model", "decoder")
    @classmethod
    def _exists(cls, path: Path) -> Path:
        return model_checked(path, folder_ok=False)

    @model_validator(mode="after")
    def _pair(self) -> SegmentConfig:
        model, decoder = self.model, self.decoder
        if model is not None and model.suffix.lower() == ".onnx" and decoder is None:
            raise invalid("no decoder", decoder=f"an ONNX encoder ({model.name}) needs its prompt decoder")
        if decoder is not None and (model is None or model.suffix.lower() != ".onnx"):
            raise invalid("a decoder without an encoder", decoder="only an ONNX `model` takes a separate decoder")
        if model is not None and model.suffix.lower() not in (".onnx", ".pt", ".pth"):
            raise invalid("not a model", model=f"expected a .pt or .onnx file, got {model.name}")
        return self
