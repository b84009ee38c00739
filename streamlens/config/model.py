"""The keys of a pipeline file, each declared once: its type, default, range and meaning.

These pydantic models are what a run reads (`cfg.detector.conf`), what validation checks, and what
`streamlens schema` publishes as JSON Schema for editors. They are strict: `"5"` is no integer and
`yes please` no boolean; an integer is taken for a number. Every number is checked against its
range: integers where a fraction makes no sense, positive where zero does, finite always (`.inf`
and `.nan` are YAML floats too), durations at most a day, and sizes that hold frames or messages in
memory (queues, batches, `imgsz`, `hwm`) bounded so that a typo cannot exhaust the machine. A key
given as null (`max_fps:` with nothing after it) is a key not given.

Checks that need more than the key's own value (a file that must exist, a key that only a camera
takes, one key bounded by another) are validators here too; they raise `problems.invalid`, whose
message the user reads as it is. Relative paths are resolved against the pipeline file's folder
(`context={"base": folder}`; the working directory without one).

Each section is declared in its own module (`sources.py`, `detector.py`, `keyframes.py`,
`tracker.py`, `sinks.py`, `analytics.py`, `secondary.py`, `segment.py`, `reid.py`, `runtime.py`), on what `common.py` holds
for all of them; this one declares the file as a whole and re-exports every public name.

Example:
    >>> KeyframeConfig(interval=5).max_interval
    15
    >>> TrackerConfig(motion="mv").lost_s
    2.0
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from .analytics import AnalyticsConfig, GroundConfig, LineConfig, SnapshotConfig, ZoneConfig
from .common import (INT_MAX, MAX_BATCH, MAX_HWM, MAX_IMGSZ, MAX_MS, MAX_QUEUE_SIZE, MAX_SECONDS, MAX_THREADS,
                     MAX_WORKERS, PathKey, _Keys, resolve)
from .detector import DetectorConfig, InputConfig
from .keyframes import KeyframeConfig
from .problems import invalid
from .runtime import ClusterConfig, HistoryConfig, HttpConfig, RuntimeConfig
from .reid import ReidConfig, check_across
from .secondary import CacheConfig, SecondaryConfig, _unique_secondary
from .segment import SegmentConfig
from .sinks import (EVENT_KINDS, CurveConfig, JsonlSinkConfig, MqttSinkConfig, SinkConfig, VideoSinkConfig,
                    WebhookSinkConfig, ZmqSinkConfig)
from .sources import LIVE_SCHEMES, MAX_PIXELS, SourceConfig, _named_sources, resolve_fast_decode
from .tracker import TRACKER_MOTIONS, TrackerConfig, _tracker_short

__all__ = ["INT_MAX", "MAX_SECONDS", "MAX_MS", "MAX_PIXELS", "MAX_QUEUE_SIZE", "MAX_BATCH", "MAX_IMGSZ", "MAX_HWM",
           "MAX_THREADS", "MAX_WORKERS", "LIVE_SCHEMES", "TRACKER_MOTIONS", "EVENT_KINDS", "PathKey", "resolve",
           "SourceConfig", "InputConfig", "DetectorConfig", "KeyframeConfig", "TrackerConfig", "SinkConfig",
           "JsonlSinkConfig", "VideoSinkConfig", "CurveConfig", "ZmqSinkConfig", "MqttSinkConfig",
           "WebhookSinkConfig", "LineConfig", "ZoneConfig", "GroundConfig", "SnapshotConfig", "AnalyticsConfig",
           "SecondaryConfig", "SegmentConfig", "ReidConfig", "CacheConfig", "HttpConfig", "HistoryConfig", "ClusterConfig", "RuntimeConfig", "PipelineFile",
           "PipelineConfig"]


class PipelineFile(_Keys):
    """A pipeline file: what `streamlens schema` describes."""

    model_config = ConfigDict(title="streamlens pipeline")

    sources: Annotated[list[SourceConfig], BeforeValidator(_named_sources)] = Field(
        min_length=1, description="files and cameras")
    detector: DetectorConfig
    keyframes: KeyframeConfig = Field(default_factory=KeyframeConfig)
    tracker: Annotated[TrackerConfig, BeforeValidator(_tracker_short),
                       WithJsonSchema({"anyOf": [{"enum": ["none", *TRACKER_MOTIONS]},
                                                 TrackerConfig.model_json_schema()]})] = Field(
        default_factory=TrackerConfig)
    sinks: list[SinkConfig] = Field(default_factory=list, description="where results go")
    analytics: AnalyticsConfig | None = Field(None, description="lines, zones and speed on tracked objects")
    secondary: Annotated[list[SecondaryConfig], AfterValidator(_unique_secondary)] = Field(
        default_factory=list, description="models run on the crops of tracked objects")
    segment: SegmentConfig | None = Field(None, description="masks for tracked objects (SAM, or the detector's own)")
    reid: ReidConfig | None = Field(None, description="an appearance per track; identities across cameras")
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, sources: list[SourceConfig]) -> list[SourceConfig]:
        seen, again = set(), {}
        for i, source in enumerate(sources):
            if source.name in seen:
                again[f"[{i}].name"] = f"{source.name!r} is used by another source"
            seen.add(source.name)
        if again:
            raise invalid("names used twice", **again)
        return sources

    @model_validator(mode="after")
    def _room_for_sources(self) -> PipelineFile:
        """A `runtime.max_streams` set to a number holds the file's own sources too."""
        limit = self.runtime.max_streams
        if limit != "auto" and len(self.sources) > limit:
            raise invalid("too many sources", **{"runtime.max_streams": f"{limit}, but sources lists "
                                                                      f"{len(self.sources)} streams"})
        return self

    @model_validator(mode="after")
    def _reid_across_sources(self) -> PipelineFile:
        check_across(self.reid, self.sources, self.secondary)
        return self

    @model_validator(mode="after")
    def _fast_decode_where_decoding_fills_the_cores(self) -> PipelineFile:
        live = sum(1 for source in self.sources if source.live)
        for source in self.sources:
            resolve_fast_decode(source, live)
        return self

    @model_validator(mode="after")
    def _one_object_one_box(self) -> PipelineFile:
        """`detector.agnostic_nms: auto` merges boxes of two classes on one object only for a tracker
        (one object, one track, one crossing); with `tracker: none` it is false (every box the model
        reports, as it reports it)."""
        if self.detector.agnostic_nms == "auto" and self.tracker.motion is None:
            self.detector.agnostic_nms = False
        return self


class PipelineConfig(PipelineFile):
    """A validated pipeline file, with where it came from: `path`, and `display`, how messages name it."""

    path: Path
    display: str = ""

    def written(self) -> list:
        """What results are written to, as (where, section): each `sinks[i]`, then `runtime.history`
        when set (written like a sink)."""
        out = [(f"sinks[{i}]", sink) for i, sink in enumerate(self.sinks)]
        if self.runtime.history is not None:
            out.append(("runtime.history", self.runtime.history))
        return out
