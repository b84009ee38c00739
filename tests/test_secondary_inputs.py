"""A secondary (or reid) model is fed as its file asks: its own height and width when it fixes them
(a person re-identification model takes 256x128), and each channel normalised by `mean` and `std`
when the entry gives them (ImageNet's, for torchreid's exports)."""

from __future__ import annotations

import numpy as np
import pytest

from streamlens.errors import ConfigError, DetectorError
from streamlens.secondary.model import CropModel

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def build_probe_model(path, height: int = 256, width: int = 128):
    """An ONNX model of input [B, 3, height, width] whose output is, per image, the mean of each
    channel of its top half and of its bottom half (six numbers): what it was fed, told back."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    half = height // 2
    starts = numpy_helper.from_array(np.array([0], np.int64), "s0")
    mid = numpy_helper.from_array(np.array([half], np.int64), "mid")
    end = numpy_helper.from_array(np.array([height], np.int64), "end")
    axis = numpy_helper.from_array(np.array([2], np.int64), "axis")
    nodes = [helper.make_node("Slice", ["images", "s0", "mid", "axis"], ["top"]),
             helper.make_node("Slice", ["images", "mid", "end", "axis"], ["bottom"]),
             helper.make_node("GlobalAveragePool", ["top"], ["top_mean"]),
             helper.make_node("GlobalAveragePool", ["bottom"], ["bottom_mean"]),
             helper.make_node("Concat", ["top_mean", "bottom_mean"], ["both"], axis=1),
             helper.make_node("Flatten", ["both"], ["vector"], axis=1)]
    graph = helper.make_graph(nodes, "probe",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["b", 3, height, width])],
                              [helper.make_tensor_value_info("vector", TensorProto.FLOAT, ["b", 6])],
                              initializer=[starts, mid, end, axis])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def two_colour_crop(height: int, width: int) -> np.ndarray:
    """A BGR crop: pure red over pure blue (top half red)."""
    crop = np.zeros((height, width, 3), np.uint8)
    crop[: height // 2, :, 2] = 255  # red (BGR)
    crop[height // 2:, :, 0] = 255  # blue
    return crop


def test_a_model_of_fixed_height_and_width_gets_them(tmp_path):
    model = CropModel(build_probe_model(tmp_path / "probe.onnx"))
    assert model.size == (256, 128)
    # a crop of another shape (a wide car, a tall person) is resized to the model's, top half still on top
    for shape in ((90, 40), (40, 90), (600, 300)):
        (vector,) = model.run([two_colour_crop(*shape)])
        np.testing.assert_allclose(vector[0], [1, 0, 0, 0, 0, 1], atol=0.02)  # RGB top, RGB bottom


def test_mean_and_std_normalise_each_channel(tmp_path):
    path = build_probe_model(tmp_path / "probe.onnx")
    model = CropModel(path, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    (vector,) = model.run([two_colour_crop(256, 128)])
    top = (np.array([1, 0, 0]) - IMAGENET_MEAN) / IMAGENET_STD
    bottom = (np.array([0, 0, 1]) - IMAGENET_MEAN) / IMAGENET_STD
    np.testing.assert_allclose(vector[0], np.concatenate([top, bottom]), rtol=1e-4, atol=1e-4)
    # the cache keys the outputs by the normalisation too: the same file fed otherwise is another model
    assert model.id != CropModel(path).id
    assert CropModel(path).id.endswith("@256x128")


def test_a_square_imgsz_that_the_file_contradicts_is_one_clear_error(tmp_path):
    path = build_probe_model(tmp_path / "probe.onnx")
    with pytest.raises(DetectorError, match=r"reid\.model: probe\.onnx takes 256x128 inputs \(height x width\), "
                                            r"not imgsz 224"):
        CropModel(path, imgsz=224, where="reid.model")


def test_mean_and_std_keys_are_checked(tmp_path):
    import streamlens

    model = build_probe_model(tmp_path / "probe.onnx")
    for value, where in (("[0.5, 0.5]", "mean"), ("[0.2, 0.2, 0]", "std"), ("[0.5, .nan, 0.5]", "mean")):
        key = "mean" if where == "mean" else "std"
        path = tmp_path / "p.yaml"
        path.write_text(f"sources: [{{name: a, uri: x.mp4}}]\ndetector: {{backend: motion}}\n"
                        f"secondary: [{{name: look, kind: embed, model: {model}, {key}: {value}}}]\n")
        with pytest.raises(ConfigError, match=rf"secondary\[0\]\.{where}"):
            streamlens.Pipeline.from_yaml(path)


def test_the_reid_section_feeds_its_model_the_same_way(tmp_path):
    from streamlens.config.model import ReidConfig
    from streamlens.reid.model import reid_entry, reid_model

    cfg = ReidConfig(model=build_probe_model(tmp_path / "osnet.onnx"), mean=IMAGENET_MEAN, std=IMAGENET_STD)
    model = reid_model(cfg)
    assert model.size == (256, 128)
    (vector,) = model.run([two_colour_crop(512, 256)])  # halved exactly: the colours' border stays sharp
    expected = (np.array([1, 0, 0, 0, 0, 1]) - IMAGENET_MEAN * 2) / (IMAGENET_STD * 2)
    np.testing.assert_allclose(vector[0], expected, rtol=1e-3, atol=2e-3)
    assert (reid_entry(cfg).mean, reid_entry(cfg).std) == (IMAGENET_MEAN, IMAGENET_STD)
