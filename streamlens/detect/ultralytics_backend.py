"""`backend: ultralytics`: any detection model Ultralytics loads, on CPU or CUDA, fully offline.

YOLOv5u/v8/11/12/26 and RT-DETR `.pt` files, and their exports (`.onnx`, `_openvino_model/`,
`.engine`, `.torchscript`, ...), through Ultralytics' `AutoBackend`. A `-seg` model (or its export)
gives each box its mask too (`gives_masks`): its mask coefficients times its prototypes, as logits
over the input, made into a `BoxMask` per box in source pixels (streamlens/segment/masks.py), cut at
the box as Ultralytics cuts them. The model must be a local file:
streamlens never lets Ultralytics download weights, probe the network or pip-install anything (see
`ultralytics_offline.py`).

Frames are fitted as Ultralytics trains (centred letterbox, pad 114, RGB, 0-1) by streamlens' own
preprocessing, so boxes map back to source pixels exactly (`preprocess.py`), and NMS is
Ultralytics' own (`non_max_suppression`, on the model's device); RT-DETR and end-to-end heads
choose their own boxes.

On CUDA (the path that matters for throughput):
- `prepare(frame)` letterboxes on the caller's thread (the source's decode thread) straight into
  pinned host memory, so the engine thread only queues copies and the model;
- frames travel as uint8 (a quarter of float32's bytes), copied with `non_blocking=True` on a
  side stream, so the copy of one chunk overlaps the model running on the previous one;
- channel order, scaling and FP16 (`half: true`) are done on the GPU;
- every chunk of a call is queued before any result is read back.

Example:
    >>> detector = UltralyticsDetector("yolov8n.pt", device="cuda", half=True)   # doctest: +SKIP
    >>> detector.device.type, detector.fp16                                      # doctest: +SKIP
    ('cuda', True)
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..errors import DetectorError
from ..frame import Frame
from ..models.cache import model_problem
from .heads import Candidates, is_wanted, mask_logits
from .input_spec import ULTRALYTICS_CONVENTION
from .names import resolve_names, wanted_class_ids
from .neural import NeuralDetector, PreparedInput
from .preprocess import InputSpec, place
from .ultralytics_offline import import_ultralytics_offline

log = logging.getLogger("streamlens")

PINNED_SLOTS = 2


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _tensors(raw) -> list:
    """Every tensor in a model's output (tensors, lists, tuples and dicts nested), in order."""
    if isinstance(raw, (list, tuple)):
        return [t for part in raw for t in _tensors(part)]
    if isinstance(raw, dict):
        return [t for part in raw.values() for t in _tensors(part)]
    return [raw] if hasattr(raw, "ndim") else []


def torch_device(device: str):
    """The `torch.device` for `device` (auto, cpu, cuda, cuda:N); a `DetectorError` if CUDA is asked for but absent."""
    import torch

    if device == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise DetectorError(f"detector.device: {device!r}: no CUDA device is available to torch here")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise DetectorError(f"detector.device: {device!r}: there are {torch.cuda.device_count()} CUDA devices")
        return torch.device(f"cuda:{index}")
    raise DetectorError(f"detector.device: {device!r}: expected auto, cpu, cuda or cuda:N")


