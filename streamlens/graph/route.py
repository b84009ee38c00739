"""The way of a result, from the engine to the sinks: one object, `ResultRoute`, which the engine
is given and calls on its own thread.

    engine: FrameResult -> ResultRoute.publish
        the stream's figures (StreamStats.count), its file credit given back
        stages, in order, each process(result, messages) -> (result, messages):
            SecondaryStage (attributes, Embedding messages)
            SegmentStage or DetectorMaskStage (each object's mask: streamlens/segment)
            AnalyticsStage (FrameResult.analytics, Event messages)
            SnapshotStage (each Event's JPEG)
            ClipStage (each chosen Event's clip; clip_lost events: graph/clip_stage.py)
        FanOut.publish(result), then its messages: events, then embeddings
    engine: StreamEnd -> ResultRoute.publish
        every stage forgets the stream (its last messages go out); StatsReporter.end: its last
        figures, stats, then eos

A new stage (clips from the source's packets, say) is a class with `process` and `stream_ended`
(graph/stages.py) added in `build_stages`, where its order is decided; a stage that wants each
keyframe the tracker applied also has `offer(frame, found, tracked)` (`ResultRoute.offer`, the
engine's `on_keyframe`).
"""

from __future__ import annotations

import time

from ..frame import Embedding, FrameResult, StreamEnd
from .channel import Credits
from .fanout import FanOut
from .process import CycleCollector
from .reports import StatsReporter
from .stages import AnalyticsStage, SnapshotStage, Stage
from .stats import StreamStats


def build_stages(config, secondary=None, sources: dict | None = None, segment=None) -> list[Stage]:
    """The result stages of a pipeline file, in order: `secondary` (a `SecondaryStage`, made by the
    runtime with its models and cache; None: the file has none), `segment` (the masks:
    graph/model_stages.py; None: none), then `analytics:`, its snapshots and its clips (asked of
    `sources`, by stream name)."""
    stages: list[Stage] = [stage for stage in (secondary, segment) if stage is not None]
    if config.analytics is not None:
        analytics = AnalyticsStage(config.analytics)
        stages.append(analytics)
        if config.analytics.snapshots is not None:
            stages.append(SnapshotStage(config.analytics.snapshots))
        if config.analytics.clips is not None:
            from .clip_stage import ClipStage

            stages.append(ClipStage(config.analytics.clips, sources if sources is not None else {}, analytics.next_seq))
    return stages


class ResultRoute:
    """Everything a result goes through after the engine, on the engine thread (see the module's
    docstring). `credits`: the file sources' credits, given back as each of their frames is
    published (`credited`: those streams, a set the runtime adds an added file stream to); `collector`: the garbage collection some PyAV builds
    need (None: not needed)."""

    def __init__(self, stages: list[Stage], out: FanOut, stats: dict[str, StreamStats], reporter: StatsReporter,
                 *, credits: Credits | None = None, credited: set[str] | frozenset[str] = frozenset(),
                 collector: CycleCollector | None = None):
        self.stages = list(stages)
        self.out, self.stats, self.reporter = out, stats, reporter
        self.credits, self.credited, self.collector = credits, credited, collector
        self._offered = [stage.offer for stage in self.stages if hasattr(stage, "offer")]
        for stage in self.stages:
            if hasattr(stage, "attach_stats"):  # it counts into the streams' figures (lost clips)
                stage.attach_stats(stats)

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
        st = self.stats[frame.stream]
        st.take_posts()
        st.count(item)
        if frame.stream in self.credited:
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
