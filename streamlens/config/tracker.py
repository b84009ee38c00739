"""The `tracker` section, and its short forms (`tracker: none`, `tracker: mv`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from .common import MAX_SECONDS, _Keys, ordered
from .problems import invalid

TRACKER_MOTIONS = ("kalman", "flow", "mv")

# The tracker's defaults that the pipeline file can change, stated once here (streamlens/track/tracker.py
# takes them from here, with the rest of its constants):
#: detections below this are ignored; between it and the confident score they only keep tracks alive
#: (ByteTrack's 0.1)
LOW_SCORE = 0.1
#: how long a lost track waits to be found again (ByteTrack: 30 frames at 30 fps; 2 s chosen by
#: leave-one-out on MOTChallenge, tools/results/track_mot.md: people hidden behind others for longer
#: than a second are found again)
LOST_S = 2.0
#: how long a track missed on a keyframe stays on screen, carried by motion (streamlens/track/tracker.py).
#: 0 by default: the frames after a keyframe show what it showed. Chosen over 0.4 (tools/results/
#: track.md, "coast_s"): 0 agrees better with a detector run on every frame on every shared clip at
#: every interval (highway 720p interval 2 between keyframes F1 0.947 against 0.907), and live it is
#: what lets streamlens beat holding the last detections at low load; 0.4 scores up to 1.0 HOTA more
#: on still MOTChallenge cameras at interval 5 and more (their ground truth keeps occluded people).
COAST_S = 0.0
#: a lost track is found again by motion and look (streamlens/track/reassoc.py). Off by default: the
#: look is the only thing that makes the wide motion gate safe (by motion alone, twice as many of its
#: links were wrong as right on MOTChallenge), and on the one shared clip with pixels and identities
#: (highway) it tells two cars near each other apart too rarely to be that (tools/results/track_mot.md)
APPEARANCE = False


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
    low_score: float = Field(LOW_SCORE, ge=0, le=1, description="the weakest detection matched; the detector "
                                                               "reports boxes down to it for the tracker alone: "
                                                               "under its conf, never shown")
    new_track_score: float | None = Field(None, ge=0, le=1, description="the least score to start a track")
    lost_s: float = Field(LOST_S, gt=0, le=MAX_SECONDS, description="how long a lost track waits to be found")
    coast_s: float = Field(COAST_S, ge=0, le=MAX_SECONDS, description="how long a missed track stays on screen "
                                                                      "(0: never)")
    appearance: bool = Field(APPEARANCE, description="find a lost track again by motion and look: a colour "
                                                     "and texture descriptor of its box on keyframes")

    @field_validator("low_score")
    @classmethod
    def _low(cls, value: float | None, info: ValidationInfo) -> float | None:
        return ordered(value, info, "high_score", "tracker", most=True)

    @field_validator("coast_s")
    @classmethod
    def _coast(cls, value: float | None, info: ValidationInfo) -> float | None:
        return ordered(value, info, "lost_s", "tracker", most=True)
