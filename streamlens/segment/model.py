"""SAM's two halves, loaded from local files: an image encoder run once per frame, and a prompt decoder
run once per object (its box is the prompt), on the encoder's embedding.

- `UltralyticsSam`: an Ultralytics SAM, MobileSAM or SAM 2 checkpoint (`.pt`), as Ultralytics builds
  it. Ultralytics picks the architecture from the file's name, so the name must end like one of its
  own (`mobile_sam.pt`, `sam_b.pt`, `sam2.1_t.pt`, ... : `SAM_NAMES`). The frame is fitted as
  Ultralytics' SAM predictor fits it (top-left letterbox to 1024, SAM's mean and std). The image
  encoder of SAM and MobileSAM runs off torch by default (`runtime`: exported once to ONNX beside
  the checkpoint, run by OpenVINO or onnxruntime, bfloat16 where the CPU has it:
  streamlens/segment/encoder.py); the prompt decoder stays torch's, under bfloat16 autocast when the
  encoder runs in bfloat16 (on such a CPU about 1.6 times faster). SAM 2 runs on torch.
- `OnnxSam`: a SAM-format pair of ONNX files. The encoder takes one image `[1, 3, S, S]` (the frame
  RGB, its longest side resized to S, normalised by SAM's mean and std, then padded with zeros to
  the right and bottom: segment-anything's own preprocessing) and gives the embedding as its first
  output. The decoder is what segment-anything's `scripts/export_onnx_model.py` writes: inputs
  `image_embeddings`, `point_coords`, `point_labels`, `mask_input`, `has_mask_input`, `orig_im_size`;
  outputs `masks`, `iou_predictions`, `low_res_masks` (read here). A box is the points (x1, y1),
  (x2, y2) with labels 2 and 3, in the encoder's input pixels. A decoder whose batch dimension is
  free takes every box in one call; one exported with batch 1 (segment-anything's default) is
  called once per box. The encoder runs on onnxruntime or OpenVINO (`runtime`), the decoder on
  onnxruntime.

Both give `encode(image) -> [arrays]` (the embedding as float16: what the cache keeps; the decoder
always reads it back from float16, so a mask made from a cached embedding is the one made from a
fresh one) and `decode(arrays, boxes, width, height) -> [BoxMask]` (one per box, from the decoder's
low-resolution logits: streamlens/segment/masks.py).

Example:
    >>> sam = load_sam("models/mobile_sam.pt")                  # doctest: +SKIP
    >>> masks = sam.decode(sam.encode(frame), boxes, 1280, 720)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import cv2
import numpy as np

from ..errors import DetectorError
from ..models.cache import model_problem
from .encoder import EncoderSession, exported, openvino_installed
from .masks import BoxMask, from_logits

#: what Ultralytics' SAM builder recognises at the end of a checkpoint's name
SAM_NAMES = ("sam_h.pt", "sam_l.pt", "sam_b.pt", "mobile_sam.pt", "sam2_t.pt", "sam2_s.pt", "sam2_b.pt", "sam2_l.pt",
             "sam2.1_t.pt", "sam2.1_s.pt", "sam2.1_b.pt", "sam2.1_l.pt")
#: SAM's normalisation (RGB, 0-255)
PIXEL_MEAN = np.array([123.675, 116.28, 103.53], np.float32)
PIXEL_STD = np.array([58.395, 57.12, 57.375], np.float32)
#: the decoder's inputs and outputs (segment-anything's ONNX export)
DECODER_INPUTS = ("image_embeddings", "point_coords", "point_labels", "mask_input", "has_mask_input", "orig_im_size")


def files_id(paths: list[Path], side: int) -> str:
    """What the cache keys an encoder's embeddings by: a hash of its file(s) and input side."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return f"sam:{digest.hexdigest()[:32]}@{side}"


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text[:200]


def load_sam(model: str | Path, decoder: str | Path | None = None, *, device: str = "auto",
             threads: int | None = None, runtime: str = "auto", bf16: bool = True) -> UltralyticsSam | OnnxSam:
    """The SAM of `segment.model` (and `segment.decoder`), or a `DetectorError` naming the key and file.
    `runtime` (auto, torch, onnx, openvino), `bf16` and `threads`: how the image encoder runs."""
    path = Path(model)
    problem = model_problem(path, folder_ok=False)
    if problem is not None:
        raise DetectorError(f"segment.model: {problem}")
    if path.suffix.lower() in (".pt", ".pth"):
        if decoder is not None:
            raise DetectorError(f"segment.decoder: {path.name} is a .pt checkpoint, which holds its own decoder")
        return UltralyticsSam(path, device=device, runtime=runtime, bf16=bf16, threads=threads)
    if decoder is None:
        raise DetectorError(f"segment.decoder: {path.name} is an ONNX encoder; name its prompt decoder too")
    decoder = Path(decoder)
    problem = model_problem(decoder, folder_ok=False)
    if problem is not None:
        raise DetectorError(f"segment.decoder: {problem}")
    if runtime == "torch":
        raise DetectorError(f"segment.runtime: {path.name} is an ONNX encoder: onnx or openvino run it, not torch")
    return OnnxSam(path, decoder, threads=threads, runtime=runtime, bf16=bf16)


