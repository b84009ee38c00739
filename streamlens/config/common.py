"""What the sections of the pipeline file share: the bounds on numbers and sizes, `_Keys` (the
strict mapping every section is), and path keys resolved against the pipeline file's folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (BaseModel, BeforeValidator, ConfigDict, ValidationError, ValidationInfo, WithJsonSchema,
                      model_validator)

from ..models.cache import is_reference, model_problem, reference_path
from .problems import Problems, from_validation, invalid, show

#: the ceiling of every integer key without one of its own: a C int, what ZeroMQ, OpenCV and FFmpeg take
INT_MAX = 2**31 - 1
#: the longest duration a key takes, in seconds: a day. Every wait stays finite and far inside what
#: threads and FFmpeg's microsecond options accept; no timeout, backoff or budget needs longer.
MAX_SECONDS = 86_400.0
MAX_MS = MAX_SECONDS * 1000
#: bounds on what is held in memory: frames per queue and per batch, model input side, messages
#: queued per ZeroMQ subscriber, onnxruntime threads. Each is far past any working setting (1024
#: 1080p frames are 6 GB per stream) and short of what a typo would ask for.
MAX_QUEUE_SIZE = 1024
MAX_BATCH = 256
MAX_IMGSZ = 8192
MAX_HWM = 100_000
MAX_THREADS = 1024
MAX_WORKERS = 256
#: the pattern of an environment variable's name (`token_env`, `username_env`, `password_env`)
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class _Keys(BaseModel):
    """A mapping of the pipeline file: strict, no key outside its fields, null in the file as absent."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, validate_default=False)

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data  # pydantic says what it should be
        if info.context is not None:  # from a file; in code, None is None
            data = {k: v for k, v in data.items() if v is not None}
        return cls._keys_checked(data, info.context or {})

    @classmethod
    def _keys_checked(cls, data: dict, context: dict) -> dict:
        """`data` with its keys checked before its values are: a mapping whose keys depend on one of
        its values (a source's `uri`, the detector's `backend`) says here which it takes."""
        return data


Section = TypeVar("Section", bound=_Keys)


def ordered(value: Any, info: ValidationInfo, key: str, where: str, *, most: bool) -> Any:
    """`value` checked against its section's `key` (validated before it): at most it (`most`) or at
    least it; either may be None (not given). The message names `where.key`.
    """
    other = info.data.get(key)
    if value is not None and other is not None and (value > other if most else value < other):
        raise invalid(f"must be {'<=' if most else '>='} {where}.{key} ({other})")
    return value


def section(model: type[Section], label: str, context: dict | None = None, **keys: Any) -> Section:
    """`model` checked from `keys`: how a sink, source or detector made in code, from keyword
    arguments rather than its typed section, gets the pipeline file's checks. A mistake raises
    `ValueError`, one line each, `label: key: what is wrong`.

    Example:
        >>> from streamlens.config import ZmqSinkConfig
        >>> section(ZmqSinkConfig, "zmq sink", type="zmq", endpoint="tcp://127.0.0.1:5555", hwm=0)
        Traceback (most recent call last):
        ...
        ValueError: zmq sink: hwm: must be >= 1, got 0
    """
    try:
        return model.model_validate(keys, context=context)
    except ValidationError as e:
        problems = Problems(label)
        from_validation(e, model, problems)
        raise ValueError("\n".join(problems.lines)) from None


def _base(info: ValidationInfo) -> Path:
    return Path((info.context or {}).get("base") or os.getcwd())


def resolve(base: Path, text: str) -> Path:
    """A path of the file: `~` expanded, relative to `base`."""
    path = Path(os.path.expanduser(text))
    return path if path.is_absolute() else (base / path).resolve()


def _as_path(value: Any, info: ValidationInfo) -> Any:
    """A path key: a string, resolved against the pipeline file's folder (a `Path` is taken as it is)."""
    if isinstance(value, Path):
        return value
    if not isinstance(value, str):
        raise invalid(f"wrong type: expected a string, got {show(value)}")
    return resolve(_base(info), value)


PathKey = Annotated[Path, BeforeValidator(_as_path), WithJsonSchema({"type": "string"})]


def _as_model_path(value: Any, info: ValidationInfo) -> Any:
    """A model key: `models:NAME`, a model of the local cache (streamlens/models/cache.py), or a path
    as `PathKey` takes it. Nothing is read or downloaded here; the key's own check says what is missing."""
    if isinstance(value, str) and is_reference(value):
        try:
            return reference_path(value)
        except ValueError as e:
            raise invalid(str(e)) from None
    return _as_path(value, info)


ModelKey = Annotated[Path, BeforeValidator(_as_model_path), WithJsonSchema({"type": "string"})]


def model_checked(path: Path, *, folder_ok: bool = True) -> Path:
    """`path` when it can be read as a model, else the mistake in the words every model key shows
    (`streamlens.models.cache.model_problem`: a missing cached model says the pull command)."""
    problem = model_problem(path, folder_ok=folder_ok)
    if problem is not None:
        raise invalid(problem)
    return path


def _only(where: str) -> dict:
    """A key that only some mappings of its kind take (`where` says which): kept in the JSON Schema."""
    return {"only_for": where}


def _misplaced_keys(cls: type[BaseModel], data: dict, allowed: set[str]) -> dict[str, str]:
    """{key: why} for the keys of `data` that `cls` has no field for, or that this kind of mapping
    does not take (those outside `allowed`: their schema's `only_for` says which kind does)."""
    found = {}
    for key in data:
        field = cls.model_fields.get(key)
        if field is None:
            found[str(key)] = f"unknown key (expected one of: {', '.join(sorted(allowed, key=list(cls.model_fields).index))})"
        elif key not in allowed:
            found[str(key)] = f"only for {(field.json_schema_extra or {})['only_for']}"
    return found
