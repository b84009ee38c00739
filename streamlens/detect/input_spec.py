"""How an ONNX model wants its pixels: from its metadata where it says, else the YAML, else its head's convention.

The pipeline file can say it under `detector.input`:

    detector:
      backend: onnx
      model: ../models/my_detector.onnx
      input: {channels: bgr, mean: 0, std: 1, pad: corner, pad_value: 114}

- `channels`: `bgr` or `rgb`, the order the model takes;
- `mean`, `std`: a number or three (in the model's channel order), in pixel units: v -> (v - mean) / std;
- `pad`: `corner` (the frame at the top-left) or `center`; `pad_value`: 0-255.

Defaults by head: YOLOX (as its own export and demo do): BGR, 0-255 (mean 0, std 1), corner, 114.
Ultralytics heads: RGB, 0-1 (mean 0, std 255), centre, 114. An Ultralytics export's metadata fixes
these; a YAML value that contradicts it is an error rather than silently ignored.

Example:
    >>> spec = input_spec_for("yolox", (416, 416), resize="letterbox", yaml_input=None, ultralytics=False)
    >>> spec.channels, spec.std, spec.pad
    ('bgr', (1.0, 1.0, 1.0), 'corner')
"""

from __future__ import annotations

from typing import Any

from ..errors import DetectorError
from .preprocess import InputSpec

YOLOX_CONVENTION = {"channels": "bgr", "mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0), "pad": "corner",
                    "pad_value": 114}
ULTRALYTICS_CONVENTION = {"channels": "rgb", "mean": (0.0, 0.0, 0.0), "std": (255.0, 255.0, 255.0),
                          "pad": "center", "pad_value": 114}
INPUT_KEYS = tuple(YOLOX_CONVENTION)


def _triple(value: Any) -> tuple[float, float, float]:
    if isinstance(value, (int, float)):
        return (float(value),) * 3
    return tuple(float(v) for v in value)  # type: ignore[return-value]


def input_spec_for(head: str, size: tuple[int, int], *, resize: str, yaml_input: dict | None, ultralytics: bool,
                   stride: int = 32) -> InputSpec:
    """The `InputSpec` for a model with head `head` at input `size` (w, h)."""
    convention = dict(YOLOX_CONVENTION if head == "yolox" and not ultralytics else ULTRALYTICS_CONVENTION)
    for key, value in (yaml_input or {}).items():
        value = _triple(value) if key in ("mean", "std") else value
        if ultralytics and value != convention[key]:
            raise DetectorError(f"detector.input.{key}: {value!r} contradicts the model's Ultralytics metadata "
                                f"({convention[key]!r}); remove the key")
        convention[key] = value
    if any(s == 0 for s in convention["std"]):
        raise DetectorError(f"detector.input.std: {convention['std']!r}: must not be 0")
    return InputSpec(size=size, resize=resize, stride=stride, **convention)
