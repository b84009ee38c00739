"""The text a pipeline file or a request gives: no control characters, anywhere.

Names, URIs, labels, paths and every other string of a pipeline file (or of a `POST /api/streams`
body) reach log lines, the progress display, file names and JSON; a newline in one forges a log
line, an ANSI escape rewrites the terminal. So every string of the tree, keys included, is refused
when it holds a control character (Unicode's category Cc: U+0000-U+001F, U+007F-U+009F, tab and
newline included), one line per string naming its key path and the first such character by its
code point; the string itself is not shown.

Example:
    >>> from streamlens.config.problems import Problems
    >>> problems = Problems("p.yaml")
    >>> control_problems({"sources": [{"name": "cam\\n1", "uri": "rtsp://cam/1"}]}, "", problems)
    >>> problems.lines
    ['p.yaml: sources[0].name: holds a control character (U+000A): not allowed in a pipeline file or a request']
"""

from __future__ import annotations

import re
from typing import Any

from .problems import Problems, join_key

#: Unicode's control characters (category Cc)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def control_problems(node: Any, path: str, problems: Problems) -> None:
    """Add to `problems` one line per string of `node` (a YAML or JSON tree: mappings, lists,
    scalars) that holds a control character, under its key path below `path`."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = join_key(path, str(key) if not isinstance(key, str) or not CONTROL.search(key) else ascii(key))
            if isinstance(key, str):
                _check(key, where, problems)
            control_problems(value, where, problems)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            control_problems(value, f"{path}[{i}]", problems)
    elif isinstance(node, str):
        _check(node, path, problems)


def _check(text: str, path: str, problems: Problems) -> None:
    found = CONTROL.search(text)
    if found is not None:
        problems.add(path, f"holds a control character (U+{ord(found.group()):04X}): "
                           "not allowed in a pipeline file or a request")


__all__ = ["control_problems", "CONTROL"]
