"""Mistakes in a pipeline file, as the user reads them: one line `FILE: key.path: what is wrong`.

`Problems` gathers the lines. `from_validation` turns pydantic's errors into them: the key path
as written in the file (`sources[1].uri`, `sinks[0].hwm`: a sink's `type` is not a level of the
path), and the message in the file's own words ("wrong type: expected an integer, got 'often'",
"must be <= 1024, got 100000", "unknown key (expected one of: ...)"). A check of streamlens's own
raises `Invalid`, whose message is used as it is; one that finds several mistakes in one mapping
raises `Invalid.many`.
"""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError


class Problems:
    """Collects `file: key.path: message` lines."""

    def __init__(self, file: str):
        self.file = file
        self.lines: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.lines.append(f"{self.file}: {path}: {message}" if path else f"{self.file}: {message}")


def invalid(message: str, **keys: str) -> PydanticCustomError:
    """A mistake found by streamlens's own check, to raise from a validator: `message` is shown
    as it is. `keys`: mistakes of the keys inside the mapping being checked ({key: message}),
    reported at `path.key` each (`message` is then their summary)."""
    return PydanticCustomError("streamlens", "{message}", {"message": message, "keys": keys})


_KIND_WORDS = {"int_type": "an integer", "int_from_float": "an integer", "float_type": "a number",
               "bool_type": "true or false", "string_type": "a string", "list_type": "a list",
               "tuple_type": "a list", "dict_type": "a mapping", "model_type": "a mapping",
               "model_attributes_type": "a mapping", "path_type": "a string"}
_BOUND_WORDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
                "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}


def show(value: Any) -> str:
    """A value as the file would spell it, at most 60 characters."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else ".inf" if value > 0 else "-.inf"
    try:
        text = repr(value) if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
    except ValueError:  # an integer past Python's digit limit (sys.get_int_max_str_digits)
        return "an integer too large to write"
    text = text.removesuffix("\n...").strip()
    return text if len(text) <= 60 else text[:57] + "..."


def from_validation(error: ValidationError, root: type[BaseModel], problems: Problems) -> None:
    """Add one line per mistake pydantic found validating a tree against `root`."""
    for detail in error.errors(include_url=False):
        path, parent, key = _walk(root, detail["loc"])
        kind, ctx, value = detail["type"], detail.get("ctx") or {}, detail.get("input")
        if kind == "streamlens":
            if ctx.get("keys"):
                for name, message in ctx["keys"].items():
                    problems.add(join_key(path, name), message)
            else:
                problems.add(path, ctx["message"])
        elif kind == "extra_forbidden":
            problems.add(path, _misplaced(parent, key))
        elif kind == "missing":
            problems.add(path, "missing")
        elif kind in ("union_tag_invalid", "union_tag_not_found"):
            name = ctx["discriminator"].strip("'")
            problems.add(join_key(path, name), "missing" if kind == "union_tag_not_found" else
                         f"unknown {show(ctx['tag'])} ({_choices(ctx['expected_tags'])})")
        elif kind == "literal_error":
            problems.add(path, f"unknown {show(value)} ({_choices(ctx['expected'])})")
        elif kind in _BOUND_WORDS:
            sign, name = _BOUND_WORDS[kind]
            bound = ctx[name]
            bound = int(bound) if isinstance(bound, float) and bound.is_integer() else bound  # 0, not 0.0
            problems.add(path, f"must be {sign} {bound}, got {show(value)}")
        elif kind == "finite_number" or kind == "float_type" and isinstance(value, int) and not isinstance(value, bool):
            problems.add(path, f"must be a finite number, got {show(value)}")  # 10**400 is no float
        elif kind in _KIND_WORDS:
            problems.add(path, f"wrong type: expected {_KIND_WORDS[kind]}, got {show(value)}")
        elif kind == "too_short" and ctx.get("min_length") == 1:
            problems.add(path, "expected a non-empty list")
        elif kind in ("too_short", "too_long"):
            bound = f"at least {ctx.get('min_length')}" if kind == "too_short" else f"at most {ctx.get('max_length')}"
            problems.add(path, f"expected {bound} items, got {ctx.get('actual_length')}")
        else:  # a check pydantic made that has no words of ours yet
            problems.add(path, f"{detail['msg']}, got {show(value)}")


def _choices(expected: str) -> str:
    """pydantic's "'a', 'b' or 'c'" (or "0, 1 or 2") as the file's "a, b, c"."""
    quoted = re.findall(r"'([^']*)'", expected)
    return ", ".join(quoted or re.findall(r"-?\d+(?:\.\d+)?", expected))


def join_key(path: str, key: str) -> str:
    """`path` and a key below it; a key that is an index (`[2]`) takes no dot."""
    return f"{path}{key}" if key.startswith("[") or not path else f"{path}.{key}"


def _walk(root: type[BaseModel], loc: tuple) -> tuple[str, type[BaseModel] | None, Any]:
    """The key path of `loc` as the file spells it, the model that holds its last key, and that key.

    pydantic's locations name the tag of a tagged union (`("sinks", 0, "zmq", "hwm")`); the file has
    no such level, so it is dropped here."""
    path, node, parent = "", root, None
    for part in loc:
        if isinstance(node, _Tagged) and part in node:
            node = node[part]  # a tag: the member it chose
        elif isinstance(part, int):
            path += f"[{part}]"
            args = typing.get_args(node)
            node = _kind(args[0]) if typing.get_origin(node) is list and args else None
        else:
            path = join_key(path, str(part))
            parent = node if isinstance(node, type) and issubclass(node, BaseModel) else None
            field = parent.model_fields.get(part) if parent is not None else None
            node = None if field is None else _kind(field.annotation, field.discriminator)
    return path, parent, loc[-1] if loc else None


class _Tagged(dict):
    """The members of a tagged union by their tag."""


def _kind(annotation: Any, discriminator: str | None = None) -> Any:
    """What a value of `annotation` is read as: a model, a `_Tagged` union, or the annotation
    itself (`list[...]`, a plain type); `X | None` is X."""
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        found = [m.discriminator for m in metadata if getattr(m, "discriminator", None)]
        return _kind(inner, discriminator or (found[0] if found else None))
    members = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        if discriminator:
            return _Tagged({typing.get_args(m.model_fields[discriminator].annotation)[0]: m for m in members})
        if len(members) == 1:
            return _kind(members[0])
    return annotation


def _misplaced(model: type[BaseModel] | None, key: Any) -> str:
    """Why `key` does not belong in a mapping read as `model`: the keys it takes."""
    if model is None:
        return "unknown key"
    return f"unknown key (expected one of: {', '.join(model.model_fields)})"