class UltralyticsDetector(NeuralDetector):
    """A detection model loaded by Ultralytics (see the module's docstring).

    `imgsz` is (height, width) or an int; by default the export's own size, else 640. `half` runs
    FP16 on CUDA. `resize` defaults to the model's convention, as Ultralytics predicts: letterbox,
    and a plain resize for RT-DETR. `max_batch` is the largest batch per model call (and the size
    of the staging buffers for inputs not made by `prepare_input`).
    """

    def __init__(self, model: str | Path, *, imgsz: int | tuple[int, int] | None = None, conf: float = 0.25,
                 iou: float = 0.45, classes: list[str | int] | None = None, names: str | Path | None = None,
                 device: str = "auto", half: bool = False, resize: str | None = None, max_batch: int = 8,
                 max_det: int = 300, agnostic_nms: bool | str = False):
        super().__init__()
        self.path = Path(model)
        where = f"detector.model: {self.path}"
        problem = model_problem(self.path)  # a file, or an export's folder
        if problem is not None:
            raise DetectorError(f"detector.model: {problem}")
        import_ultralytics_offline()
        import torch
        from ultralytics.nn.autobackend import AutoBackend

        self._torch = torch
        self.device = torch_device(device)
        if half and self.device.type != "cuda":
            if device != "auto":
                raise DetectorError(f"detector.half: FP16 needs a CUDA device (detector.device is {device!r})")
            log.warning("detector.half: no CUDA device here, running FP32 on the CPU")
            half = False
        try:
            self.backend = AutoBackend(str(self.path), device=self.device, fp16=half, fuse=True, verbose=False)
        except DetectorError:
            raise
        except Exception as e:  # noqa: BLE001 - Ultralytics raises anything from a bad file
            raise DetectorError(f"{where}: Ultralytics cannot load it ({_short(e)})") from None
        self.backend.eval()
        task = (getattr(self.backend, "task", None) or getattr(getattr(self.backend, "model", None), "task", None)
                or getattr(self.backend, "metadata", {}).get("task") or "detect")
        if task not in ("detect", "segment"):
            raise DetectorError(f"{where}: a {task!r} model; streamlens runs detection (and -seg) models")
        #: a `-seg` model: each box comes with its mask (`detections.data["masks"]`, streamlens/segment)
        self.gives_masks = task == "segment"
        self.fp16 = bool(self.backend.fp16)
        self.end2end = bool(getattr(self.backend, "end2end", False))
        inner = type(getattr(self.backend, "model", None)).__name__
        description = str(getattr(self.backend, "metadata", {}).get("description", ""))
        self.is_rtdetr = "RTDETR" in inner or "RT-DETR" in description or "rtdetr" in self.path.name.lower()
        resize = resize or ("resize" if self.is_rtdetr else "letterbox")  # RT-DETR trains on stretched frames
        self.nms_done = True  # Ultralytics' NMS (or the model's own selection) runs in run_chunk
        self.conf, self.iou, self.max_det = float(conf), float(iou), max_det
        self.agnostic_nms = agnostic_nms if agnostic_nms == "auto" else bool(agnostic_nms)
        self.max_batch = max(1, int(max_batch))

        meta_size = getattr(self.backend, "metadata", {}).get("imgsz")
        dynamic = self.backend.format == "pt" or bool(getattr(self.backend, "dynamic", False))
        want = (imgsz, imgsz) if isinstance(imgsz, int) else tuple(imgsz) if imgsz else None  # (h, w)
        if not dynamic and meta_size and want and tuple(want) != tuple(meta_size):
            raise DetectorError(f"detector.imgsz: {list(want)} but {self.path} was exported for a fixed "
                                f"{list(meta_size)} input")
        height, width = want or (tuple(meta_size) if meta_size else (640, 640))
        if resize == "bucket" and not dynamic:
            raise DetectorError(f"detector.resize: bucket needs a model with dynamic input sizes; {self.path} "
                                f"was exported for a fixed {height}x{width}")
        self.stride = int(getattr(self.backend, "stride", 32) or 32)
        convention = {k: v for k, v in ULTRALYTICS_CONVENTION.items()}
        self.spec = InputSpec(size=(width, height), resize=resize, stride=self.stride, **convention)
        self.names = resolve_names(len(self.backend.names), names_file=Path(names) if names else None,
                                   model_names=dict(self.backend.names), where=where)
        self.wanted = wanted_class_ids(classes, self.names)
        self._classes = None if self.wanted is None else [int(c) for c in self.wanted]

        self._cuda = self.prepare_ahead = self.device.type == "cuda"
        self._pinned: list = []  # staging buffers for inputs made outside prepare_input (see _staged)
        if self._cuda:
            self._copy_stream = torch.cuda.Stream(device=self.device)
            self._slot = 0
        self.backend.warmup(imgsz=(1, 3, height, width))
        log.debug("ultralytics detector %s: format %s, device %s, fp16 %s, input %dx%d, %d classes",
                  self.path, self.backend.format, self.device, self.fp16, height, width, len(self.names))

    # -- preprocessing ------------------------------------------------------------------------

    def prepare_input(self, frame: Frame) -> PreparedInput:
        """The frame letterboxed into a uint8 BGR image of the input size (channel order and scale: on
        the device). On CUDA it is letterboxed straight into pinned memory (torch's caching host
        allocator, which reuses a block only once the copies that read it have finished), so the
        batch goes to the GPU with no further copy on the host."""
        if not self._cuda or frame.region is not None:  # a region: placed, then copied if on CUDA
            canvas, geometry = self.placement(frame)
            if not self._cuda:
                return PreparedInput(canvas, geometry)
            host = self._torch.empty(canvas.shape, dtype=self._torch.uint8, pin_memory=True)
            host.numpy()[...] = canvas
            return PreparedInput(host, geometry)
        geometry = self.spec.geometry((frame.width, frame.height))
        width, height = geometry.input_size
        host = self._torch.empty((height, width, 3), dtype=self._torch.uint8, pin_memory=True)
        place(frame.image, geometry, self.spec.pad_value, out=host.numpy())
        return PreparedInput(host, geometry)

    def _to_device(self, inputs: list[PreparedInput]):
        """The batch as an N x H x W x 3 uint8 tensor on the device. On CUDA the copies run on a side
        stream, non-blocking, from pinned memory: each input's own (from `prepare_input`), or a
        staging buffer that inputs made elsewhere (numpy arrays) are gathered into first."""
        torch = self._torch
        if not self._cuda:
            return torch.from_numpy(np.stack([p.data for p in inputs]))
        width, height = inputs[0].input_size
        with torch.cuda.stream(self._copy_stream):
            if all(isinstance(p.data, torch.Tensor) and p.data.is_pinned() for p in inputs):
                device_batch = torch.empty((len(inputs), height, width, 3), dtype=torch.uint8, device=self.device)
                for row, p in zip(device_batch, inputs):
                    row.copy_(p.data, non_blocking=True)
            else:
                device_batch = self._staged(inputs, width, height)
        compute = torch.cuda.current_stream(self.device)
        compute.wait_stream(self._copy_stream)
        device_batch.record_stream(compute)  # the allocator must not reuse it before the model has read it
        return device_batch

    def _staged(self, inputs: list[PreparedInput], width: int, height: int):
        """Numpy inputs gathered into one of `PINNED_SLOTS` pinned buffers and copied (on the copy stream)."""
        torch = self._torch
        if not self._pinned:
            capacity = self.max_batch * height * width * 3
            self._pinned = [torch.empty(capacity, dtype=torch.uint8).pin_memory() for _ in range(PINNED_SLOTS)]
            self._copied = [torch.cuda.Event() for _ in range(PINNED_SLOTS)]
        slot = self._slot
        self._slot = (slot + 1) % PINNED_SLOTS
        self._copied[slot].synchronize()  # the last copy out of this buffer has finished
        host = self._pinned[slot][: len(inputs) * height * width * 3].view(len(inputs), height, width, 3)
        host_array = host.numpy()
        for i, p in enumerate(inputs):
            host_array[i] = p.data.numpy() if isinstance(p.data, torch.Tensor) else p.data
        device_batch = host.to(self.device, non_blocking=True)
        self._copied[slot].record(self._copy_stream)
        return device_batch

    def _model_input(self, batch_hwc):
        """uint8 N x H x W x 3 BGR -> the model's N x 3 x H x W RGB in 0-1 (FP16 when `half`)."""
        x = batch_hwc.permute(0, 3, 1, 2).flip(1)  # BGR -> RGB; flip copies, into channels-last order
        x = x.half() if self.fp16 else x.float()
        return x.div_(255.0)

    # -- inference ----------------------------------------------------------------------------

    def run_groups(self, groups: list[list[PreparedInput]]) -> list[list[Candidates]]:
        """Queue every chunk on the device, then read the results back (so copies and compute overlap)."""
        with self._torch.inference_mode():
            launched = [(chunk, self.backend(self._model_input(self._to_device(chunk)))) for chunk in groups]
            return [self._candidates(chunk, raw) for chunk, raw in launched]

    def run_chunk(self, inputs: list[PreparedInput]) -> list[Candidates]:
        return self.run_groups([inputs])[0]

    def run_raw(self, batch_hwc: np.ndarray):
        """The model's raw output (first tensor, float32 numpy) for letterboxed uint8 BGR images N x H x W x 3."""
        with self._torch.inference_mode():
            torch = self._torch
            raw = self.backend(self._model_input(torch.from_numpy(batch_hwc).to(self.device)))
            raw = raw[0] if isinstance(raw, (list, tuple)) else raw
            return raw.float().cpu().numpy()

    def _candidates(self, chunk: list[PreparedInput], raw) -> list[Candidates]:
        torch = self._torch
        if self.is_rtdetr:
            return self._rtdetr_candidates(chunk, raw)
        from ultralytics.utils.nms import non_max_suppression

        protos = None
        if self.gives_masks:  # [boxes, classes and mask coefficients], prototypes: however nested
            tensors = _tensors(raw)
            raw = next(t for t in tensors if t.ndim == 3)
            protos = next(t for t in tensors if t.ndim == 4)
        kept = non_max_suppression(raw, self.threshold, self.iou, self._classes, agnostic=self.agnostic_nms is True,
                                   max_det=self.max_det, max_time_img=1.0, end2end=self.end2end,
                                   nc=len(self.names) if protos is not None else 0)
        out = []
        for i, rows in enumerate(kept):
            logits = None
            if protos is not None:  # each box's mask logits over the whole input: coefficients x prototypes
                logits = mask_logits(rows[:, 6:].float(), protos[i].float()).cpu().numpy()
            rows = rows.float().cpu().numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows, np.float32)
            out.append(Candidates(rows[:, :4].astype(np.float32), rows[:, 4].astype(np.float32),
                                  rows[:, 5].astype(np.int64), logits,
                                  protos.shape[-1] / chunk[0].input_size[0] if protos is not None else 1.0))
        return out

    def under_conf(self, scores: np.ndarray) -> np.ndarray:
        """As `NeuralDetector.under_conf`, in the precision the model's NMS compares in (FP16 with `half`)."""
        return ~(scores > (np.float16(self.conf) if self.fp16 else self.conf))

    def _rtdetr_candidates(self, chunk: list[PreparedInput], raw) -> list[Candidates]:
        """RT-DETR: [B, K, 6] of cx cy w h (0-1 of the input), score, class; no NMS."""
        raw = raw[0] if isinstance(raw, (list, tuple)) else raw
        rows_all = raw.float().cpu().numpy()
        width, height = chunk[0].input_size
        out = []
        for rows in rows_all:
            keep = rows[:, 4] > self.threshold
            if self.wanted is not None:
                keep &= is_wanted(rows[:, 5].astype(np.int64), self.wanted)
            rows = rows[keep][np.argsort(-rows[keep, 4], kind="stable")][: self.max_det]
            cx, cy, w, h = (rows[:, 0] * width, rows[:, 1] * height, rows[:, 2] * width, rows[:, 3] * height)
            boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1).astype(np.float32)
            out.append(Candidates(boxes, rows[:, 4].astype(np.float32), rows[:, 5].astype(np.int64)))
        return out

    def close(self) -> None:
        self.backend = None  # type: ignore[assignment]
        self._pinned = []
