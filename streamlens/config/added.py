"""A source added to a running pipeline (`POST /api/streams`): one mapping of `sources`, checked as
the pipeline file's are.

`added_source(data, config, taken)` validates `data` (the JSON of the request) with the same keys,
defaults and checks as an entry of the file's `sources` (relative paths relative to the pipeline
file's folder), names it as the file would (`cam<N>` by its place when it has no name), refuses a
name `taken` in this run, and for a file checks what `streamlens validate` checks (it opens as the
run will open it). Every mistake is one line in validate's words, under the key path the entry
would have in the file (`sources[3].uri: file not found: /x/a.mp4`), prefixed with what was asked
(`POST /api/streams`), and raised as `ConfigError`. What may fail but need not (a camera whose host
does not resolve now) comes back as warnings.

No `${VAR}` is filled in: a request's text is never interpolated with the run's environment, and
no string of it may hold a control character (text.py). With `remote=True` (a request over HTTP,
not an embedding program's call) the source is also held to what the operator allows and never
listens (remote.py): its options then carry FFmpeg's `protocol_whitelist` for its scheme.

Example:
    >>> import tempfile, pathlib
    >>> from streamlens.config import load_pipeline
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "p.yaml").write_text("sources: [{uri: rtsp://127.0.0.1/1}]\\ndetector: {backend: motion}\\n")
    >>> cfg = load_pipeline(d / "p.yaml")
    >>> src, warnings = added_source({"uri": "rtsp://127.0.0.1/2"}, cfg, {"cam1"})
    >>> src.name, src.live, warnings
    ('cam2', True, [])
    >>> added_source({"uri": "rtsp://127.0.0.1/3", "fps": 5}, cfg, {"cam1"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    streamlens.errors.ConfigError: POST /api/streams: sources[1].fps: unknown key (expected one of: ...)
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError, StreamLimit
from .model import PipelineConfig, SourceConfig
from .sources import resolve_fast_decode
from .preflight import input_problems, preflight_warnings
from .problems import Problems, from_validation, join_key
from .remote import remote_options, remote_problems
from .text import control_problems

#: how the request is named in its messages
ASKED = "POST /api/streams"


class _Under(Problems):
    """Problems of one entry, each under its key path in the file (`sources[3]`)."""

    def __init__(self, file: str, where: str):
        super().__init__(file)
        self.where = where

    def add(self, path: str, message: str) -> None:
        super().add(join_key(self.where, path) if path else self.where, message)


def added_source(data: Any, config: PipelineConfig, taken: set[str], *,
                 remote: bool = False) -> tuple[SourceConfig, list[str]]:
    """`data` as the next stream of the run, after the `taken` ones (see the module's docstring): the
    typed source and its warnings; raises `ConfigError` with one line per mistake. `remote`: asked
    over HTTP."""
    index = max(len(config.sources), len(taken))
    where = f"sources[{index}]"
    problems = _Under(ASKED, where)
    if not isinstance(data, dict):
        problems.add("", 'expected one source as a JSON object, e.g. {"uri": "rtsp://cam/1", "name": "door"}')
        raise ConfigError(problems.lines)
    control_problems(data, "", problems)
    if problems.lines:  # nothing below may show that text
        raise ConfigError(problems.lines)
    if data.get("name") is None:
        data = {**data, "name": _free_name(index, taken)}
    try:
        source = SourceConfig.model_validate(data, context={"base": config.path.resolve().parent})
    except ValidationError as e:
        from_validation(e, SourceConfig, problems)
        raise ConfigError(problems.lines) from None
    if source.name in taken:
        problems.add("name", f"{source.name!r} is used by another stream of this run")
    if config.runtime.mode == "bulk":
        problems.add("", "runtime.mode bulk reads the pipeline file's sources only")
    if remote:
        for key, message in remote_problems(source, config.runtime.http):
            problems.add(key, message)
    if problems.lines:
        raise ConfigError(problems.lines)
    if remote:
        source = source.model_copy(update={"options": remote_options(source)})
    resolve_fast_decode(source, len(taken) + 1)
    alone = config.model_copy(update={"sources": [source]})
    lines = [_placed(line, where) for line in input_problems(alone)]
    if lines:
        raise ConfigError(lines)
    return source, [_placed(line, where) for line in preflight_warnings(alone)]


def check_room(open_now: int, config: PipelineConfig) -> None:
    """Raise `StreamLimit` when `open_now` streams (open: not ended, not being removed) leave no room
    under `runtime.max_streams` for one more."""
    limit = config.runtime.stream_limit
    if open_now >= limit:
        how = " (auto: by the CPU cores)" if config.runtime.max_streams == "auto" else ""
        raise StreamLimit(f"{ASKED}: runtime.max_streams: {open_now} streams are open, the most this run "
                          f"takes is {limit}{how}; remove one first")


def _free_name(index: int, taken: set[str]) -> str:
    """The name the file would give the entry at `index` (`cam<index+1>`), or the next one free."""
    n = index + 1
    while f"cam{n}" in taken:
        n += 1
    return f"cam{n}"


def _placed(line: str, where: str) -> str:
    """A preflight line about the one-source copy (`FILE: sources[0].uri: ...`) as this request's."""
    _, _, rest = line.partition(": ")
    return f"{ASKED}: {rest.replace('sources[0]', where, 1)}"


__all__ = ["added_source", "check_room", "ASKED"]
