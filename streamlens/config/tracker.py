"""The `tracker` section, and its short forms (`tracker: none`, `tracker: mv`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from .common import MAX_SECONDS, _Keys, ordered
from .problems import invalid

TRACKER_MOTIONS = ("kalman", "flow", "mv")


def _tracker_short(value: Any) -> Any:
    """`tracker: none` (or false): no tracking; `tracker: mv`: that motion with its defaults."""
    if value == "none" or value is False:
        return TrackerConfig(motion=None)  # a model, not a mapping: a null in a mapping is a key not given
    if isinstance(value, str):
        if value not in TRACKER_MOTIONS:
            raise invalid(f"unknown {value!r} (none, or a mapping with motion: {', '.join(TRACKER_MOTIONS)})")
        return {"motion": value}
    return value


class TrackerConfig(_Keys):
    """The `tracker` section (or `none`, or a motion's name: `tracker: mv`)."""

    motion: Literal["kalman", "flow", "mv"] | None = Field(
        "kalman", description="how boxes move between keyframes: kalman, flow (optical flow), mv (the decoder's "
                              "motion vectors); null: detections pass through untracked")
    high_score: float | None = Field(None, ge=0, le=1, description="confident detections (matched first); "
                                                                   "default: the detector's conf")
    low_score: float | None = Field(None, ge=0, le=1, description="the weakest detection matched (default 0.1); "
                                                                  "the detector reports boxes down to it for the "
                                                                  "tracker alone: under its conf, never shown")
    new_track_score: float | None = Field(None, ge=0, le=1, description="the least score to start a track")
    lost_s: float | None = Field(None, gt=0, le=MAX_SECONDS, description="how long a lost track waits to be found")
    coast_s: float | None = Field(None, ge=0, le=MAX_SECONDS, description="how long a missed track stays "
                                                                          "on screen (0: never)")

    @field_validator("low_score")
    @classmethod
    def _low(cls, value: float | None, info: ValidationInfo) -> float | None:
        return ordered(value, info, "high_score", "tracker", most=True)

    @field_validator("coast_s")
    @classmethod
    def _coast(cls, value: float | None, info: ValidationInfo) -> float | None:
        return ordered(value, info, "lost_s", "tracker", most=True)
