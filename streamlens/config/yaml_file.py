"""Reading a pipeline file: bounded YAML, then `${VAR}` filled in from the environment.

The file is bounded while it is read, before anything walks the tree: at most `MAX_FILE_BYTES`,
`MAX_DEPTH` levels deep, and `MAX_VALUES` values once its YAML aliases are expanded. Each refusal
is one line naming the file and, where it has one, the line and column.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from .problems import Problems

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


def read_yaml(path: str | Path, display: str | None = None) -> Any:
    """The YAML tree of a pipeline file (or another YAML file a pipeline names: a class names
    file), read with the bounds of `_PipelineLoader` and at most `MAX_FILE_BYTES` long; raises
    `ConfigError` with one line naming the file (and line)."""
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
        return loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        if isinstance(e, _Refused):
            raise ConfigError([f"{display}: {where}{e.problem}"]) from None
        reason = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError([f"{display}: {where}invalid YAML: {reason}"]) from None
    finally:
        loader.dispose()
