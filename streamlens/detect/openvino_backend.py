"""`backend: openvino`: the onnx backend's models, checks and preprocessing, run by OpenVINO.

Everything but the runtime is `OnnxDetector`'s: the model's checks, its head (`heads.py`), names,
input convention (`input_spec.py`), the resize modes and the decode. Only the session differs:
`OpenVinoSession` gives OnnxDetector the face of an onnxruntime session (inputs, outputs, run,
metadata, providers) over OpenVINO's `Core.compile_model`.

- Models: ONNX files (the same as `backend: onnx`, and the INT8 ONNX that `streamlens quantize`
  writes), and OpenVINO IR (`.xml` beside its `.bin`). The ONNX metadata (Ultralytics' names,
  imgsz, stride, task) comes through OpenVINO's reading of the model (`rt_info["framework"]`), and
  stays in an IR that OpenVINO saved from it.
- Shapes: the model is compiled for each input shape it is given (static shapes are OpenVINO's fast
  path on a CPU), once, and kept (`MAX_SHAPES`, least recently used out). `resize: bucket` sends a
  few shapes (one per frame shape: 416x256 for 16:9), a dynamic batch one per batch size; each new
  shape costs one compile (about 0.1-0.4 s for YOLOX-Nano on these cores) the first time it comes.
  A model exported for a fixed height and width is reshaped in memory for `bucket`, as onnx does.
- CPU settings: the LATENCY hint (one stream: a batch is one inference), `detector.threads` as
  INFERENCE_NUM_THREADS (default: OpenVINO's, every core), no CPU pinning (decode threads run beside
  it), and the CPU's own precision: BF16 where it computes it natively (AVX-512 BF16, as on AMD Zen 4
  and Intel from Cooper Lake, or AMX: `streamlens.cpu.has_bf16`), FP32 elsewhere; `detector.half:
  false` keeps FP32 everywhere (onnxruntime's boxes), `half: true` leaves the choice to OpenVINO
  (BF16 where the CPU has it, FP16 on Intel GPUs). An INT8 model (`quantized`) keeps FP32 beside its
  INT8 layers unless `half: true` asks otherwise: on a Xeon with AMX, OpenVINO 2026.4's CPU plugin
  cannot compile the INT8 YOLOX-Nano that `streamlens quantize` writes in BF16 ("No suitable
  implementations"), and does in FP32. On a Xeon with AMX, YOLOX-Nano ran 1.2-1.4x faster
  in BF16 than in FP32, its boxes agreeing with FP32's at F1 0.976-0.979; on an AMD EPYC with AVX-512
  BF16, 0.72x OpenVINO FP32's time and 0.85x onnxruntime's, boxes at F1 0.983 against FP32's
  (tools/results/detect_bf16.md). With
  `threads: 1` the inference runs on the calling thread, so the detector thread's low priority
  covers it, as with onnxruntime.
- Devices: `auto` and `cpu` are OpenVINO's CPU; `gpu`, `gpu.N`, `npu` name OpenVINO's devices
  (Intel graphics and NPUs) when this machine has them; anything else is one clear error.

Why a backend of its own rather than a `runtime:` key under `backend: onnx`: the backends already
name their runtime (`onnx` is onnxruntime, `ultralytics` is torch); OpenVINO has devices of its own
(`device: gpu` or `npu` mean Intel's, `cuda` means nothing to it) and a model format of its own
(IR), which a key under `onnx` would have to reject case by case; and one word switches a pipeline.

Example:
    >>> detector = OpenVinoDetector("../shared/data/models/yolox_nano/yolox_nano.onnx", threads=1)  # doctest: +SKIP
    >>> detector.head.name, detector.session.get_providers()                                        # doctest: +SKIP
    ('yolox', ['OpenVINO CPU'])
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..cpu import has_bf16
from ..errors import DetectorError
from .onnx import OnnxDetector

if TYPE_CHECKING:
    import openvino as ov

#: compiled input shapes kept per model
MAX_SHAPES = 16

_TYPES = {"f32": "tensor(float)", "f16": "tensor(float16)", "u8": "tensor(uint8)", "i64": "tensor(int64)",
          "i32": "tensor(int32)"}


def import_openvino():
    """The openvino package, or one DetectorError line naming the extra that brings it (imported
    only here, so that the module loads, and its docs build, without it)."""
    try:
        import openvino
    except ImportError as e:
        raise DetectorError(f"detector.backend: openvino needs the openvino package "
                            f"(pip install 'streamlens[openvino]'): {e}") from None
    return openvino


@dataclass(frozen=True, slots=True)
class Port:
    """An input or output as onnxruntime describes it: dynamic dimensions are names (str)."""

    name: str
    shape: list
    type: str


@dataclass(frozen=True, slots=True)
class _Meta:
    custom_metadata_map: dict[str, str]


def openvino_device(core: ov.Core, device: str) -> str:
    """OpenVINO's device name for `detector.device`: auto and cpu are the CPU; gpu, gpu.N, npu pass
    through when this machine has them."""
    wanted = device.strip().upper()
    if wanted in ("AUTO", "CPU"):
        return "CPU"
    available = core.available_devices  # e.g. ['CPU', 'GPU.0', 'GPU.1'] or ['CPU', 'GPU', 'NPU']
    if wanted.split(".")[0] in ("GPU", "NPU") and (
            wanted in available or any(d.split(".")[0] == wanted for d in available)):
        return wanted  # "GPU" is OpenVINO's name for its first GPU too
    raise DetectorError(f"detector.device: {device!r}: backend openvino runs on OpenVINO's devices, here "
                        f"{', '.join(d.lower() for d in available)} (auto and cpu mean cpu; for CUDA use "
                        f"backend onnx or ultralytics)")


def read_model(core: ov.Core, path: Path) -> ov.Model:
    """An OpenVINO IR (`.xml`) or, any other name, an ONNX file: read by that frontend only (OpenVINO's
    `read_model` tries every frontend it has on a bad file, and TensorFlow's logs to stderr). Errors
    are one line: the frontend's own last words."""
    try:
        if path.suffix.lower() == ".xml":
            return core.read_model(str(path))
        from openvino.frontend import FrontEndManager

        frontend = FrontEndManager().load_by_framework("onnx")
        return frontend.convert(frontend.load(str(path)))
    except Exception as e:  # noqa: BLE001 - OpenVINO raises RuntimeError / GeneralFailure, with C++ frames
        raise RuntimeError(openvino_error(e)) from None


def quantized(model: ov.Model) -> bool:
    """Whether `model` has INT8 layers: OpenVINO reads an ONNX model's QuantizeLinear and
    DequantizeLinear pairs (`streamlens quantize` writes them) as FakeQuantize nodes."""
    return any(op.get_type_name() == "FakeQuantize" for op in model.get_ops())


def openvino_error(error: BaseException) -> str:
    """OpenVINO's message without its C++ frames ("Exception from src/...", "Check '...' failed at")."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("Exception from ", "Check '", "FrontEnd API failed"))]
    return (said or lines or [type(error).__name__])[-1]


def _ports(outputs, free_spatial: bool = False) -> list[Port]:
    ports = []
    for i, port in enumerate(outputs):
        dims = [d.get_length() if d.is_static else f"d{i}_{j}" for j, d in enumerate(port.get_partial_shape())]
        if free_spatial and len(dims) == 4:
            dims[2:] = ["height", "width"]
        kind = port.get_element_type().get_type_name()
        ports.append(Port(port.get_any_name(), dims, _TYPES.get(kind, kind)))
    return ports


class OpenVinoSession:
    """An onnxruntime session's face over OpenVINO (see the module's docstring): `get_inputs`,
    `get_outputs`, `run`, `get_modelmeta`, `get_providers`. `free_spatial`: the model takes any
    input height and width (it is reshaped per shape)."""

    def __init__(self, path: str | Path, *, device: str = "auto", threads: int | None = None,
                 free_spatial: bool = False, half: bool | None = False):
        self.ov = ov = import_openvino()
        self.core = ov.Core()
        self.device = openvino_device(self.core, device)
        self.model = read_model(self.core, Path(path))
        self.free_spatial = free_spatial
        self.config: dict[str, object] = {"PERFORMANCE_HINT": "LATENCY"}
        if self.device == "CPU":
            self.config["ENABLE_CPU_PINNING"] = False
            if half is None:  # the CPU's own precision where it has one (see the module's docs)
                self.config["INFERENCE_PRECISION_HINT"] = "bf16" if has_bf16() and not quantized(self.model) else "f32"
            elif not half:
                self.config["INFERENCE_PRECISION_HINT"] = "f32"
            # half: OpenVINO's own choice (BF16 where the CPU has it, FP16 on Intel GPUs)
            if threads:
                self.config["INFERENCE_NUM_THREADS"] = int(threads)
        self._inputs = _ports(self.model.inputs, free_spatial)
        self._outputs = _ports(self.model.outputs)
        self._output_index = {p.name: i for i, p in enumerate(self._outputs)}
        self._requests: OrderedDict[tuple[int, ...], ov.InferRequest] = OrderedDict()

    def get_inputs(self) -> list[Port]:
        return list(self._inputs)

    def get_outputs(self) -> list[Port]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return [f"OpenVINO {self.device}"]

    def get_modelmeta(self) -> _Meta:
        """The ONNX model's metadata_props (kept by OpenVINO in rt_info["framework"], also in IR it saved)."""
        info = self.model.get_rt_info()
        framework = info["framework"] if "framework" in info else {}
        return _Meta({str(k): v.astype(str) for k, v in dict(framework).items()})

    def request(self, shape: tuple[int, ...]) -> ov.InferRequest:
        """The inference request compiled for an input of `shape`, compiled now the first time."""
        request = self._requests.get(shape)
        if request is not None:
            self._requests.move_to_end(shape)
            return request
        declared, wanted = self.model.inputs[0].get_partial_shape(), self.ov.PartialShape(list(shape))
        if declared.is_static and tuple(declared.to_shape()) == shape:
            model = self.model
        elif self.free_spatial or declared.compatible(wanted):
            model = self.model.clone()
            model.reshape({model.inputs[0]: wanted})
        else:
            raise ValueError(f"input shape {list(shape)} does not fit the model's {declared}")
        try:
            request = self.core.compile_model(model, self.device, self.config).create_infer_request()
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(f"OpenVINO cannot compile it for {list(shape)} ({openvino_error(e)})") from None
        self._requests[shape] = request
        while len(self._requests) > MAX_SHAPES:
            self._requests.popitem(last=False)
        return request

    def run(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs (copies: OpenVINO reuses its buffers) for one input, like `InferenceSession.run`."""
        (data,) = feeds.values()
        data = np.ascontiguousarray(data)
        request = self.request(tuple(data.shape))
        request.infer({0: data}, share_inputs=True)
        names = output_names or [p.name for p in self._outputs]
        return [request.get_output_tensor(self._output_index[name]).data.copy() for name in names]


class OpenVinoDetector(OnnxDetector):
    """`OnnxDetector` run by OpenVINO: the same parameters (`threads`: INFERENCE_NUM_THREADS;
    `device`: auto, cpu, gpu, gpu.N, npu; `half`: the device's own reduced precision, not an FP16
    model) and the same models, plus OpenVINO IR (.xml)."""

    model_kind = "ONNX or OpenVINO IR model"

    def __init__(self, model, *, half: bool | None = None, **options):
        import_openvino()  # first: without the package, that is the error (not "not a usable model")
        self.half = half  # read by open_session, which the base class calls
        super().__init__(model, **options)

    def open_session(self, device: str, threads: int | None, *, freed: bool) -> OpenVinoSession:
        return OpenVinoSession(self.path, device=device, threads=threads, free_spatial=freed, half=self.half)

    @property
    def precision(self) -> str:
        """The precision the model runs in on a CPU: "bf16" or "f32" (OpenVINO's own where `half`)."""
        hint = self.session.config.get("INFERENCE_PRECISION_HINT")
        return str(hint) if hint is not None else "auto"


__all__ = ["OpenVinoDetector", "OpenVinoSession", "import_openvino", "openvino_device", "quantized", "read_model"]
