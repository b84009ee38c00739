"""Build the secondary stage's test and benchmark classifier: Ultralytics' YOLOv8n-cls from its
`yolov8n-cls.yaml` with random weights (the compute of the real model, none of its knowledge; nothing
is downloaded), exported to ONNX.

The export (Ultralytics' own, `format="onnx"`, `simplify=False`) has one input `images`
[batch, 3, height, width] (float32, RGB in 0..1; all three dimensions free with the default dynamic
export, fixed at 1 x 3 x imgsz x imgsz with `--static`) and one output `output0` [batch, classes],
already softmaxed (the graph ends in Softmax). Its metadata holds the class names as Ultralytics
writes them (`names`: `{0: 'tench', 1: 'goldfish', ...}`), with `task: classify` and `imgsz`. The
default classes are ImageNet's 1000 (from the Ultralytics package, as the real model has them);
`--names` or `--nc` give another head (a smaller last layer; the backbone is the same). The random
weights are seeded (`--seed`), so one seed gives the same model each time.

`--colour PATH` writes instead the tiny fixed colour model of the tests
(streamlens/testing/colour_model.py: two heads, `colour` red/green/blue and `brightness`
bright/dark, on the mean of each channel).

`--bench` then times batches of 8 crops in onnxruntime on the CPU, with 1 and 2 threads (under a
line naming the machine).

Run:
    python tools/make_classifier.py                                # ~/.cache/streamlens/models/yolov8n-cls.onnx
    python tools/make_classifier.py /tmp/cls.onnx --names red,green,blue,white,black --bench
    python tools/make_classifier.py --colour /tmp/colour.onnx
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DEFAULT_OUT = Path("~/.cache/streamlens/models/yolov8n-cls.onnx").expanduser()


def imagenet_names() -> dict[int, str]:
    """ImageNet's 1000 class names as the Ultralytics package ships them (cfg/datasets/ImageNet.yaml)."""
    import ultralytics
    import yaml

    with open(Path(ultralytics.__file__).parent / "cfg" / "datasets" / "ImageNet.yaml") as f:
        return {int(k): str(v) for k, v in yaml.safe_load(f)["names"].items()}


def make_classifier(out: Path, *, names: list[str] | None = None, nc: int | None = None, imgsz: int = 224,
                    dynamic: bool = True, opset: int | None = None, seed: int = 0) -> Path:
    """Build YOLOv8n-cls with random weights (seeded) and export it to ONNX at `out` (see the module)."""
    from streamlens.detect.ultralytics_offline import import_ultralytics_offline

    import_ultralytics_offline()
    import torch
    from ultralytics import YOLO
    from ultralytics.nn.tasks import ClassificationModel

    torch.manual_seed(seed)
    model = YOLO("yolov8n-cls.yaml", task="classify")
    classes = {i: n for i, n in enumerate(names)} if names else None
    if classes is None and nc is not None and nc != 1000:
        classes = {i: str(i) for i in range(nc)}
    if classes is not None:
        ClassificationModel.reshape_outputs(model.model, len(classes))
        model.model.yaml["nc"] = len(classes)
    model.model.names = classes or imagenet_names()
    out = Path(out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        weights = Path(folder) / "yolov8n-cls.pt"  # Ultralytics writes the export next to its model
        model.model.pt_path = str(weights)
        exported = model.export(format="onnx", imgsz=imgsz, dynamic=dynamic, simplify=False, opset=opset,
                                device="cpu", verbose=False)
        shutil.move(str(exported), out)
    return out


def describe(path: Path) -> str:
    """The model's inputs, outputs, opset, whether it ends in Softmax, and its class names, in a few lines."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    metadata = dict(session.get_modelmeta().custom_metadata_map)
    outputs = {o.name for o in model.graph.output}
    softmax = any(n.op_type == "Softmax" and set(n.output) & outputs for n in model.graph.node)
    names = metadata.get("names", "")
    lines = [f"{path} ({path.stat().st_size / 1e6:.1f} MB), opset {model.opset_import[0].version}, "
             f"IR {model.ir_version}"]
    lines += [f"  input  {i.name} {i.shape} {i.type}" for i in session.get_inputs()]
    lines += [f"  output {o.name} {o.shape} {o.type}" for o in session.get_outputs()]
    lines.append(f"  the outputs are softmaxed in the graph: {softmax}")
    lines.append(f"  metadata: task={metadata.get('task')} imgsz={metadata.get('imgsz')} "
                 f"names={names[:80]}{'...' if len(names) > 80 else ''}")
    return "\n".join(lines)


def bench(path: Path, batch: int = 8, threads: tuple[int, ...] = (1, 2), repeats: int = 20) -> str:
    """Median and p95 milliseconds of one batch of `batch` crops, per number of intra-op threads."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    shape = session.get_inputs()[0].shape
    size = [d if isinstance(d, int) else 224 for d in shape[2:]]
    fixed = shape[0] if isinstance(shape[0], int) else None
    lines = []
    for n in threads:
        options = ort.SessionOptions()
        options.intra_op_num_threads = n
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        step = fixed or batch
        x = np.random.default_rng(0).random((step, 3, *size), dtype=np.float32)
        for _ in range(3):
            session.run(None, {name: x})
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(batch // step):
                session.run(None, {name: x})
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        lines.append(f"  batch of {batch} at {size[0]}x{size[1]}, {n} thread{'s' if n > 1 else ''}: "
                     f"p50 {times[len(times) // 2]:.1f} ms, p95 {times[int(len(times) * 0.95) - 1]:.1f} ms "
                     f"({times[len(times) // 2] / batch:.2f} ms per crop, {repeats} runs)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help=f"the ONNX file (default {DEFAULT_OUT})")
    parser.add_argument("--names", help="comma-separated class names (default: ImageNet's 1000)")
    parser.add_argument("--nc", type=int, help="number of classes, named 0, 1, ... (default 1000)")
    parser.add_argument("--imgsz", type=int, default=224)
    parser.add_argument("--static", action="store_true", help="a fixed 1x3ximgszximgsz input (default: dynamic)")
    parser.add_argument("--opset", type=int, help="ONNX opset (default: Ultralytics' choice for the onnx installed)")
    parser.add_argument("--seed", type=int, default=0, help="the random weights' seed")
    parser.add_argument("--colour", type=Path, metavar="PATH", help="write the tests' tiny colour model there instead")
    parser.add_argument("--bench", action="store_true", help="time batches of 8 in onnxruntime (1 and 2 threads)")
    args = parser.parse_args(argv)
    if args.colour:
        from streamlens.testing.colour_model import build_colour_model

        path = build_colour_model(args.colour.expanduser())
    else:
        names = [n.strip() for n in args.names.split(",") if n.strip()] if args.names else None
        t = time.perf_counter()
        path = make_classifier(args.out, names=names, nc=args.nc, imgsz=args.imgsz, dynamic=not args.static,
                               opset=args.opset, seed=args.seed)
        print(f"built and exported in {time.perf_counter() - t:.1f} s")
    print(describe(path))
    if args.bench:
        from streamlens.bench.harness import machine_line

        print(f"machine: {machine_line()}")
        print(bench(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
