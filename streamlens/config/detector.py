"""The `detector` section: which keys each backend takes, and `detector.input`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, field_validator, model_validator

from .common import (INT_MAX, MAX_BATCH, MAX_IMGSZ, MAX_MS, MAX_SECONDS, MAX_THREADS, ModelKey, PathKey, _Keys,
                     _misplaced_keys, _only, model_checked)
from .problems import invalid, show

_NEURAL = "backend onnx, openvino or ultralytics"
_ONNX = "backend onnx or openvino"
_MOTION = "backend motion"


def _imgsz(value: Any) -> Any:
    """One side, or [height, width], each 32 to MAX_IMGSZ pixels."""
    sides = value if isinstance(value, (list, tuple)) and len(value) == 2 else [value, value]
    if all(isinstance(v, int) and not isinstance(v, bool) and 32 <= v <= MAX_IMGSZ for v in sides):
        return (sides[0], sides[1])
    raise invalid(f"expected an integer from 32 to {MAX_IMGSZ} or [height, width], got {show(value)}")


def _auto_or_bool(value: Any) -> Any:
    if value is True or value is False or value == "auto":
        return value
    raise invalid(f"expected auto, true or false, got {show(value)}")


def _classes(value: Any) -> Any:
    if isinstance(value, list):
        bad = {f"[{j}]": f"expected a class name or id, got {show(c)}" for j, c in enumerate(value)
               if not isinstance(c, (str, int)) or isinstance(c, bool)}
        if bad:
            raise invalid("bad classes", **bad)
    return value


def _pixel_triple(positive: bool):
    """`mean`/`std` of detector.input: a number or a list of three numbers (`std`: positive)."""
    def check(value: Any) -> Any:
        values = value if isinstance(value, list) else [value]
        ok = len(values) in (1, 3) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        try:
            ok = ok and all(abs(float(v)) < float("inf") and (not positive or v > 0) for v in values)
        except OverflowError:  # an integer past any float
            ok = False
        if not ok:
            raise invalid(f"expected {'a positive number' if positive else 'a number'} or a list of three, "
                          f"got {show(value)}")
        return [float(v) for v in values] * (3 if len(values) == 1 else 1)
    return check


_TRIPLE = {"anyOf": [{"type": "number"}, {"type": "array", "items": {"type": "number"}, "minItems": 3,
                                          "maxItems": 3}]}


class InputConfig(_Keys):
    """detector.input: how an ONNX model without metadata wants its pixels (see detect/input_spec.py)."""

    channels: Literal["bgr", "rgb"] | None = None
    mean: Annotated[list[float] | None, BeforeValidator(_pixel_triple(False)), WithJsonSchema(_TRIPLE)] = None
    std: Annotated[list[float] | None, BeforeValidator(_pixel_triple(True)), WithJsonSchema(_TRIPLE)] = None
    pad: Literal["corner", "center"] | None = None
    pad_value: int | None = Field(None, ge=0, le=255)


class DetectorConfig(_Keys):
    """The `detector` section. Which keys a backend takes is in each field's schema (`only_for`)."""

    backend: Literal["onnx", "openvino", "ultralytics", "motion"] = Field(
        description="onnx (onnxruntime), openvino (the same ONNX models run by OpenVINO), ultralytics (YOLO, "
                    "RT-DETR and their exports) or motion (no model)")
    max_batch: int = Field(4, ge=1, le=MAX_BATCH, description="keyframes per detector call, at most (a model "
                           "with a fixed batch: its own, if smaller)")
    max_wait_ms: float = Field(10.0, ge=0, le=MAX_MS, description="how long a batch waits to fill")
    budget_ms: float | None = Field(33.0, ge=0, le=MAX_MS, description="how long a keyframe may take from its "
                                    "frame becoming available to its detections (0: no budget)")
    model: ModelKey | None = Field(None, json_schema_extra=_only(_NEURAL),
                                   description="the model file or folder, or models:NAME: one `streamlens models "
                                               "pull` put in the cache")
    imgsz: Annotated[tuple[int, int] | None, BeforeValidator(_imgsz), WithJsonSchema(
        {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}, "minItems": 2,
                                         "maxItems": 2}]})] = Field(
        None, json_schema_extra=_only(_NEURAL), description="the model input: one side, or [height, width]")
    conf: float = Field(0.25, ge=0, le=1, json_schema_extra=_only(_NEURAL), description="the least score kept")
    iou: float = Field(0.45, ge=0, le=1, json_schema_extra=_only(_NEURAL), description="NMS overlap")
    classes: Annotated[list[str | int] | None, BeforeValidator(_classes)] = Field(
        None, json_schema_extra=_only(_NEURAL), description="the classes kept, by name or id (default: all)")
    names: PathKey | None = Field(None, json_schema_extra=_only(_NEURAL),
                                  description="a file of class names, when the model has none")
    device: str = Field("auto", json_schema_extra=_only(_NEURAL), description="auto, cpu, cuda or cuda:N")
    half: bool | None = Field(None, json_schema_extra=_only(_NEURAL),
                              description="reduced precision: FP16 on CUDA (ultralytics; onnx: an FP16 model); "
                                          "openvino: the device's own (BF16 on CPUs with AMX or AVX-512 BF16, FP16 "
                                          "on Intel GPUs); unset: off, but BF16 for openvino on a CPU that has it "
                                          "(false: FP32 there too)")
    resize: Literal["letterbox", "resize", "bucket"] | None = Field(
        None, json_schema_extra=_only(_NEURAL), description="how a frame fits the input "
                                                             "(default: letterbox; resize for RT-DETR)")
    agnostic_nms: Annotated[bool | Literal["auto"], BeforeValidator(_auto_or_bool)] = Field(
        "auto", json_schema_extra=_only(_NEURAL),
        description="boxes of different classes on one place: auto (with a tracker, one box where the model sees "
                    "one object as two classes, a van as car and truck, so it is tracked and counted once; "
                    "without, per class), true (NMS across classes at iou), false (per class)")
    regions: Literal["off", "motion"] = Field(
        "off", json_schema_extra=_only(_NEURAL),
        description="what of a keyframe the detector sees: off (the whole frame) or motion (the part that changed "
                    "since the stream's last keyframe, with every tracked box, and the whole frame every "
                    "region_full_s; see docs/regions.md)")
    region_full_s: float = Field(2.0, gt=0, le=MAX_SECONDS, json_schema_extra=_only(_NEURAL),
                                 description="regions: motion: the most seconds between two whole frames of a stream")
    max_det: int = Field(300, ge=1, le=INT_MAX, json_schema_extra=_only(_NEURAL),
                         description="detections per frame, at most")
    input: InputConfig | None = Field(None, json_schema_extra=_only(_ONNX),
                                      description="how the model wants its pixels, when its metadata does not say")
    threads: int | None = Field(None, ge=1, le=MAX_THREADS, json_schema_extra=_only(_ONNX),
                                description="the runtime's inference threads (default: its own)")
    min_area: float | None = Field(None, ge=0, lt=1, json_schema_extra=_only(_MOTION),
                                   description="the least blob, as a fraction of the frame")
    history: int | None = Field(None, ge=1, le=INT_MAX, json_schema_extra=_only(_MOTION),
                                description="frames the background model remembers")
    var_threshold: float | None = Field(None, gt=0, json_schema_extra=_only(_MOTION),
                                        description="how far a pixel must differ from the background")
    work_width: int | None = Field(None, ge=16, le=INT_MAX, json_schema_extra=_only(_MOTION),
                                   description="the width frames are shrunk to first")
    warmup: int | None = Field(None, ge=1, le=INT_MAX, json_schema_extra=_only(_MOTION),
                               description="frames before the first detections")

    @classmethod
    def _keys_checked(cls, data: dict, context: dict) -> dict:
        backend = data.get("backend")
        if backend not in ("onnx", "openvino", "ultralytics", "motion"):
            return {"backend": backend} if "backend" in data else {}  # the backend alone is the mistake
        allowed = {k for k, f in cls.model_fields.items() if not f.json_schema_extra
                   or backend in f.json_schema_extra["only_for"].replace(",", " ").split()[1:]}  # "backend a, b or c"
        misplaced = _misplaced_keys(cls, data, allowed)
        if misplaced:
            raise invalid("misplaced keys", **misplaced)
        return data

    @field_validator("model")
    @classmethod
    def _model(cls, path: Path) -> Path:
        return model_checked(path)

    @field_validator("names")
    @classmethod
    def _names(cls, path: Path) -> Path:
        if not path.is_file():
            raise invalid(f"file not found: {path}")
        return path

    @field_validator("budget_ms")
    @classmethod
    def _budget(cls, value: float | None) -> float | None:
        return value or None  # 0: no budget

    @model_validator(mode="after")
    def _needs_model(self) -> DetectorConfig:
        if self.backend != "motion" and self.model is None:
            raise invalid("missing", model="missing")
        return self

    @property
    def options(self) -> dict[str, Any]:
        """The motion detector's keys that the file gives, by name."""
        return {k: getattr(self, k) for k, f in type(self).model_fields.items()
                if f.json_schema_extra == _only(_MOTION) and getattr(self, k) is not None}
