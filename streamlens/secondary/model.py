"""A secondary model: one ONNX file (or an Ultralytics classification .pt) run on batches of crops.

A crop is cut from the frame (BGR, any size), resized to the model's input (its own height and
width when the file fixes them, as a person re-identification model's 256x128; else `imgsz`
square), and given to it as RGB in 0..1, NCHW: what Ultralytics' classifiers take (their
normalisation is the identity). `mean` and `std` (three numbers each, in 0..1 units, RGB order)
normalise each channel first, `(x - mean) / std`, as models trained on ImageNet's statistics expect
(torchreid's OSNet exports: mean 0.485, 0.456, 0.406, std 0.229, 0.224, 0.225).
`run(crops)` returns every output of the model, one array per output with one row per crop: the
entries of `secondary` that name the same model (and input size) share one run per crop, each
reading its own `output`. A model with a fixed batch size runs that many at a time.

Labels come from `labels` (a list or a file), else for the first output the model's metadata
(`names`, as Ultralytics writes it), else the class's index as text.

Example:
    >>> model = CropModel("tests/colour.onnx")           # doctest: +SKIP
    >>> [o.shape for o in model.run([crop_bgr])]         # doctest: +SKIP
    [(1, 3), (1, 2)]
"""

from __future__ import annotations

import ast
import hashlib
import logging
from pathlib import Path

import cv2
import numpy as np

from ..errors import DetectorError
from ..models.cache import model_problem

log = logging.getLogger("streamlens")

#: the input side when neither the model nor the file says
DEFAULT_IMGSZ = 224


