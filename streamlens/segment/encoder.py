"""SAM's image encoder off torch: a checkpoint's encoder exported once to ONNX (kept beside the
checkpoint), or a user's ONNX encoder, run by onnxruntime or OpenVINO, in float32 or, where the CPU
computes it natively, bfloat16.

- `exported(net, checkpoint)`: `<checkpoint stem>.encoder-<its hash>.onnx` beside the checkpoint,
  written the first time (torch's ONNX export, fixed input `[1, 3, 1024, 1024]`), found after; a new
  checkpoint of the same name has another hash, so never meets a stale export.
- `EncoderSession(path, runtime, bf16, threads)`: `run(x) -> embedding` for one preprocessed input.
  `runtime` is `onnx` (onnxruntime, float32: its CPU kernels have no bfloat16 on x86) or `openvino`
  (`INFERENCE_PRECISION_HINT` bf16 when `bf16` and the CPU has `avx512_bf16` or `amx_bf16`, else f32:
  OpenVINO would pick bf16 by itself on such a CPU, so float32 is asked for explicitly). `threads`:
  the runtime's threads (None: every core).
- `cpu_bf16()`: whether this CPU computes bfloat16 natively (streamlens/cpu.py reads its flags).

Example:
    >>> session = EncoderSession(Path("mobile_sam.encoder-1a2b.onnx"), "openvino", bf16=True)  # doctest: +SKIP
    >>> embedding = session.run(x)                                     # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from ..cpu import has_bf16
from ..errors import DetectorError


def cpu_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (`avx512_bf16` or `amx_bf16`: streamlens/cpu.py)."""
    return has_bf16()


def openvino_installed() -> bool:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def exported(net, checkpoint: Path, side: int = 1024) -> Path:
    """The ONNX export of `net` (a torch image encoder taking `[1, 3, side, side]`) beside `checkpoint`
    (see the module's docstring): made once, then found."""
    digest = hashlib.sha256()
    with open(checkpoint, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    path = checkpoint.with_name(f"{checkpoint.stem}.encoder-{digest.hexdigest()[:12]}.onnx")
    if path.is_file():
        return path
    import torch

    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    try:
        with torch.inference_mode(False), torch.no_grad():
            torch.onnx.export(net.eval(), (torch.zeros(1, 3, side, side),), str(part), input_names=["image"],
                              output_names=["image_embeddings"], opset_version=17, dynamo=False)
        os.replace(part, path)
    except OSError as e:
        raise DetectorError(f"segment.model: cannot write the encoder's ONNX export beside {checkpoint} "
                            f"({e.strerror or e}); set segment.runtime: torch, or make the folder writable") from None
    finally:
        part.unlink(missing_ok=True)
    return path


class EncoderSession:
    """An ONNX image encoder run by onnxruntime or OpenVINO (see the module's docstring)."""

    def __init__(self, path: Path, runtime: str, *, bf16: bool = True, threads: int | None = None):
        self.bf16 = runtime == "openvino" and bf16 and cpu_bf16()
        self.runtime = f"{runtime} {'bf16' if self.bf16 else 'fp32'}"
        try:
            if runtime == "openvino":
                import openvino as ov

                config = {"INFERENCE_PRECISION_HINT": "bf16" if self.bf16 else "f32", "PERFORMANCE_HINT": "LATENCY"}
                if threads:
                    config["INFERENCE_NUM_THREADS"] = int(threads)
                compiled = ov.Core().compile_model(str(path), "CPU", config)
                self._request = compiled.create_infer_request()
                self.input_shape = tuple(compiled.inputs[0].get_partial_shape().to_shape())
                self._run = lambda x: self._request.infer({0: x})[0]
            else:
                import onnxruntime as ort

                options = ort.SessionOptions()
                options.log_severity_level = 3
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                if threads:
                    options.intra_op_num_threads = int(threads)
                session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                name = session.get_inputs()[0].name
                self.input_shape = tuple(session.get_inputs()[0].shape)
                self._run = lambda x: session.run(None, {name: x})[0]
        except DetectorError:
            raise
        except Exception as e:  # noqa: BLE001 - each runtime raises its own types for a bad file
            text = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            raise DetectorError(f"segment.model: {runtime} cannot load {path.name}: {text}") from None

    def run(self, x: np.ndarray) -> np.ndarray:
        """The embedding of one preprocessed input `x` (`[1, 3, S, S]` float32), as float32."""
        return np.asarray(self._run(np.ascontiguousarray(x, np.float32)), np.float32)


__all__ = ["EncoderSession", "exported", "cpu_bf16", "openvino_installed"]
