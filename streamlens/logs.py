r"""Log lines and terminal text that show what they were given, escaped.

A stream's name, a camera's URI, a path or a request's text reach log lines and the terminal; a
newline in one forges a log line, an ANSI escape (`\x1b[2J`) rewrites the terminal. `escape` shows
every control character as an escape instead: C0 and C1 controls and DEL (`\n`, `\r`, `\t`,
`\x1b`, `\x85`, ...), and Unicode's line and paragraph separators and bidirectional overrides
(`\u2028`, `\u202e`, ...), which turn a line around on a terminal.

`EscapingFormatter` does it for every log line: each argument of the message is shown escaped,
while the line's own layout (the format, the message's template, which are the code's own words)
is kept; for loggers outside streamlens (whose templates may hold what they were given) the whole
message is escaped. A traceback keeps its own line breaks; each exception's message in it is
escaped whole.
`setup(level, fmt)` installs it where a process configures its logging (`streamlens` itself,
each engine of `runtime.workers`, each decode worker process).

Example:
    >>> escape("cam1\n\x1b[31mERROR fake")
    'cam1\\n\\x1b[31mERROR fake'
    >>> record = logging.LogRecord("streamlens.sources", logging.WARNING, __file__, 1,
    ...                            "%s: stream lost (%r)", ("cam\n1", "a\rb"), None)
    >>> EscapingFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    "WARNING streamlens.sources: cam\\n1: stream lost ('a\\rb')"
"""

from __future__ import annotations

import logging
import numbers
import re
import traceback
from collections.abc import Mapping
from typing import Any

#: what `escape` shows as escapes: C0 controls, DEL, C1 controls, and the line and paragraph
#: separators and bidirectional embeddings, overrides and isolates
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shown(found: re.Match) -> str:
    char = found.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def escape(text: str, keep: str = "") -> str:
    """`text` with every control character (see `CONTROL`) shown as an escape, but those in `keep`."""
    if keep:
        return CONTROL.sub(lambda m: m.group() if m.group() in keep else _shown(m), text)
    return CONTROL.sub(_shown, text)


class _Escaped(str):
    """A string argument, escaped; `%r` shows the original's repr, escaped."""

    __slots__ = ("_original",)

    def __new__(cls, original: str):
        made = super().__new__(cls, escape(original))
        made._original = original
        return made

    def __repr__(self) -> str:
        return escape(repr(self._original))


class _Shown:
    """Any other argument (an exception, a path): its `str`, `repr` and `format` escaped; a number
    where the template asks one (`%d`, `%x`) is the object's own."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __str__(self) -> str:
        return escape(str(self.value))

    def __repr__(self) -> str:
        return escape(repr(self.value))

    def __format__(self, spec: str) -> str:
        return escape(format(self.value, spec))

    def __int__(self) -> int:
        return int(self.value)

    def __index__(self) -> int:
        return self.value.__index__()

    def __float__(self) -> float:
        return float(self.value)


def _arg(value: Any) -> Any:
    if value is None or isinstance(value, (numbers.Number, _Escaped, _Shown)):
        return value
    return _Escaped(value) if isinstance(value, str) else _Shown(value)


def escaped_args(args: Any) -> Any:
    """A log record's `args` with each value shown escaped (a tuple, or one mapping)."""
    if isinstance(args, Mapping):
        return {key: _arg(value) for key, value in args.items()}
    if isinstance(args, tuple):
        return tuple(_arg(value) for value in args)
    return args


class EscapingFormatter(logging.Formatter):
    """A `logging.Formatter` whose lines show no raw control character (see the module)."""

    def format(self, record: logging.LogRecord) -> str:
        saved_args, saved_msg = record.args, record.msg
        record.args = escaped_args(saved_args)
        ours = record.name == "streamlens" or record.name.startswith("streamlens.")
        if not ours or not isinstance(saved_msg, str):
            record.msg = escape(str(saved_msg))
        try:
            return super().format(record)
        finally:
            record.args, record.msg = saved_args, saved_msg

    def formatException(self, ei) -> str:
        """The traceback, its line breaks kept; each exception's message escaped whole (a newline
        in it is no line of the traceback's)."""
        if ei[1] is None:
            return escape(super().formatException(ei), keep="\n")
        made = traceback.TracebackException(*ei, compact=True)
        seen, todo = set(), [made]
        while todo:
            each = todo.pop()
            if id(each) in seen:
                continue
            seen.add(id(each))
            if isinstance(getattr(each, "_str", None), str):  # CPython's: the message as `str(exc)` gives it
                each._str = escape(each._str)
            todo += [e for e in (each.__cause__, each.__context__, *(each.exceptions or ())) if e is not None]
        return escape("".join(made.format()).rstrip("\n"), keep="\n")

    def formatStack(self, stack_info: str) -> str:
        return escape(super().formatStack(stack_info), keep="\n")


def setup(level: int, fmt: str = "%(levelname)s %(name)s: %(message)s") -> None:
    """The process's logging as `logging.basicConfig(level=level, format=fmt)` makes it, its lines
    written by an `EscapingFormatter`; a handler already there (a test's) gets the formatter too."""
    logging.basicConfig(level=level, format=fmt)
    root = logging.getLogger()
    root.setLevel(level)
    for handler in root.handlers:
        if not isinstance(handler.formatter, EscapingFormatter):
            handler.setFormatter(EscapingFormatter(handler.formatter._fmt if handler.formatter else fmt))


__all__ = ["escape", "escaped_args", "EscapingFormatter", "setup", "CONTROL"]
