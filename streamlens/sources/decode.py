"""Decoding rules shared by the file source (`file.py`) and the live inputs' decode sessions
(`session.py`): presentation times made strictly increasing, and a frame-rate cap."""

from __future__ import annotations

import math
from fractions import Fraction

import av


class PresentationTimes:
    """Turn decoded frames' timestamps into strictly increasing seconds, for one pass of a file.

    The timestamp is chosen as FFmpeg's `best_effort_timestamp` does: the frame's pts while pts is
    no less reliable than dts, else its dts. (AVI files with packed B-frames, common for XviD/DivX,
    give pts values out of order, but a steady dts.) A frame with neither timestamp, or one that
    would not move time forward, gets the previous time plus one frame duration.

    Example:
        >>> times = PresentationTimes(Fraction(1, 25), 0.04)
        >>> [round(times.from_ticks(p, d), 2) for p, d in [(1, 3), (4, 4), (6, 5), (5, 6), (None, None)]]
        [0.04, 0.16, 0.24, 0.28, 0.32]
    """

    def __init__(self, time_base: Fraction, frame_duration: float):
        self.time_base = time_base
        # exact arithmetic, so a filled-in time equals the file's own time for the same instant
        self.frame_duration = Fraction(frame_duration).limit_denominator(1_000_000)
        self.last_seconds: Fraction | None = None
        self.last_pts: int | None = None
        self.last_dts: int | None = None
        self.faulty_pts = 0
        self.faulty_dts = 0

    def seconds(self, frame: av.VideoFrame) -> float:
        return self.from_ticks(frame.pts, frame.dts)

    def from_ticks(self, pts: int | None, dts: int | None) -> float:
        ticks = self._best_effort(pts, dts)
        seconds = None if ticks is None else ticks * self.time_base
        if self.last_seconds is None:
            seconds = Fraction(0) if seconds is None else seconds
        elif seconds is None or seconds <= self.last_seconds:
            seconds = self.last_seconds + self.frame_duration
        self.last_seconds = seconds
        return float(seconds)

    def _best_effort(self, pts: int | None, dts: int | None) -> int | None:
        if dts is not None:
            self.faulty_dts += self.last_dts is not None and dts <= self.last_dts
            self.last_dts = dts
        if pts is not None:
            self.faulty_pts += self.last_pts is not None and pts <= self.last_pts
            self.last_pts = pts
        if pts is not None and (self.faulty_pts <= self.faulty_dts or dts is None):
            return pts
        return dts


class FrameRateCap:
    """Keep at most `max_fps` frames a second, chosen from presentation times.

    Time since the first frame is cut into slots of 1/max_fps seconds and the first frame of each
    slot is kept, so 30 fps capped at 15 keeps every other frame and 30 capped at 20 keeps two of
    three, evenly.

    Example:
        >>> cap = FrameRateCap(15)
        >>> [cap.keep(k / 30) for k in range(6)]
        [True, False, True, False, True, False]
    """

    def __init__(self, max_fps: float):
        self.max_fps = max_fps
        self.first_pts: float | None = None
        self.last_slot: int | None = None

    def keep(self, pts: float) -> bool:
        if self.first_pts is None:
            self.first_pts = pts
        slot = math.floor((pts - self.first_pts) * self.max_fps + 1e-6)
        if self.last_slot is not None and slot <= self.last_slot:
            return False
        self.last_slot = slot
        return True
