"""A tiny ONNX classifier with known answers, built with numpy and onnx.helper (no Ultralytics, no weights
to download), for the secondary stage's tests and tools/make_classifier.py.

Input `images` [batch, 3, SIZE, SIZE] float, RGB in 0..1 (what Ultralytics' classifiers take). One
"backbone", the mean of each channel (GlobalAveragePool), feeds two heads:

- `colour` [batch, 3]: softmax over red, green, blue: the channel with the largest mean wins;
- `brightness` [batch, 2]: softmax over bright, dark: the mean of all channels above or below 0.5.

The class names of the first head are in the metadata as Ultralytics writes them (`names`:
`{0: 'red', 1: 'green', 2: 'blue'}`).

Example:
    >>> import tempfile
    >>> images = [solid((200, 30, 30)), solid((20, 160, 40)), solid((10, 10, 90)), solid((240, 250, 245))]
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     colour, brightness = run_colour_model(build_colour_model(Path(folder) / "colour.onnx"), images)
    >>> [COLOURS[i] for i in colour.argmax(1)], [BRIGHTNESS[i] for i in brightness.argmax(1)]
    (['red', 'green', 'blue', 'green'], ['dark', 'dark', 'dark', 'bright'])
    >>> colour.shape, brightness.shape, round(float(colour[0, 0]), 3), round(float(brightness[3, 0]), 3)
    ((4, 3), (4, 2), 1.0, 1.0)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

COLOURS = ("red", "green", "blue")
BRIGHTNESS = ("bright", "dark")
#: the input's height and width
SIZE = 32
#: how sharp the softmaxes are: a mean 0.1 ahead of the next gives about 0.9
SHARPNESS = 25.0


def build_colour_model(path: str | Path, *, size: int = SIZE, batch: int | None = None, opset: int = 17) -> Path:
    """Write the model (see the module) to `path` and return it; `batch` None: any batch size."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    k = SHARPNESS
    colour_w = np.eye(3, dtype=np.float32) * k
    bright_w = np.array([[k / 3, -k / 3]] * 3, np.float32)  # logits k*(mean - 0.5), -k*(mean - 0.5)
    bright_b = np.array([-k / 2, k / 2], np.float32)
    initializers = [numpy_helper.from_array(colour_w, "colour_w"), numpy_helper.from_array(bright_w, "bright_w"),
                    numpy_helper.from_array(bright_b, "bright_b")]
    nodes = [helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["means"], axis=1),
             helper.make_node("MatMul", ["means", "colour_w"], ["colour_logits"]),
             helper.make_node("Softmax", ["colour_logits"], ["colour"], axis=1),
             helper.make_node("Gemm", ["means", "bright_w", "bright_b"], ["bright_logits"]),
             helper.make_node("Softmax", ["bright_logits"], ["brightness"], axis=1)]
    n = batch if batch is not None else "batch"
    graph = helper.make_graph(
        nodes, "colour", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [n, 3, size, size])],
        [helper.make_tensor_value_info("colour", TensorProto.FLOAT, [n, 3]),
         helper.make_tensor_value_info("brightness", TensorProto.FLOAT, [n, 2])],
        initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="streamlens-tests")
    model.ir_version = 8
    helper.set_model_props(model, {"names": repr(dict(enumerate(COLOURS))), "task": "classify",
                                   "imgsz": repr([size, size])})
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, str(path))
    return path


def run_colour_model(path: str | Path, images_rgb: list[np.ndarray]) -> list[np.ndarray]:
    """The model's two outputs for HxWx3 uint8 RGB images of its size (as the secondary stage feeds it)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    batch = np.stack(images_rgb).transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255)
    return session.run(None, {"images": batch})


def solid(rgb: tuple[int, int, int], size: int = SIZE) -> np.ndarray:
    """A size x size RGB uint8 image of one colour."""
    return np.broadcast_to(np.array(rgb, np.uint8), (size, size, 3)).copy()
