"""An Ultralytics `.pt` exported to ONNX or OpenVINO at a given size, by Ultralytics' own exporter,
offline (streamlens/detect/ultralytics_offline.py).

The export is made from a copy of the `.pt` in a hidden folder beside where it goes (the `.pt`'s
folder, or `out_dir`), and moved into place when Ultralytics has finished: `yolo11n.onnx`, or the
folder `yolo11n_openvino_model/` (an OpenVINO IR with Ultralytics' metadata.yaml). An export already
there is replaced. Exported beside a cached `.pt`, it is named in a pipeline as `models:yolo11n.onnx`
(backend onnx or openvino), `models:yolo11n_openvino_model` (backend ultralytics) or
`models:yolo11n_openvino_model/yolo11n.xml` (backend openvino). Needs the ultralytics extra (and
openvino for OpenVINO); ONNX graphs are simplified only when onnxslim is installed (Ultralytics would
otherwise try to pip-install it).

Example:
    >>> export(Path("yolo11n.pt"), "onnx", 640)        # doctest: +SKIP
    PosixPath('yolo11n.onnx')
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import warnings
from pathlib import Path

from ..errors import StreamlensError
from .cache import model_problem

FORMATS = ("onnx", "openvino")


class ExportError(StreamlensError):
    """A model could not be exported; nothing was written."""


def export_name(model: Path, fmt: str) -> str:
    """The file or folder Ultralytics writes for `model` in format `fmt`."""
    return f"{model.stem}.onnx" if fmt == "onnx" else f"{model.stem}_openvino_model"


def export(model: Path, fmt: str, imgsz: int, out_dir: Path | None = None) -> Path:
    """Export the Ultralytics `.pt` `model` to `fmt` (onnx or openvino) with input side `imgsz`,
    into `out_dir` (default: beside the model); the path written. `ExportError` when it cannot be."""
    model = Path(model)
    problem = model_problem(model, folder_ok=False)
    if problem is not None:
        raise ExportError(f"models export: {problem}")
    if model.suffix.lower() != ".pt":
        raise ExportError(f"models export: {model}: expected an Ultralytics .pt model")
    if fmt not in FORMATS:
        raise ExportError(f"models export: --format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    needed = ["ultralytics", "onnx"] + (["openvino"] if fmt == "openvino" else [])
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise ExportError(f"models export to {fmt} needs {', '.join(missing)} (pip install 'streamlens[ultralytics"
                          f"{',openvino' if 'openvino' in missing else ''}]')")
    from ..detect.ultralytics_offline import import_ultralytics_offline

    import_ultralytics_offline()
    from ultralytics import YOLO

    folder = Path(out_dir) if out_dir is not None else model.parent
    target = folder / export_name(model, fmt)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=folder, prefix=f".{model.stem}-export-"))
    except OSError as e:
        raise ExportError(f"models export: cannot write in {folder}: {e.strerror or e}") from None
    try:
        copy = work / model.name
        shutil.copyfile(model, copy)
        options = {"simplify": importlib.util.find_spec("onnxslim") is not None} if fmt == "onnx" else {}
        try:
            with warnings.catch_warnings():  # torch's deprecation notes on the tracing Ultralytics does
                warnings.simplefilter("ignore", FutureWarning)
                made = Path(YOLO(str(copy)).export(format=fmt, imgsz=imgsz, verbose=False, **options))
        except Exception as e:  # noqa: BLE001 - Ultralytics raises many kinds; one line names the model
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ExportError(f"models export: {model}: Ultralytics could not export it to {fmt}: {text}") from None
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        made.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


__all__ = ["FORMATS", "ExportError", "export", "export_name"]
