"""`backend: onnx`: any ONNX detector with a known head, run by onnxruntime.

What the model is comes from the model: its input (one image tensor [B, 3, H, W], float32 or
float16, fixed or dynamic sizes), its output's shape (which head, how many classes; see `heads.py`)
and Ultralytics' metadata when it has some (input size, names, end-to-end). What a model cannot say
comes from the pipeline file (`imgsz`, `names`, `input`; see `input_spec.py`). At start the model
runs once on a blank input: that checks the output against the known heads before any frame
arrives, and warms it up.

Masks: a model with a second output of rank 4 is taken for a `-seg` model (YOLOv8/11-seg: the
first output [B, 4 + C + 32, N], the second the prototypes [B, 32, H/4, W/4]); it then gives each
box its mask (`gives_masks`), made as the `ultralytics` backend makes it (`heads.mask_logits`).

Batches: a model with a dynamic batch runs up to `max_batch` frames at once; one with a fixed batch
B runs B at a time (a short chunk is padded with blank images).

`bucket` runs each frame at the smallest stride multiple that holds it letterboxed (416x256 for a 16:9
frame and a 416x416 model: 39% less work than 416x416, the same pixels of the frame). A model exported
with a fixed H and W is loaded with those two dimensions freed (the `onnx` package edits the graph's
declared input in memory; the file is not touched) and must then run at another size, else it is one
clear error: fully convolutional detectors such as YOLOX do.

Devices: `cpu`, `cuda`/`cuda:N` (onnxruntime-gpu's CUDA provider), or `auto` (CUDA when the
provider is there). FP16 means a model exported in FP16: its input type says so.

Example:
    >>> detector = OnnxDetector("../shared/data/models/yolox_nano/yolox_nano.onnx", classes=["car"])  # doctest: +SKIP
    >>> detector.head.name, detector.spec.size, detector.names[2]                                      # doctest: +SKIP
    ('yolox', (416, 416), 'car')
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ..errors import DetectorError
from ..frame import Frame
from ..models.cache import model_problem
from .heads import Candidates, identify_head
from .input_spec import input_spec_for
from .names import parse_names, resolve_names, wanted_class_ids
from .neural import NeuralDetector, PreparedInput
from .preprocess import to_chw

log = logging.getLogger("streamlens")


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _literal(text: str | None):
    try:
        return ast.literal_eval(text) if text else None
    except (ValueError, SyntaxError):
        return None


def _fixed_size(session) -> tuple[int, int] | None:
    """(w, h) of a one-image-input model whose height and width are fixed numbers, else None."""
    inputs = session.get_inputs()
    if len(inputs) != 1 or len(inputs[0].shape) != 4:
        return None
    height, width = inputs[0].shape[2:]
    return (width, height) if isinstance(width, int) and isinstance(height, int) else None


def free_spatial_dims(path: Path) -> bytes:
    """The model at `path`, serialised with its input's height and width (and its outputs' sizes
    after the batch) declared open: onnxruntime then takes any size the graph can compute."""
    try:
        import onnx
    except ImportError:
        raise DetectorError(f"detector.resize: bucket on {path}, which takes a fixed input size, needs the "
                            f"onnx package (pip install onnx)") from None
    model = onnx.load(str(path))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for dim, name in ((dims[2], "height"), (dims[3], "width")):
        dim.ClearField("dim_value")
        dim.dim_param = name
    for i, output in enumerate(model.graph.output):
        for j, dim in enumerate(output.type.tensor_type.shape.dim[1:], 1):
            dim.ClearField("dim_value")
            dim.dim_param = f"out{i}_{j}"
    return model.SerializeToString()


def onnx_providers(device: str) -> list:
    """onnxruntime execution providers for `device` (auto, cpu, cuda, cuda:N)."""
    available = ort.get_available_providers()
    if device in ("auto", "cpu"):
        use_cuda = device == "auto" and "CUDAExecutionProvider" in available
        return ["CUDAExecutionProvider", "CPUExecutionProvider"] if use_cuda else ["CPUExecutionProvider"]
    if device == "cuda" or device.startswith("cuda:"):
        if "CUDAExecutionProvider" not in available:
            raise DetectorError(f"detector.device: {device!r}: onnxruntime here has no CUDA provider "
                                f"(it has {', '.join(available)}; install onnxruntime-gpu)")
        index = int(device.split(":")[1]) if ":" in device else 0
        return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]
    raise DetectorError(f"detector.device: {device!r}: expected auto, cpu, cuda or cuda:N")


def _model_metadata(session: ort.InferenceSession) -> dict[str, str]:
    try:
        return dict(session.get_modelmeta().custom_metadata_map)
    except Exception:  # noqa: BLE001 - a model without readable metadata has none
        return {}


class OnnxDetector(NeuralDetector):
    """An ONNX detector run by onnxruntime (see the module's docstring).

    Parameters mirror the `detector` section: `imgsz` is (height, width) or an int; `classes` names or
    ids; `names` a names file; `input` the pixel coding for models without metadata; `max_batch` the
    largest batch per run; `threads` onnxruntime's intra-op threads (None: its default, every core).
    """

    model_kind = "ONNX model"  # what the model file must be, in errors

    def __init__(self, model: str | Path, *, imgsz: int | tuple[int, int] | None = None, conf: float = 0.25,
                 iou: float = 0.45, classes: list[str | int] | None = None, names: str | Path | None = None,
                 device: str = "auto", half: bool = False, resize: str | None = None, input: dict | None = None,
                 max_batch: int = 8, max_det: int = 300, threads: int | None = None,
                 agnostic_nms: bool | str = False):
        super().__init__()
        resize = resize or "letterbox"
        self.path = Path(model)
        where = f"detector.model: {self.path}"
        problem = model_problem(self.path, folder_ok=False)
        if problem is not None:
            raise DetectorError(f"detector.model: {problem}")
        try:
            self.session = self.open_session(device, threads, freed=False)
            exported_size = _fixed_size(self.session)
            freed = resize == "bucket" and exported_size is not None
            if freed:  # the same graph with its input's height and width left open
                self.session = self.open_session(device, threads, freed=True)
        except DetectorError:
            raise
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types for every kind of bad file
            raise DetectorError(f"{where}: not a usable {self.model_kind} ({_short(e)})") from None
        self.prepare_ahead = "CUDAExecutionProvider" in self.session.get_providers()
        meta = _model_metadata(self.session)
        ultralytics = meta.get("author", "").startswith("Ultralytics")
        task = meta.get("task", "detect") if ultralytics else None
        if task not in (None, "detect", "segment"):
            raise DetectorError(f"{where}: an Ultralytics {task!r} model; streamlens runs detection (and -seg) models")

        inputs = self.session.get_inputs()
        if len(inputs) != 1 or len(inputs[0].shape) != 4:
            shapes = ", ".join(f"{i.name} {list(i.shape)}" for i in inputs)
            raise DetectorError(f"{where}: inputs {shapes} do not fit a detector (one image input [B, 3, H, W])")
        self.input_name = inputs[0].name
        batch_dim, channels, height, width = inputs[0].shape
        if isinstance(channels, int) and channels != 3:
            raise DetectorError(f"{where}: input {list(inputs[0].shape)} has {channels} channels; expected 3")
        if inputs[0].type not in ("tensor(float)", "tensor(float16)"):
            raise DetectorError(f"{where}: input type {inputs[0].type}; expected float32 or float16")
        self.input_dtype = np.float16 if inputs[0].type == "tensor(float16)" else np.float32
        if half and self.input_dtype != np.float16:
            raise DetectorError(f"detector.half: {self.path} takes float32; for FP16 with onnx export the model "
                                f"in FP16 (or use backend: ultralytics on CUDA)")
        self.fixed_batch = batch_dim if isinstance(batch_dim, int) and batch_dim > 0 else None
        self.max_batch = self.fixed_batch or max(1, int(max_batch))
        self.max_det = max_det
        self.agnostic_nms = agnostic_nms if agnostic_nms == "auto" else bool(agnostic_nms)
        self.conf, self.iou = float(conf), float(iou)

        fixed = (width, height) if isinstance(width, int) and isinstance(height, int) else None
        if freed:
            fixed = exported_size
        want = (imgsz, imgsz) if isinstance(imgsz, int) else tuple(imgsz) if imgsz else None  # (h, w)
        meta_size = _literal(meta.get("imgsz"))  # "[h, w]" in Ultralytics' metadata
        if fixed is not None:
            if want is not None and (want[1], want[0]) != fixed:
                raise DetectorError(f"detector.imgsz: {list(want)} but {self.path} takes a fixed "
                                    f"{fixed[1]}x{fixed[0]} input (height x width)")
            size = fixed
        elif want is not None:
            size = (want[1], want[0])
        elif isinstance(meta_size, (list, tuple)) and meta_size:
            size = (int(meta_size[1]), int(meta_size[0])) if len(meta_size) == 2 else (int(meta_size[0]),) * 2
        else:
            raise DetectorError(f"detector.imgsz: {self.path} has a dynamic input size and does not say its own; "
                                f"set detector.imgsz")

        outputs = self.session.get_outputs()
        # a `-seg` model: its prototypes [B, M, H/4, W/4] are a second output, of rank 4
        seg = len(outputs) == 2 and len(outputs[1].shape) == 4
        if task == "segment" and not seg:
            shapes = ", ".join(f"{o.name} {list(o.shape)}" for o in outputs)
            raise DetectorError(f"{where}: an Ultralytics 'segment' model whose outputs ({shapes}) are not boxes "
                                f"and prototypes [B, 32, H/4, W/4]")
        self.output_names = [o.name for o in outputs[:2 if seg else 1]]
        raw = self._probe(size, where)
        end2end = str(meta.get("end2end", "False")) == "True" or "'nms': True" in meta.get("args", "")
        self.head = identify_head(tuple(raw[0].shape), size, ultralytics=ultralytics, end2end=end2end, where=where,
                                  prototypes=tuple(raw[1].shape) if seg else None)
        #: a `-seg` model: each box comes with its mask (`detections.data["masks"]`, streamlens/segment)
        self.gives_masks = seg
        if freed:  # it must also run, and give the same head, at a size it was not exported for
            other = (size[0], max(32, size[1] - 5 * 32))
            try:
                raw = self._probe(other, where)
                identify_head(tuple(raw[0].shape), other, ultralytics=ultralytics, end2end=end2end, where=where,
                              prototypes=tuple(raw[1].shape) if seg else None)
            except DetectorError as e:
                raise DetectorError(f"detector.resize: bucket: {self.path} takes a fixed {fixed[1]}x{fixed[0]} "
                                    f"input and does not run at another size ({e})") from None
        self.nms_done = not self.head.needs_nms
        model_names = parse_names(meta["names"]) if "names" in meta else None
        if model_names and self.head.num_classes and len(model_names) != self.head.num_classes:
            raise DetectorError(f"{where}: its metadata names {len(model_names)} classes but its output has "
                                f"{self.head.num_classes}")
        self.names = resolve_names(self.head.num_classes or len(model_names or {}),
                                   names_file=Path(names) if names else None, model_names=model_names, where=where)
        self.wanted = wanted_class_ids(classes, self.names)
        stride = int(meta.get("stride", 32)) if str(meta.get("stride", "32")).isdigit() else 32
        self.spec = input_spec_for(self.head.name, size, resize=resize, yaml_input=input,
                                   ultralytics=ultralytics, stride=stride)
        log.debug("onnx detector %s: head %s, %d classes, input %s, batch %s, providers %s", self.path,
                  self.head.name, len(self.names), size, self.fixed_batch or "dynamic", self.session.get_providers())

    def open_session(self, device: str, threads: int | None, *, freed: bool):
        """The runtime's session for the model (`freed`: with its input's height and width left open).
        A backend on another runtime overrides this with an object of the same face (`openvino_backend.py`)."""
        options = ort.SessionOptions()
        options.log_severity_level = 3
        # No spin-waiting between ops: spinning threads take the CPU from the decode threads that run
        # beside the detector (2 to 8 cores), for a few percent of speed when the model runs alone.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads:
            options.intra_op_num_threads = int(threads)
        source = free_spatial_dims(self.path) if freed else str(self.path)
        return ort.InferenceSession(source, options, providers=onnx_providers(device))

    def _probe(self, size: tuple[int, int], where: str) -> list[np.ndarray]:
        """The model's outputs (`output_names`) on a blank input of `size` (w, h)."""
        probe = np.zeros((self.fixed_batch or 1, 3, size[1], size[0]), self.input_dtype)
        try:
            return self.session.run(self.output_names, {self.input_name: probe})
        except Exception as e:  # noqa: BLE001
            raise DetectorError(f"{where}: fails on a blank {size[1]}x{size[0]} input ({_short(e)})") from None

    def prepare_input(self, frame: Frame) -> PreparedInput:
        canvas, geometry = self.placement(frame)
        return PreparedInput(to_chw(canvas, self.spec), geometry)

    def run_chunk(self, inputs: list[PreparedInput]) -> list[Candidates]:
        count = len(inputs)
        # one input (a live keyframe, the usual case on a CPU) as a view: no copy of its 1.3 MB
        batch = inputs[0].data[None] if count == 1 else np.stack([p.data for p in inputs])
        batch = batch.astype(self.input_dtype, copy=False)
        if self.fixed_batch and count < self.fixed_batch:
            blank = np.zeros((self.fixed_batch - count, *batch.shape[1:]), batch.dtype)
            batch = np.concatenate([batch, blank])
        outputs = self.run_outputs(batch)
        prototypes = outputs[1][:count] if len(outputs) > 1 else None
        return self.head.decode(outputs[0][:count], inputs[0].input_size, self.threshold, self.wanted, prototypes)

    def run_outputs(self, batch: np.ndarray) -> list[np.ndarray]:
        """The model's outputs (float32) for a ready input batch [B, 3, H, W]: the head's, and a
        `-seg` model's prototypes."""
        outputs = self.session.run(self.output_names, {self.input_name: batch})
        return [out.astype(np.float32, copy=False) for out in outputs]

    def run_raw(self, batch: np.ndarray) -> np.ndarray:
        """The model's raw output (float32) for a ready input batch [B, 3, H, W]: the head's."""
        return self.run_outputs(batch)[0]

    def close(self) -> None:
        self.session = None  # type: ignore[assignment]
