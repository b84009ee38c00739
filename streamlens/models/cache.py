"""Where pulled models are kept, how a pipeline names one (`models:NAME`), and the one check of a
model file that every reader of one makes (`model_problem`), in one wording.

The cache is `$XDG_CACHE_HOME/streamlens/models`, `~/.cache/streamlens/models` when XDG_CACHE_HOME
is unset (or not an absolute path, as the XDG spec says). A model key of a pipeline (`detector.model`,
`secondary[i].model`, `segment.model`, `segment.decoder`) that reads `models:NAME` is the cached
file of the catalogue's model NAME (`models:yolox_nano` is `<cache>/yolox_nano.onnx`), or else the
file or folder called NAME in the cache (`models:yolo11n.onnx`, `models:yolo11n_openvino_model`:
what `streamlens models export` wrote beside a cached .pt), or a file inside such a folder
(`models:yolo11n_openvino_model/yolo11n.xml`, for `backend: openvino`). Resolving reads nothing
and never downloads: a missing model is one line saying the command that gets it.

Example:
    >>> reference_path("models:yolox_nano") == cache_dir() / "yolox_nano.onnx"
    True
    >>> print(model_problem(Path("/nowhere/yolov8n.pt")))  # doctest: +ELLIPSIS
    file not found: /nowhere/yolov8n.pt (streamlens never downloads models: `streamlens models pull yolov8n` gets it...
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .catalogue import by_file, known

#: how a model key names a model of the cache
PREFIX = "models:"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")  # no "..", nothing hidden


def cache_dir() -> Path:
    """The folder pulled models are kept in (see the module), read from the environment now."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "streamlens" / "models"


def is_file_name(name: str) -> bool:
    """Whether `name` can be a file of the cache that `models:NAME` names: letters, digits, `.`, `_`
    and `-`, not starting with a dot."""
    return _NAME_RE.match(name) is not None and "/" not in name


def is_reference(text: str) -> bool:
    """Whether a model key's text names a cached model (`models:NAME`) rather than a path."""
    return text.startswith(PREFIX)


def reference_path(text: str) -> Path:
    """The path `models:NAME` stands for; `ValueError` (its message for the pipeline's key) when NAME
    is no model's name nor a plain file name."""
    name = text[len(PREFIX):]
    if not _NAME_RE.match(name):
        raise ValueError(f"{text!r}: expected models:NAME, NAME a model of `streamlens models list` or a file "
                         f"in the model cache (FOLDER/FILE inside one of its folders)")
    entry = known(name)
    return cache_dir() / (entry.file if entry else name)


def _hint(path: Path) -> str:
    """What gets a missing model: the pull command for a cached one, else where models come from."""
    entry = by_file(path.name)
    if path.parent == cache_dir():
        if entry is not None:
            return f"get it with `streamlens models pull {entry.name}`"
        return (f"`streamlens models pull --url URL --sha256 SUM --name {path.name}` puts it in the cache, "
                f"`streamlens models export` writes exports beside a cached .pt")
    if entry is not None:
        return f"`streamlens models pull {entry.name}` gets it, and `models:{entry.name}` names it"
    return "give a local file, or models:NAME of one `streamlens models pull` put in the cache"


def model_problem(path: Path, *, folder_ok: bool = True) -> str | None:
    """Why `path` cannot be read as a model now, in the words every model key shows (after its key
    path: `detector.model: file not found: ...`), or None when it can: it exists, is a file (or,
    with `folder_ok`, a folder: an OpenVINO or TensorRT export), and can be read."""
    path = Path(path)
    if not path.exists():
        return f"file not found: {path} (streamlens never downloads models: {_hint(path)})"
    if not (path.is_file() or folder_ok and path.is_dir()):
        return f"not a file: {path}"
    if not os.access(path, os.R_OK):
        return f"cannot read {path}: permission denied"
    return None


__all__ = ["PREFIX", "cache_dir", "is_file_name", "is_reference", "model_problem", "reference_path"]
