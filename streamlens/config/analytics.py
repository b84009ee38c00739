"""The `analytics` section: lines, zones, speed and snapshots on tracked objects."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from .common import MAX_SECONDS, PathKey, _Keys
from .problems import invalid, show


def _points(count: int | None):
    """Points of a line (`count` 2), a ground rectangle (4) or a zone (None: at least 3): [[x, y], ...],
    numbers; in source pixels, or every one in 0..1 (fractions of the frame)."""
    def check(value: Any) -> Any:
        ok = isinstance(value, list) and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                        and abs(v) < 1e9 for v in p) for p in value)
        ok = ok and (len(value) == count if count else len(value) >= 3)
        if not ok:
            want = ({2: "two points [[x, y], [x, y]]", 4: "four points [[x, y], ...]"}[count] if count
                    else "at least three points [[x, y], ...]")
            raise invalid(f"expected {want}, got {show(value)}")
        return [(float(x), float(y)) for x, y in value]
    return check


_POINTS = {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}}


class _Rule(_Keys):
    name: str = Field(description="the rule's name in counts, zones and events")
    classes: list[str] | None = Field(None, description="the labels it watches (default: all)")
    streams: list[str] | None = Field(None, description="the streams it applies to (default: all)")


class LineConfig(_Rule):
    """A line that counts the tracks crossing it, by direction (in: from its left to its right,
    seen from its first point towards its second)."""

    points: Annotated[list[tuple[float, float]], BeforeValidator(_points(2)), WithJsonSchema(_POINTS)] = Field(
        description="two points, source pixels or fractions of the frame")
    margin_px: float = Field(4.0, ge=0, le=10_000, description="a box within this many pixels of the line has "
                                                              "not crossed it yet (jitter on the line counts once)")
    min_frames: int = Field(2, ge=1, le=10_000, description="frames in a row on the other side before a crossing "
                                                          "counts (a box put back by the next keyframe crosses nothing)")


class ZoneConfig(_Rule):
    """A polygon that says who is in it, for how long, and who loiters."""

    polygon: Annotated[list[tuple[float, float]], BeforeValidator(_points(None)), WithJsonSchema(_POINTS)] = Field(
        description="at least three points, source pixels or fractions of the frame")
    inertia: int = Field(3, ge=1, le=10_000, description="frames in a row inside (outside) before an object "
                                                        "enters (leaves)")
    loiter_s: float | None = Field(None, gt=0, le=MAX_SECONDS, description="a `loiter` event once an object "
                                                                            "has stayed this long")


class GroundConfig(_Keys):
    """Speed from the ground plane: four image points, the corners of a rectangle on the ground (in
    order around it, the first two along its width), and that rectangle's size in metres."""

    points: Annotated[list[tuple[float, float]], BeforeValidator(_points(4)), WithJsonSchema(_POINTS)] = Field(
        description="four points, source pixels or fractions of the frame")
    width_m: float = Field(gt=0, le=1e5, description="the ground distance from the first point to the second")
    length_m: float = Field(gt=0, le=1e5, description="the ground distance from the second point to the third")


class SnapshotConfig(_Keys):
    """A JPEG of the object for some events: to a folder, and attached to the event on the sinks."""

    events: list[Literal["object_start", "object_end"]] = Field(
        ["object_start", "object_end"], min_length=1, description="the events that get one")
    kind: Literal["crop", "frame"] = Field("crop", description="crop: the object's box (its best-scoring view "
                                                               "for object_end); frame: the annotated frame")
    padding: float = Field(0.15, ge=0, le=2, description="crop margin, as a share of the box's size")
    quality: int = Field(85, ge=1, le=100, description="JPEG quality")
    path: PathKey | None = Field(None, description="a folder: <stream>/<event>-<id>-<seq>.jpg in it (default: "
                                                   "attached to the events only)")
    classes: list[str] | None = Field(None, description="the labels that get one (default: all)")


class RetainConfig(_Keys):
    """analytics.clips.retain: the oldest clips past either bound are deleted."""

    days: float | None = Field(7.0, gt=0, le=36500, description="delete clips older than this (null: no age limit)")
    max_gb: float | None = Field(20.0, gt=0, le=1e6, description="delete the oldest while all clips are over "
                                                                "this (null: no size limit)")


class ClipsConfig(_Keys):
    """analytics.clips: an MP4 around chosen events, from the camera's own packets (sources/clips.py)."""

    events: list[Literal["line_cross", "zone_enter", "zone_exit", "loiter", "object_start", "object_update",
                         "object_end"]] = Field(["line_cross", "zone_enter", "loiter"], min_length=1,
                                                description="the events that get a clip")
    classes: list[str] | None = Field(None, description="the labels that get one (default: all)")
    pre_s: float = Field(5.0, ge=0, le=60, description="seconds before the event")
    post_s: float = Field(5.0, ge=0, le=60, description="seconds after it")
    path: PathKey = Field(description="the folder: <stream>/<time>-<event>-<seq>.mp4 in it")
    retain: RetainConfig = Field(default_factory=RetainConfig)


class AnalyticsConfig(_Keys):
    """The `analytics` section: rules run on every frame's tracked objects (streamlens/analytics)."""

    anchor: Literal["bottom_center", "center", "top_center", "bottom_left", "bottom_right"] = Field(
        "bottom_center", description="the point of a box the rules watch")
    zone_anchor: Literal["point", "mask"] = Field("point", description="point: an object is in a zone when its "
                                                  "anchor is; mask: when half its mask is (objects without a mask: "
                                                  "their anchor)")
    pixels_per_metre: float | None = Field(None, gt=0, le=1e6, description="speed in km/h from anchor motion")
    ground: GroundConfig | None = Field(None, description="speed in km/h on the ground plane (instead of "
                                                          "pixels_per_metre)")
    snapshots: SnapshotConfig | None = Field(None, description="JPEG snapshots of objects for their events")
    clips: ClipsConfig | None = Field(None, description="MP4 clips around events, from the cameras' own packets")
    end_after_s: float = Field(2.0, gt=0, le=MAX_SECONDS, description="a track not seen this long has ended "
                                                                      "(object_end)")
    lines: list[LineConfig] = Field(default_factory=list)
    zones: list[ZoneConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> AnalyticsConfig:
        names = [r.name for r in [*self.lines, *self.zones]]
        again = sorted({n for n in names if names.count(n) > 1})
        if again:
            raise invalid(f"rule names must differ: {', '.join(again)} used twice")
        if self.pixels_per_metre is not None and self.ground is not None:
            raise invalid("pixels_per_metre and ground both give speed: keep one")
        return self
