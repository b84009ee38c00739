"""Analytics on tracked objects: lines that count crossings, zones with dwell and loitering, speed,
and the events they make (rules.py: the rules; stream.py: one stream's rules and its objects' life)."""

from .rules import LineRule, ZoneRule, anchor_points
from .stream import FrameAnalytics, StreamAnalytics

__all__ = ["LineRule", "ZoneRule", "anchor_points", "StreamAnalytics", "FrameAnalytics"]
