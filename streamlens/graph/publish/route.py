"""The way of a result, from the engine to the sinks: one object, `ResultRoute`, which the engine
is given and calls on its own thread.

    engine: FrameResult -> ResultRoute.publish
        the stream's figures (StreamStats.count), its file credit given back
        stages, in order, each process(result, messages) -> (result, messages):
            SecondaryStage (attributes, Embedding messages)
            SegmentStage or DetectorMaskStage (each object's mask: streamlens/segment)
            AnalyticsStage (FrameResult.analytics, Event messages)
            SnapshotStage (each Event's JPEG)
            ClipStage (each chosen Event's clip; clip_lost events: graph/publish/clips.py)
        FanOut.publish(result), then its messages: events, then embeddings
    engine: StreamEnd -> ResultRoute.publish
        every stage forgets the stream (its last messages go out); StatsReporter.end: its last
        figures, stats, then eos

A new stage is a `Stage` (graph/publish/stage.py) added in `build_stages` (graph/publish/build.py, the one
place that builds them), where its order is decided; a stage that wants each keyframe the tracker
applied says so (`offers`) and has `offer(frame, found, tracked)` (`ResultRoute.offer`, the
engine's `on_keyframe`).
"""

from __future__ import annotations

import time

from ...frame import Embedding, FrameResult, StreamEnd
from ..channel import Credits
from ..run.process import CycleCollector
from ..run.reports import StatsReporter
from ..run.stream import StreamSet
from .fanout import FanOut
from .stage import Stage


class ResultRoute:
    """Everything a result goes through after the engine, on the engine thread (see the module's
    docstring). `streams`: the run's streams (each its figures, and whether its file holds
    `credits`, given back as each of its frames is published); `collector`: the garbage collection
    some PyAV builds need (None: not needed)."""

    def __init__(self, stages: list[Stage], out: FanOut, streams: StreamSet, reporter: StatsReporter,
                 *, credits: Credits | None = None, collector: CycleCollector | None = None):
        self.stages = list(stages)
        self.out, self.streams, self.reporter = out, streams, reporter
        self.credits, self.collector = credits, collector
        self._offered = [stage.offer for stage in self.stages if stage.offers]

    def publish(self, item: FrameResult | StreamEnd) -> None:
        """A result, or the end of a stream, from the engine: through the stages to the sinks."""
        if isinstance(item, StreamEnd):
            for stage in self.stages:
                for message in stage.stream_ended(item.stream) or ():
                    self.out.publish(message)
            self.reporter.end(item)
            return
        frame = item.frame
        frame.timings["total"] = (time.monotonic() - frame.clock) * 1000
        stream = self.streams[frame.stream]
        stream.stats.take_posts()
        stream.stats.count(item)
        if stream.credited and self.credits is not None:
            self.credits.release(frame.stream)
        if self.collector is not None:
            self.collector.published()
        messages: list = []
        for stage in self.stages:
            item, messages = stage.process(item, messages)
        self.out.publish(item)
        messages.sort(key=lambda m: isinstance(m, Embedding))  # a frame's events go out before its embeddings
        for message in messages:
            self.out.publish(message)

    def offer(self, frame, found, tracked) -> None:
        """A keyframe whose detections the tracker applied (in time or late): `found`, the detector's
        boxes on `frame`, and `tracked`, the objects they gave; for the stages that look at keyframes."""
        for offer in self._offered:
            offer(frame, found, tracked)
