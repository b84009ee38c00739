"""The pipeline file: load, interpolate `${VAR}`, validate, and turn into config objects.

Every mistake becomes one line `FILE: key.path: what is wrong`; all of them are gathered before
`ConfigError` is raised, so a user fixes a file in one pass (a key that a mapping does not take
is reported before that mapping's values are checked, and a check between two keys runs once
both are valid). Relative paths are relative to the pipeline file's folder.

- `model.py`: every key, declared once (type, default, range, meaning); `streamlens schema`
  prints them as JSON Schema. Each section's keys are in its own module (`sources.py`,
  `detector.py`, `keyframes.py`, `tracker.py`, `sinks.py`, `analytics.py`, `secondary.py`,
  `segment.py`, `runtime.py`; what they share in `common.py`), and `model.py` re-exports them;
- `yaml_file.py`: the file read with bounds (size, depth, aliases), `${VAR}` filled in;
- `problems.py`: pydantic's errors in the file's words;
- `text.py`: no string of the file (nor of a request) holds a control character;
- `preflight.py`: `preflight_problems(cfg)` checks, without starting anything, what a run needs
  from the machine: files to read, folders to write, ports to listen on.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "p.yaml").write_text("sources: [{uri: rtsp://cam/1}]\\ndetector: {backend: motion}\\n")
    >>> cfg = load_pipeline(d / "p.yaml")
    >>> (cfg.sources[0].name, cfg.sources[0].live, cfg.detector.backend)
    ('cam1', True, 'motion')
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError
from ..urls import mask_url
from .model import (INT_MAX, LIVE_SCHEMES, MAX_BATCH, MAX_HWM, MAX_IMGSZ, MAX_MS, MAX_QUEUE_SIZE, MAX_SECONDS,
                    MAX_THREADS, TRACKER_MOTIONS, ClusterConfig, CurveConfig, DetectorConfig, HistoryConfig, HttpConfig, InputConfig,
                    JsonlSinkConfig, KeyframeConfig, PipelineConfig, PipelineFile, RuntimeConfig, SinkConfig,
                    SourceConfig, TrackerConfig, VideoSinkConfig, ZmqSinkConfig)
from .preflight import preflight_problems
from .problems import Problems, from_validation
from .text import control_problems
from .yaml_file import MAX_DEPTH, MAX_FILE_BYTES, MAX_VALUES, interpolate, read_yaml

#: `runtime.mode: bulk` batches this many keyframes unless the file says otherwise
BULK_MAX_BATCH = 32


def parse_pipeline(data: Any, path: Path, display: str | None = None,
                   env: dict[str, str] | None = None) -> PipelineConfig:
    """Validate an already-loaded YAML tree. `display` is how the file is named in messages."""
    problems = Problems(display or str(path))
    if not isinstance(data, dict):
        problems.add("", "expected a mapping with sources, detector, keyframes, tracker and sinks")
        raise ConfigError(problems.lines)
    data = interpolate(data, "", problems, env)
    unset = len(problems.lines)
    control_problems(data, "", problems)
    if len(problems.lines) > unset:  # a control character: nothing below may show that text
        raise ConfigError(problems.lines)
    try:
        file = PipelineFile.model_validate(data, context={"base": path.resolve().parent})
    except ValidationError as e:
        from_validation(e, PipelineFile, problems)
        raise ConfigError(problems.lines) from None
    if problems.lines:  # an unset variable, its key still valid as ""
        raise ConfigError(problems.lines)
    if file.runtime.mode == "bulk":
        file = bulk_mode(file, problems)
    if problems.lines:
        raise ConfigError(problems.lines)
    return PipelineConfig.model_construct(**dict(file), path=path, display=problems.file)


def bulk_mode(file: PipelineFile, problems: Problems) -> PipelineFile:
    """`file` as `runtime.mode: bulk` (or `streamlens run --bulk`) runs it, a new config: archives as
    fast as the machine goes. What bulk mode cannot take (a camera, `loop`) goes into `problems`.

    Files only, never paced or looped; the detector on every frame (keyframes.interval 1), no
    latency budget, batches of `max_batch` (32 unless the file says), and room in the inbox for
    two batches per stream, so decoding runs ahead of inference (and so does preprocessing, on the
    source threads, when the detector runs on an accelerator: `Detector.prepare_ahead`).
    """
    for i, src in enumerate(file.sources):
        if not src.is_file:
            problems.add(f"sources[{i}].uri", "runtime.mode bulk reads files; a camera or URL is live")
        if src.loop:
            problems.add(f"sources[{i}].loop", "runtime.mode bulk reads each file once; remove loop")
    batch = {} if "max_batch" in file.detector.model_fields_set else {"max_batch": BULK_MAX_BATCH}
    detector = file.detector.model_copy(update={**batch, "budget_ms": None})
    return file.model_copy(update={
        "sources": [src.model_copy(update={"live": False}) for src in file.sources],
        "keyframes": file.keyframes.model_copy(update={"interval": 1, "adaptive": False, "min_interval": 1}),
        "detector": detector,
        "runtime": file.runtime.model_copy(update={
            "control": False, "queue_size": max(file.runtime.queue_size, 2 * detector.max_batch)}),
    })


def load_pipeline(path: str | Path, env: dict[str, str] | None = None,
                  overrides: dict[str, dict | list] | None = None) -> PipelineConfig:
    """Read and validate a pipeline file; raises `ConfigError` listing every mistake.

    `overrides` replaces keys of top-level sections, as command-line flags do (`--bulk`:
    `{"runtime": {"mode": "bulk"}}`); a list replaces a whole section (`{"sinks": [...]}`)."""
    return parse_pipeline(read_pipeline_tree(path, overrides), Path(path), str(path), env)


def read_pipeline_tree(path: str | Path, overrides: dict[str, dict | list] | None = None) -> Any:
    """A pipeline file's YAML tree with `overrides` applied (see `load_pipeline`), not yet validated."""
    data = read_yaml(Path(path), str(path))
    if overrides and isinstance(data, dict):
        for section, values in overrides.items():
            current = data.get(section)
            if isinstance(values, list):
                data[section] = values
            else:
                data[section] = {**(current if isinstance(current, dict) else {}), **values}
    return data


def json_schema() -> str:
    """The pipeline file's JSON Schema (draft 2020-12), for editors that check and complete YAML."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **PipelineFile.model_json_schema()}
    return json.dumps(schema, indent=2)


__all__ = ["PipelineConfig", "PipelineFile", "SourceConfig", "DetectorConfig", "InputConfig", "KeyframeConfig",
           "TrackerConfig", "SinkConfig", "JsonlSinkConfig", "VideoSinkConfig", "ZmqSinkConfig", "CurveConfig",
           "RuntimeConfig", "HttpConfig", "HistoryConfig", "ClusterConfig", "load_pipeline", "read_pipeline_tree", "parse_pipeline", "preflight_problems", "interpolate",
           "read_yaml", "json_schema", "mask_url", "INT_MAX", "LIVE_SCHEMES", "MAX_BATCH", "MAX_HWM", "MAX_IMGSZ",
           "MAX_MS", "MAX_QUEUE_SIZE", "MAX_SECONDS", "MAX_THREADS", "MAX_DEPTH", "MAX_FILE_BYTES", "MAX_VALUES",
           "TRACKER_MOTIONS", "BULK_MAX_BATCH"]
