"""Errors that reach the user as one clear line (no traceback unless --debug)."""

from __future__ import annotations


class StreamlensError(Exception):
    """An error whose message is fit to show a user as it is: it names what and where."""


class ConfigError(StreamlensError):
    """One or more mistakes in a pipeline file, each a line `file: key.path: what is wrong`.

    `problems` is the list of lines, or one line as a string."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class SourceError(StreamlensError):
    """A source cannot be opened or read: a missing, corrupt or unsupported input."""


class SinkError(StreamlensError):
    """A sink cannot be opened or written."""


class DetectorError(StreamlensError):
    """A detector cannot be built or run: a missing model, a model of the wrong shape."""


class StreamConflict(StreamlensError):
    """A change to a running pipeline's streams that cannot be made now: a name already in use, a
    stream that has already ended, a run that is ending (HTTP 409)."""


class NoSuchStream(StreamlensError):
    """A running pipeline has no stream of that name (HTTP 404)."""


class StreamLimit(StreamlensError):
    """A stream cannot be added: the run has `runtime.max_streams` streams open (HTTP 429)."""
