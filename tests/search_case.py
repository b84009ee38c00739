"""What the search tests share: a random-weight ONNX embedding model (a fixed random projection of
the crop's pixels, its mean taken away), and a pipeline of the shipped sample read as two streams
with that model as the `reid` embedding, snapshots written to a folder and `runtime.history` on."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .conftest import REPO

SAMPLE = REPO / "samples" / "traffic.mp4"
#: the projection's input side and output length
SIDE, DIM = 16, 32


def build_projection_model(path: Path, seed: int = 5) -> Path:
    """An ONNX model `images` [batch, 3, SIDE, SIDE] -> `embedding` [batch, DIM]: the pixels less
    their mean, times a random matrix (random weights: no training, no download)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = np.random.default_rng(seed).standard_normal((3 * SIDE * SIDE, DIM)).astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["images"], ["mean"], axes=[1, 2, 3], keepdims=1),
             helper.make_node("Sub", ["images", "mean"], ["centred"]),
             helper.make_node("Flatten", ["centred"], ["flat"], axis=1),
             helper.make_node("MatMul", ["flat", "w"], ["embedding"])]
    graph = helper.make_graph(nodes, "projection",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, SIDE, SIDE])],
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", DIM])],
                              initializer=[numpy_helper.from_array(weights, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="streamlens-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def two_stream_pipeline(folder: Path, model: Path, *, runtime: str = "") -> Path:
    """`folder/p.yaml`: the sample as streams `a` and `b` (the same objects on both), the motion
    detector, `model` as the `reid` embedding (one look per track: the same on both streams),
    snapshots of object_start and object_end under `folder/shots`, and the history in
    `folder/history.db`."""
    path = folder / "p.yaml"
    path.write_text(f"""
sources: [{{name: a, uri: {SAMPLE}}}, {{name: b, uri: {SAMPLE}}}]
detector: {{backend: motion}}
keyframes: {{interval: 3}}
secondary: [{{name: reid, kind: embed, model: {model}, min_size: 8, max_attempts: 1}}]
analytics: {{end_after_s: 1.0, snapshots: {{events: [object_start, object_end], kind: crop, path: shots}}}}
sinks: []
runtime: {{history: {{path: history.db}}, workers: 1{runtime}}}
""")
    return path