def _cpu_runtime(runtime: str) -> str:
    """`auto` on the CPU: OpenVINO where it is installed, else onnxruntime."""
    if runtime != "auto":
        return runtime
    return "openvino" if openvino_installed() else "onnx"


def _resize_factor(width: int, height: int, side: int) -> float:
    return side / max(width, height)


class UltralyticsSam:
    """A SAM / MobileSAM / SAM 2 checkpoint through Ultralytics (see the module's docstring)."""

    side = 1024

    def __init__(self, path: Path, *, device: str = "auto", runtime: str = "auto", bf16: bool = True,
                 threads: int | None = None):
        if not path.name.endswith(SAM_NAMES):
            raise DetectorError(f"segment.model: {path.name}: Ultralytics tells a SAM checkpoint by its name, which "
                                f"must end in one of {', '.join(SAM_NAMES)}")
        from ..detect.ultralytics_backend import torch_device
        from ..detect.ultralytics_offline import import_ultralytics_offline

        import_ultralytics_offline()
        import torch
        from ultralytics.models.sam.build import build_sam
        from ultralytics.models.sam.predict import Predictor, SAM2Predictor

        self._torch = torch
        self.sam2 = "sam2" in path.stem
        dev = torch_device(device)
        try:
            net = build_sam(str(path))
        except Exception as e:  # noqa: BLE001 - a file of the wrong kind raises anything
            raise DetectorError(f"segment.model: cannot load {path}: {_short(e)}") from None
        predictor = (SAM2Predictor if self.sam2 else Predictor)(
            overrides={"imgsz": self.side, "device": "cpu" if dev.type == "cpu" else str(dev.index or 0),
                       "verbose": False})
        predictor.setup_model(model=net, verbose=False)
        predictor.imgsz = [self.side, self.side]
        self._predictor = predictor
        self.path = path
        self.id = files_id([path], self.side)
        if runtime == "auto":
            runtime = "torch" if dev.type != "cpu" or self.sam2 else _cpu_runtime(runtime)
        if runtime != "torch" and self.sam2:
            raise DetectorError(f"segment.runtime: {runtime} runs the encoder of SAM and MobileSAM; SAM 2 "
                                f"({path.name}) runs on torch")
        self._session = None
        if runtime != "torch":
            self._session = EncoderSession(exported(net.image_encoder, path, self.side), runtime, bf16=bf16,
                                           threads=threads)
        self._decode_bf16 = self._session is not None and self._session.bf16  # the decoder too, on the CPU
        #: what runs the encoder: torch, or onnx / openvino with fp32 / bf16 (the cache keeps each one's apart)
        self.runtime = "torch" if self._session is None else self._session.runtime
        self.id = f"{self.id}/{self.runtime.replace(' ', '-')}"
        self.shapes: list[tuple] | None = None
        self.shapes = [a.shape for a in self.encode(np.zeros((64, 64, 3), np.uint8))]  # warm-up; learns the shapes

    def encode(self, image: np.ndarray) -> list[np.ndarray]:
        with self._torch.inference_mode():
            im = self._predictor.preprocess([image])
            if self._session is not None:
                return [self._session.run(im.cpu().numpy()).astype(np.float16)]
            features = self._predictor.get_im_features(im)
        parts = [features["image_embed"], *features["high_res_feats"]] if isinstance(features, dict) else [features]
        return [p.float().cpu().numpy().astype(np.float16) for p in parts]

    def fits(self, arrays: list[np.ndarray]) -> bool:
        return _fits(arrays, self.shapes)

    def decode(self, arrays: list[np.ndarray], boxes: np.ndarray, width: int, height: int) -> list[BoxMask]:
        if not len(boxes):
            return []
        torch, predictor = self._torch, self._predictor
        parts = [torch.from_numpy(a.astype(np.float32)).to(predictor.device) for a in arrays]
        features = {"image_embed": parts[0], "high_res_feats": parts[1:]} if self.sam2 else parts[0]
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self._decode_bf16):
            prompts = predictor._prepare_prompts((self.side, self.side), (height, width),
                                                 bboxes=np.asarray(boxes, np.float32))
            logits, _ = predictor._inference_features(features, *prompts, multimask_output=False)
        logits = logits.float().cpu().numpy()
        to_logits = _resize_factor(width, height, self.side) * logits.shape[-1] / self.side
        return from_logits(logits, boxes, to_logits, width, height)


