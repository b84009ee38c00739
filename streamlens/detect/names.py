"""Class names, and the `classes:` filter that picks some of them.

Where names come from, first found wins:
1. `detector.names`: a file, either one name per line (`.txt`, `.names`: line i is class i), or YAML/JSON
   holding a list, an `{id: name}` mapping, or either under a `names:` key (an Ultralytics data file);
2. the model's own names (Ultralytics metadata);
3. the 80 COCO names, when the model has 80 classes and says nothing (YOLOX, most exported detectors);
4. `class0`, `class1`, ...

Example:
    >>> names = {0: "person", 2: "car", 7: "truck"}
    >>> wanted_class_ids(["car", 7], names).tolist()
    [2, 7]
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from ..config import read_yaml
from ..errors import ConfigError, DetectorError

COCO_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard",
    "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
    "teddy bear", "hair drier", "toothbrush",
)


def read_names_file(path: Path) -> dict[int, str]:
    """Class names from a file: one per line, or YAML/JSON (a list, a mapping, or either under `names:`).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "classes.txt"; _ = p.write_text("car\\ntruck\\n")
        >>> read_names_file(p)
        {0: 'car', 1: 'truck'}
    """
    if path.suffix.lower() in (".yaml", ".yml", ".json"):
        try:
            data = read_yaml(path)  # bounded as a pipeline file is: no alias bomb here either
        except ConfigError as e:
            raise DetectorError(f"detector.names: {e}") from None
        names = parse_names(data.get("names") if isinstance(data, dict) and "names" in data else data)
        if names is None:
            raise DetectorError(f"detector.names: {path}: expected a list of names or an {{id: name}} mapping")
        return names
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DetectorError(f"detector.names: {path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise DetectorError(f"detector.names: {path}: no class names in the file")
    return dict(enumerate(lines))


def parse_names(value) -> dict[int, str] | None:
    """Names from a list, an `{id: name}` mapping, or the text of either (as Ultralytics' metadata holds them).

    Example:
        >>> parse_names("{0: 'person', 1: 'bicycle'}")
        {0: 'person', 1: 'bicycle'}
    """
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return dict(enumerate(value))
    if isinstance(value, dict) and all(isinstance(k, int) and isinstance(v, str) for k, v in value.items()):
        return dict(sorted(value.items()))
    return None


def resolve_names(num_classes: int, *, names_file: Path | None = None, model_names: dict[int, str] | None = None,
                  where: str = "detector.model") -> dict[int, str]:
    """The class names of a model with `num_classes` classes (see the module's docstring for the order).

    Example:
        >>> resolve_names(80)[2], resolve_names(2)
        ('car', {0: 'class0', 1: 'class1'})
    """
    if names_file is not None:
        names = read_names_file(names_file)
        if num_classes and len(names) != num_classes:
            raise DetectorError(f"detector.names: {names_file}: {len(names)} names for a model with "
                                f"{num_classes} classes ({where})")
        return names
    if model_names:
        return dict(model_names)
    if num_classes == len(COCO_NAMES):
        return dict(enumerate(COCO_NAMES))
    return {i: f"class{i}" for i in range(num_classes)}


def wanted_class_ids(classes: list[str | int] | None, names: dict[int, str]) -> np.ndarray | None:
    """The class ids that `classes` (names or ids, mixed) picks; None keeps every class.

    A name or id the model does not have is a `DetectorError` that lists a few it has.
    """
    if classes is None:
        return None
    by_name = {name: i for i, name in names.items()}
    ids = []
    for j, c in enumerate(classes):
        if isinstance(c, str) and c in by_name:
            ids.append(by_name[c])
        elif isinstance(c, int) and not isinstance(c, bool) and c in names:
            ids.append(c)
        else:
            known = ", ".join(list(names.values())[:8]) + (", ..." if len(names) > 8 else "")
            raise DetectorError(f"detector.classes[{j}]: {c!r} is not a class of the model ({known})")
    return np.unique(np.asarray(ids, np.int64))
