"""The `keyframes` section: how often the detector runs on a stream."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .common import INT_MAX, _Keys, ordered


class KeyframeConfig(_Keys):
    """The `keyframes` section: how often the detector runs on a stream."""

    interval: int = Field(1, ge=1, le=INT_MAX, description="a keyframe every this many frames")
    adaptive: bool = Field(False, description="lengthen the interval of a stream whose keyframes find nothing new")
    max_interval: int | None = Field(None, ge=1, le=INT_MAX, description="how long adaptive may make it "
                                                                          "(default: 15, or interval if longer)")
    shared: bool = Field(True, description="live streams share one schedule by worth; false: each its own")
    min_interval: int = Field(1, ge=1, le=INT_MAX, description="shared: the fewest frames between two "
                                                               "keyframes of a stream")

    @field_validator("max_interval")
    @classmethod
    def _max(cls, value: int, info: ValidationInfo) -> int:
        return ordered(value, info, "interval", "keyframes", most=False)

    @field_validator("min_interval")
    @classmethod
    def _min(cls, value: int, info: ValidationInfo) -> int:
        return ordered(value, info, "interval", "keyframes", most=True)

    @model_validator(mode="after")
    def _defaults(self) -> KeyframeConfig:
        if self.max_interval is None:
            self.max_interval = max(15, self.interval)
        return self