class OnnxSam:
    """A SAM-format ONNX encoder and decoder (see the module's docstring)."""

    def __init__(self, encoder: Path, decoder: Path, *, threads: int | None = None, runtime: str = "auto",
                 bf16: bool = True):
        import onnxruntime as ort

        from ..detect.onnx import onnx_providers

        def session(path: Path, key: str):
            options = ort.SessionOptions()
            options.log_severity_level = 3
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if threads:
                options.intra_op_num_threads = int(threads)
            try:
                return ort.InferenceSession(str(path), options, providers=onnx_providers("auto"))
            except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types for every kind of bad file
                raise DetectorError(f"segment.{key}: cannot load {path}: {_short(e)}") from None

        probe = session(encoder, "model")  # the encoder's inputs are read here, whatever runs it
        self.decoder = session(decoder, "decoder")
        inputs = probe.get_inputs()
        shape = inputs[0].shape if len(inputs) == 1 else None
        if shape is None or len(shape) != 4 or shape[1] not in (3, "3") or not isinstance(shape[2], int):
            raise DetectorError(f"segment.model: {encoder.name}: expected one image input [1, 3, S, S] of a fixed S, "
                                f"got {[(i.name, i.shape) for i in inputs]}")
        self.side = int(shape[2])
        runtime = _cpu_runtime(runtime)
        self.encoder = EncoderSession(encoder, runtime, bf16=bf16, threads=threads) if runtime == "openvino" else None
        if self.encoder is None:
            name = inputs[0].name
            self._encode = lambda x: np.asarray(probe.run(None, {name: x})[0])
            self.runtime = "onnx fp32"
        else:
            del probe
            self._encode = self.encoder.run
            self.runtime = self.encoder.runtime
        names = {i.name: i for i in self.decoder.get_inputs()}
        outputs = [o.name for o in self.decoder.get_outputs()]
        missing = [n for n in DECODER_INPUTS if n not in names] + [n for n in ("low_res_masks",) if n not in outputs]
        if missing:
            raise DetectorError(f"segment.decoder: {decoder.name} is not a SAM-format prompt decoder: it lacks "
                                f"{', '.join(missing)} (inputs {list(names)}, outputs {outputs})")
        batch = names["point_coords"].shape[0]
        self.batched = not (isinstance(batch, int) and batch == 1)
        mask_shape = names["mask_input"].shape
        side = mask_shape[-1] if isinstance(mask_shape[-1], int) else self.side // 4
        self._mask_input = np.zeros((1, 1, side, side), np.float32)
        self._has_mask = np.zeros(tuple(d if isinstance(d, int) else 1 for d in names["has_mask_input"].shape),
                                  np.float32)
        self.path = encoder
        self.id = f"{files_id([encoder], self.side)}/{self.runtime.replace(' ', '-')}"
        self.shapes = None
        self.shapes = [a.shape for a in self.encode(np.zeros((64, 64, 3), np.uint8))]

    def encode(self, image: np.ndarray) -> list[np.ndarray]:
        height, width = image.shape[:2]
        r = _resize_factor(width, height, self.side)
        w, h = max(1, round(width * r)), max(1, round(height * r))
        rgb = cv2.cvtColor(cv2.resize(image, (w, h), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
        x = np.zeros((self.side, self.side, 3), np.float32)
        x[:h, :w] = (rgb.astype(np.float32) - PIXEL_MEAN) / PIXEL_STD
        return [self._encode(np.ascontiguousarray(x.transpose(2, 0, 1)[None])).astype(np.float16)]

    def fits(self, arrays: list[np.ndarray]) -> bool:
        return _fits(arrays, self.shapes)

    def decode(self, arrays: list[np.ndarray], boxes: np.ndarray, width: int, height: int) -> list[BoxMask]:
        if not len(boxes):
            return []
        r = _resize_factor(width, height, self.side)
        coords = (np.asarray(boxes, np.float32).reshape(-1, 2, 2) * r).astype(np.float32)
        labels = np.tile(np.array([[2, 3]], np.float32), (len(coords), 1))
        feed = {"image_embeddings": arrays[0].astype(np.float32), "mask_input": self._mask_input,
                "has_mask_input": self._has_mask, "orig_im_size": np.array([height, width], np.float32)}
        step = len(coords) if self.batched else 1
        parts = []
        for start in range(0, len(coords), step):
            low = self.decoder.run(["low_res_masks"], {**feed, "point_coords": coords[start:start + step],
                                                       "point_labels": labels[start:start + step]})[0]
            parts.append(np.asarray(low, np.float32)[:, 0])
        logits = np.concatenate(parts)
        to_logits = r * logits.shape[-1] / self.side
        return from_logits(logits, boxes, to_logits, width, height)


def _fits(arrays: list[np.ndarray], shapes: list[tuple] | None) -> bool:
    """Whether cached `arrays` are this encoder's embedding: float16 of its shapes, finite."""
    return (shapes is not None and len(arrays) == len(shapes)
            and all(a.dtype == np.float16 and a.shape == s and np.isfinite(a).all() for a, s in zip(arrays, shapes)))


__all__ = ["load_sam", "UltralyticsSam", "OnnxSam", "SAM_NAMES", "files_id", "DECODER_INPUTS"]
