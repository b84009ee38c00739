"""The `reid` section in a pipeline: its keys checked, its appearances published as `embedding`
messages named `reid` (the weight-free descriptor, or an ONNX model with random weights made here),
and global_ids on frames, events and drawn labels."""

import json

import numpy as np
import pytest

import streamlens
from streamlens.errors import ConfigError
from streamlens.frame import Embedding, Event, Frame, FrameResult, empty_detections
from streamlens.reid import DIM
from streamlens.reid.stage import ReidStage
from streamlens.config.model import ReidConfig

from .conftest import REPO


def pipeline(tmp_path, reid: str, sources: str | None = None) -> object:
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources: {sources or f"[{{name: cam1, uri: {REPO / 'samples' / 'traffic.mp4'}}}]"}
detector: {{backend: motion}}
keyframes: {{interval: 3}}
reid: {reid}
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    return path


def read(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("reid, where", [
    ("{across: [cam1, cam9]}", r"reid\.across: no source named 'cam9'"),
    ("{across: [cam1]}", r"reid\.across"),
    ("{across: [cam1, cam1]}", r"reid\.across: each camera once"),
    ("{model: nope.onnx}", r"reid\.model: file not found"),
    ("{threshold: 2}", r"reid\.threshold"),
    ("{samples: 0}", r"reid\.samples"),
    ("{clock: sundial}", r"reid\.clock"),
    ("{acros: [cam1, cam2]}", r"reid\.acros"),
])
def test_bad_reid_keys_name_the_key(tmp_path, reid, where):
    with pytest.raises(ConfigError, match=where):
        streamlens.Pipeline.from_yaml(pipeline(tmp_path, reid))


def test_the_descriptor_publishes_reid_embeddings_per_track(tmp_path):
    """Without a model, each confirmed track gets the weight-free appearance: unit vectors of DIM,
    at most `samples` looks per track."""
    report = streamlens.Pipeline.from_yaml(pipeline(tmp_path, "{samples: 3, every_s: 0.2, min_size: 8}")).run()
    assert report.status == "done"
    embeddings = [m for m in read(tmp_path) if m["type"] == "embedding"]
    assert embeddings and {m["name"] for m in embeddings} == {"reid"}
    assert all(len(m["vector"]) == DIM and abs(np.linalg.norm(m["vector"]) - 1) < 1e-3 for m in embeddings)
    assert max(m["attempts"] for m in embeddings) <= 3
    frames = [m for m in read(tmp_path) if m["type"] == "frame"]
    assert not any("global_id" in o for m in frames for o in m["objects"])  # no `across`: no global_id


def random_embedder(path, side: int = 32, dim: int = 16):
    """An ONNX model of the re-identification shape with random weights: [B, 3, side, side] ->
    [B, dim] (average-pooled 4x4 cells, then a random projection)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.normal(size=(3 * 16, dim)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([-1, 3 * 16], np.int64), "shape")
    nodes = [helper.make_node("AveragePool", ["images"], ["cells"], kernel_shape=[side // 4] * 2,
                              strides=[side // 4] * 2),
             helper.make_node("Reshape", ["cells", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "w"], ["embedding"])]
    graph = helper.make_graph(nodes, "reid", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                            ["batch", 3, side, side])],
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", dim])],
                              [weights, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_an_onnx_model_runs_through_the_secondary_machinery(tmp_path):
    model = random_embedder(tmp_path / "reid.onnx")
    report = streamlens.Pipeline.from_yaml(pipeline(tmp_path, f"{{model: {model}, min_size: 8}}")).run()
    assert report.status == "done"
    embeddings = [m for m in read(tmp_path) if m["type"] == "embedding"]
    assert embeddings and all(m["name"] == "reid" and len(m["vector"]) == 16 for m in embeddings)


def result_with(stream: str, index: int, ts: float, ids: list[int]) -> FrameResult:
    det = empty_detections()
    if ids:
        import supervision as sv

        det = sv.Detections(xyxy=np.array([[0, 0, 10, 10]] * len(ids), np.float32),
                            confidence=np.ones(len(ids)), class_id=np.zeros(len(ids), int),
                            tracker_id=np.array(ids))
    return FrameResult(Frame(stream, index, ts, ts, np.zeros((20, 20, 3), np.uint8)), index, True, det)


def test_global_ids_go_on_objects_and_events_and_follow_a_link():
    """A track's own global_id first; after its appearance links it to the other camera's track,
    that one's, on its frames and on the object of its events."""
    stage = ReidStage(ReidConfig(across=["a", "b"], clock="media"), live={})
    rng = np.random.default_rng(1)
    for k in range(8):  # other objects: the group's mean appearance
        r = result_with("a", k, 0.1 * k, [100 + k])
        stage.process(r, [Embedding("a", k, 100 + k, "reid", rng.normal(size=8).astype(np.float32), 2, r)])
    car = rng.normal(size=8).astype(np.float32)
    first = result_with("a", 10, 1.0, [1])
    first, _ = stage.process(first, [Embedding("a", 10, 1, "reid", car, 2, first)])
    mine = result_with("b", 0, 2.0, [5])
    mine, _ = stage.process(mine, [])
    assert mine.detections.data["global_id"][0] != first.detections.data["global_id"][0]
    later = result_with("b", 1, 2.5, [5])
    event = Event("b", 0, {"event": "object_update", "object": {"id": 5, "label": "car"}}, later)
    later, messages = stage.process(later, [Embedding("b", 0, 5, "reid", car + 0.05, 2, later), event])
    assert later.detections.data["global_id"][0] == first.detections.data["global_id"][0]
    assert [m.body["object"]["global_id"] for m in messages if isinstance(m, Event)] == \
        [int(first.detections.data["global_id"][0])]
    assert stage.stats()["links"] == 1


def test_a_secondary_entry_may_not_take_the_name_reid(tmp_path):
    model = random_embedder(tmp_path / "other.onnx")
    path = pipeline(tmp_path, "{}")
    path.write_text(path.read_text() + f"secondary: [{{name: reid, kind: embed, model: {model}}}]\n")
    with pytest.raises(ConfigError, match=r"secondary\[0\]\.name: 'reid' is the reid section's"):
        streamlens.Pipeline.from_yaml(path)
