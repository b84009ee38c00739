"""Reading a pipeline file: bounded YAML, then `${VAR}` filled in from the environment.

The file is bounded while it is read, before anything walks the tree: at most `MAX_FILE_BYTES`,
`MAX_DEPTH` levels deep, and `MAX_VALUES` values once its YAML aliases are expanded. Each refusal
is one line naming the file and, where it has one, the line and column. A value that YAML parses
but Python cannot hold (an integer of more digits than Python converts, `sys.get_int_max_str_digits`;
a `2024-13-45` date; `!!float abc`) is one line naming the file and its key path.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from .problems import Problems, join_key

#: bounds on the pipeline file itself, checked while it is read, before anything walks the tree
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 100_000
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(node: Any, path: str, problems: Problems, env: dict[str, str] | None = None) -> Any:
    """Replace `${VAR}` and `${VAR:-default}` in every string of a loaded YAML tree."""
    env = os.environ if env is None else env
    if isinstance(node, dict):
        return {k: interpolate(v, f"{path}.{k}" if path else str(k), problems, env) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, f"{path}[{i}]", problems, env) for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node

    def substitute(m: re.Match) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        problems.add(path, f"environment variable {name} is not set")
        return ""

    return _VAR_RE.sub(substitute, node)



class _Refused(yaml.MarkedYAMLError):
    """YAML that is valid but no pipeline file: nested too deep, an alias inside itself, too big."""


class _PipelineLoader(yaml.SafeLoader):
    """PyYAML's safe loader, bounded while it composes the file (before anything walks the tree).

    Anchors and aliases work (`defaults: &cam {...}`, then `<<: *cam` in each source), but an
    alias may not sit inside the node it names (`&a [*a]`: a tree without end), no node may hold
    more than `MAX_VALUES` values with its aliases expanded (a "billion laughs" file of 250 bytes
    holds billions), and nothing may nest deeper than `MAX_DEPTH`. Each is refused at its line.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        self.bad: list[_Bad] = []  # scalars that could not be read, in the order they were met
        self._open: list[str | None] = []  # the anchor (or None) of each node being composed
        self._values: dict[int, int] = {}  # id(node) -> values it holds, aliases expanded

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise _Refused(None, None, f"alias *{event.anchor} is inside the node it names", event.start_mark)
            return super().compose_node(parent, index)  # the node composed (and counted) at its anchor
        if len(self._open) == MAX_DEPTH:
            raise _Refused(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        self._open.append(event.anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._open.pop()
        children = (node.value if isinstance(node, yaml.SequenceNode) else
                    [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
        values = 1 + sum(self._values[id(child)] for child in children)
        if values > MAX_VALUES:
            raise _Refused(None, None, f"more than {MAX_VALUES} values here once aliases are expanded",
                           node.start_mark)
        self._values[id(node)] = values
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """PyYAML's value of `node`, or a `_Bad` in its place where a scalar's constructor fails
        (`int()` past Python's digit limit, a date of month 13) or gives an integer Python cannot
        write back as text: gathered in `bad`, reported with their key paths once the file is read."""
        if node in self.constructed_objects:
            return self.constructed_objects[node]  # an alias of a node read already (a _Bad once only)
        deep_before = self.deep_construct
        try:
            value = super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            if not isinstance(node, yaml.ScalarNode):
                raise
            self.recursive_objects.pop(node, None)  # what PyYAML leaves behind when a constructor raises
            self.deep_construct = deep_before
            value = _Bad(node, _unreadable(node, e))
        else:
            if isinstance(value, int) and not _writable(value):
                value = _Bad(node, f"integer too large: more than {sys.get_int_max_str_digits()} digits")
        if isinstance(value, _Bad):
            self.constructed_objects[node] = value
            self.bad.append(value)
        return value


class _Bad:
    """A scalar that could not be read (`reason`), in the tree in place of its value until reported."""

    def __init__(self, node: yaml.ScalarNode, reason: str):
        self.node, self.reason = node, reason


def _writable(value: int) -> bool:
    """Whether Python can write `value` as decimal text (every message, a JSON line, needs to)."""
    if value.bit_length() <= 2000:  # at most 603 digits: within any limit Python may set (640 at least)
        return True
    try:
        str(value)
    except ValueError:
        return False
    return True


def _unreadable(node: yaml.ScalarNode, error: Exception) -> str:
    """Why PyYAML could not construct the scalar `node`, in the file's words."""
    text = node.value.replace("_", "")
    if re.fullmatch(r"[-+]?[0-9]+", text) and node.tag.endswith(":int"):
        return f"integer too large: {len(text.lstrip('+-'))} digits, at most {sys.get_int_max_str_digits()}"
    kind = node.tag.rsplit(":", 1)[-1]
    shown = node.value if len(node.value) <= 40 else node.value[:37] + "..."
    detail = f" ({error})" if kind == "timestamp" and isinstance(error, ValueError) else ""  # month must be in 1..12
    return f"not a valid {kind}: {shown!r}{detail}"


def _key_paths(root: yaml.Node) -> dict[int, str]:
    """The key path (`sources[0].uri`) of every node of a composed file, by `id(node)`, where it is
    first written; a mapping's key node has the path of its mapping."""
    paths: dict[int, str] = {}

    def walk(node: yaml.Node, path: str) -> None:
        if id(node) in paths:
            return  # an alias: reported where its anchor is written
        paths[id(node)] = path
        if isinstance(node, yaml.SequenceNode):
            for i, child in enumerate(node.value):
                walk(child, f"{path}[{i}]")
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                paths.setdefault(id(key), path)
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                walk(value, join_key(path, name if len(name) <= 40 else name[:37] + "..."))

    walk(root, "")
    return paths


def read_yaml(path: str | Path, display: str | None = None) -> Any:
    """The YAML tree of a pipeline file (or another YAML file a pipeline names: a class names
    file), read with the bounds of `_PipelineLoader` and at most `MAX_FILE_BYTES` long; raises
    `ConfigError` with one line naming the file (and line), or one line per value YAML parses but
    Python cannot hold (an integer past Python's digit limit, a date of month 13), each naming the
    value's key path and line."""
    display = str(path) if display is None else display
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise ConfigError([f"{display}: larger than {MAX_FILE_BYTES >> 20} MiB: not a pipeline file"])
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{display}: file not found"]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError([f"{display}: cannot read: {getattr(e, 'strerror', None) or e}"]) from None
    loader = _PipelineLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
        if loader.bad:
            problems, paths = Problems(display), _key_paths(root)
            for bad in sorted(loader.bad, key=lambda b: (b.node.start_mark.line, b.node.start_mark.column)):
                where = paths.get(id(bad.node), "")
                problems.add(where, f"{bad.reason} (line {bad.node.start_mark.line + 1})")
            raise ConfigError(problems.lines)
        return data
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        if isinstance(e, _Refused):
            raise ConfigError([f"{display}: {where}{e.problem}"]) from None
        reason = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError([f"{display}: {where}invalid YAML: {reason}"]) from None
    finally:
        loader.dispose()
