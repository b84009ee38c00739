"""Result stages: what a result goes through after the engine and before the sinks.

A stage (graph/publish/stage.py `Stage`) has `process(result, messages) -> (result, messages)`, called on the engine
thread for each `FrameResult`, in the order of `ResultRoute.stages` (graph/publish/route.py): it gets the
result as the stages before it left it and the messages they made, and returns the result to pass
on and the messages. A result is never changed: a stage that adds to it returns a new one
(`dataclasses.replace`); its own messages (`Event`, `Embedding`: each kind numbered per stream)
are appended, and go out after the frame. `stream_ended(stream)` forgets a stream, and returns the
messages it still has for it (None: none), which go out before its `eos`; a stage that wants each
keyframe the tracker applied says so (`offers`) and has `offer(frame, found, tracked)`.

The stages, in order: the secondary models (streamlens/secondary/stage.py `SecondaryStage`: per
object attributes), `AnalyticsStage` (zones, lines, speed, counts: `FrameResult.analytics`, and
`Event`s), `SnapshotStage` (an event's JPEG: `Event.snapshot`). A stage never waits: heavy work
goes to a thread of its own and comes back at the stream's next result, as the secondary
models' answers do.

Example:
    >>> import numpy as np
    >>> from streamlens.config.model import AnalyticsConfig
    >>> from streamlens.frame import Frame, FrameResult, empty_detections
    >>> stage = AnalyticsStage(AnalyticsConfig())
    >>> result = FrameResult(Frame("cam1", 0, 0.0, 0.0, np.zeros((8, 8, 3), np.uint8)), 0, False, empty_detections())
    >>> after, messages = stage.process(result, [])
    >>> after is result, result.analytics is None, after.analytics is not None, messages
    (False, True, True, [])
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...analytics.build import build_stream_analytics
from ...analytics.snapshots import Snapshots
from ...frame import Event, FrameResult, track_labels
from .stage import Stage


def objects_of(result: FrameResult) -> tuple[np.ndarray, list, np.ndarray]:
    """A result's track ids (-1 untracked), labels (a tracked object's by vote over its track:
    `track_labels`) and scores, one per object."""
    det = result.detections
    ids = det.tracker_id if det.tracker_id is not None else np.full(len(det), -1)
    labels = track_labels(det)[1]
    scores = det.confidence if det.confidence is not None else np.ones(len(det))
    return ids, labels, scores


class AnalyticsStage(Stage):
    """The `analytics:` section on each stream (streamlens/analytics): built on a stream's first
    result (its rules' points scale with the frame's size), it sets `FrameResult.analytics` and
    makes the stream's `Event`s, numbered by its own event `seq`."""

    def __init__(self, cfg):
        self.cfg = cfg
        self._streams: dict[str, object] = {}  # stream -> its StreamAnalytics, None when no rule applies
        self._event_seq: dict[str, int] = {}

    def process(self, result: FrameResult, messages: list) -> tuple[FrameResult, list]:
        frame = result.frame
        if frame.stream not in self._streams:
            self._streams[frame.stream] = build_stream_analytics(self.cfg, frame.stream, frame.width, frame.height)
        analytics = self._streams[frame.stream]
        if analytics is None:
            return result, messages
        ids, labels, scores = objects_of(result)
        found = analytics.update(result.media_s, result.detections.xyxy, ids, labels, scores, result.attributes,
                                 result.detections.data.get("masks"))
        result = replace(result, analytics=found)
        events = [Event(frame.stream, self.next_seq(frame.stream), body, result) for body in found.events]
        return result, messages + events

    def next_seq(self, stream: str) -> int:
        """The next event `seq` of `stream`, taken (the clip stage's `clip_lost` events take theirs here)."""
        seq = self._event_seq.get(stream, 0)
        self._event_seq[stream] = seq + 1
        return seq

    def stream_ended(self, stream: str) -> None:
        """Nothing to forget: a stream's analytics and event `seq` go on if it comes back."""


class SnapshotStage(Stage):
    """`analytics.snapshots`: keeps each track's best view of a stream with analytics, and gives
    the stream's events their pictures (`Event.snapshot`; streamlens/analytics/snapshots.py)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self._streams: dict[str, Snapshots] = {}

    def process(self, result: FrameResult, messages: list) -> tuple[FrameResult, list]:
        found = result.analytics
        if found is None:  # no rule applies to this stream
            return result, messages
        frame = result.frame
        shots = self._streams.get(frame.stream)
        if shots is None:
            shots = self._streams[frame.stream] = Snapshots.for_stream(self.cfg, frame.stream, frame.width,
                                                                       frame.height)
        det = result.detections
        ids, labels, _ = objects_of(result)
        for i in found.best:
            if shots.wants(str(labels[i])):
                shots.seen(int(ids[i]), frame, det.xyxy[i], det, found)
        out = []
        for message in messages:
            if isinstance(message, Event) and message.result is result:
                shot = shots.take(message.body, message.seq, frame, det, found)
                message = message if shot is None else replace(message, snapshot=shot)
            out.append(message)
        return result, out

    def stream_ended(self, stream: str) -> None:
        shots = self._streams.get(stream)
        if shots is not None:
            shots.forget()


__all__ = ["AnalyticsStage", "SnapshotStage", "Stage", "objects_of"]