def model_id(path: Path, imgsz: int | tuple[int, int], normalise: str = "") -> str:
    """What the cache keys a model's outputs by: a hash of its file's bytes, its input size and its
    normalisation (a model replaced under the same name, or fed otherwise, gets new keys)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    size = f"{imgsz[0]}x{imgsz[1]}" if isinstance(imgsz, tuple) else str(imgsz)
    return f"{digest.hexdigest()[:32]}@{size}{normalise}"


def _names(metadata: dict) -> dict[int, str] | None:
    try:
        names = ast.literal_eval(metadata.get("names", ""))
    except (ValueError, SyntaxError):
        return None
    if isinstance(names, dict):
        return {int(k): str(v) for k, v in names.items()}
    if isinstance(names, list):
        return dict(enumerate(map(str, names)))
    return None


class CropModel:
    """One model file, loaded once, run on batches of crops (see the module's docstring). `where`
    names the entry in errors (`secondary[0].model`)."""

    def __init__(self, path: str | Path, *, imgsz: int | None = None, threads: int | None = None,
                 where: str = "secondary model", mean: list[float] | None = None, std: list[float] | None = None):
        self.path = Path(path)
        self.where = where
        #: per channel (RGB), in 0..1 units: the input is (x - mean) / std; None: x as it is
        self.mean = None if mean is None else np.asarray(mean, np.float32).reshape(1, 3, 1, 1)
        self.std = None if std is None else np.asarray(std, np.float32).reshape(1, 3, 1, 1)
        problem = model_problem(self.path, folder_ok=False)
        if problem is not None:
            raise DetectorError(f"{where}: {problem}")
        if self.path.suffix.lower() == ".pt":
            self._load_ultralytics(imgsz)
        else:
            self._load_onnx(imgsz, threads)
        normalise = "" if mean is None and std is None else f"~{mean}/{std}"
        self.id = model_id(self.path, self.size if self.size[0] != self.size[1] else self.imgsz, normalise)
        # checks the outputs, warms it up, and learns what one crop's outputs look like
        self.row_shapes = [out.shape[1:] for out in self.run([np.zeros((*self.size, 3), np.uint8)])]

    def _load_onnx(self, imgsz: int | None, threads: int | None) -> None:
        import onnxruntime as ort

        from ..detect.onnx import onnx_providers

        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.intra_op_num_threads = int(threads or 1)
        try:
            self.session = ort.InferenceSession(str(self.path), options, providers=onnx_providers("auto"))
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types for every kind of bad file
            raise DetectorError(f"{self.where}: cannot load {self.path}: {str(e).strip().splitlines()[0][:200]}") from None
        inputs = self.session.get_inputs()
        shape = inputs[0].shape if len(inputs) == 1 else None
        if shape is None or len(shape) != 4 or shape[1] not in (3, "3"):
            raise DetectorError(f"{self.where}: {self.path.name}: expected one image input [B, 3, H, W], got "
                                f"{[(i.name, i.shape) for i in inputs]}")
        self._input = inputs[0].name
        self._dtype = np.float16 if "float16" in inputs[0].type else np.float32
        height, width = (d if isinstance(d, int) and d > 0 else None for d in shape[2:])
        fixed = [d for d in (height, width) if d is not None]
        if imgsz is None:
            imgsz = max(fixed) if fixed else DEFAULT_IMGSZ
        elif fixed and any(d != imgsz for d in fixed):
            raise DetectorError(f"{self.where}: {self.path.name} takes {height or '?'}x{width or '?'} inputs "
                                f"(height x width), not imgsz {imgsz}")
        self.imgsz = int(imgsz)
        #: the input's (height, width): the file's own where it fixes them, else imgsz
        self.size = (int(height or imgsz), int(width or imgsz))
        self.fixed_batch = shape[0] if isinstance(shape[0], int) else None
        self.outputs = [o.name for o in self.session.get_outputs()]
        try:
            metadata = dict(self.session.get_modelmeta().custom_metadata_map)
        except Exception:  # noqa: BLE001 - no readable metadata: none
            metadata = {}
        self.names = _names(metadata)
        self._ultralytics = None

    def _load_ultralytics(self, imgsz: int | None) -> None:
        try:
            from ultralytics import YOLO
        except ImportError:
            raise DetectorError(f"{self.where}: a .pt model needs the ultralytics package "
                                "(pip install 'streamlens[ultralytics]')") from None
        try:
            model = YOLO(str(self.path), task="classify")
        except Exception as e:  # noqa: BLE001
            raise DetectorError(f"{self.where}: cannot load {self.path}: {str(e).strip().splitlines()[0][:200]}") from None
        if getattr(model, "task", None) != "classify":
            raise DetectorError(f"{self.where}: {self.path.name} is a {model.task} model, not a classifier")
        if self.mean is not None or self.std is not None:
            raise DetectorError(f"{self.where}: mean and std are for ONNX models (an Ultralytics classifier "
                                "normalises as it was trained)")
        self._ultralytics = model
        self.imgsz = int(imgsz or model.overrides.get("imgsz") or DEFAULT_IMGSZ)
        self.size = (self.imgsz, self.imgsz)
        self.fixed_batch = None
        self.outputs = ["probs"]
        self.names = {int(k): str(v) for k, v in model.names.items()}

    def output_index(self, output: int | str | None, where: str | None = None) -> int:
        """The index of `output` (an index or a name; None: the first), or a clear error naming
        `where` (the entry's key; default: the model's)."""
        if output is None:
            return 0
        if isinstance(output, int):
            if 0 <= output < len(self.outputs):
                return output
        elif output in self.outputs:
            return self.outputs.index(output)
        raise DetectorError(f"{where or self.where}: {self.path.name} has no output {output!r} (it has {self.outputs})")

    def fits(self, outputs: list[np.ndarray]) -> bool:
        """Whether `outputs` (read from a cache) are what `run` gives for one crop: as many arrays, each
        float32 of the model's shape, every number finite; a value of another model or another program
        is not (see secondary/cache.py)."""
        return (len(outputs) == len(self.row_shapes)
                and all(o.dtype == np.float32 and o.shape == shape and np.isfinite(o).all()
                        for o, shape in zip(outputs, self.row_shapes)))

    def prepare(self, crop: np.ndarray) -> np.ndarray:
        """A BGR crop as the model's input: its size, RGB (HxWx3 uint8)."""
        height, width = self.size
        shrink = crop.shape[0] > height or crop.shape[1] > width
        resized = cv2.resize(crop, (width, height), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
        return cv2.cvtColor(resized, cv2.COLOR_BGR2RGB)

    def run(self, crops: list[np.ndarray]) -> list[np.ndarray]:
        """Every output of the model for `crops` (BGR, any sizes): one array per output, a row per crop."""
        if not crops:
            return []
        images = np.stack([self.prepare(c) for c in crops])
        if self._ultralytics is not None:
            results = self._ultralytics.predict(list(images[..., ::-1]), imgsz=self.imgsz, verbose=False)
            return [np.stack([r.probs.data.cpu().numpy() for r in results]).astype(np.float32)]
        batch = images.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255)
        if self.mean is not None:
            batch -= self.mean
        if self.std is not None:
            batch /= self.std
        batch = np.ascontiguousarray(batch, dtype=self._dtype)
        step = self.fixed_batch or len(batch)
        parts = []
        for start in range(0, len(batch), step):
            chunk = batch[start:start + step]
            short = step - len(chunk)
            if self.fixed_batch and short:
                chunk = np.concatenate([chunk, np.zeros((short, *chunk.shape[1:]), chunk.dtype)])
            outs = self.session.run(None, {self._input: chunk})
            parts.append([np.asarray(o)[:len(chunk) - short] for o in outs])
        return [np.concatenate([p[i] for p in parts]).reshape(len(crops), -1).astype(np.float32)
                for i in range(len(self.outputs))]


__all__ = ["CropModel", "model_id", "DEFAULT_IMGSZ"]
