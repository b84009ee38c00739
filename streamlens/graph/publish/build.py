"""Every result stage of a pipeline, built in one place (`build_stages`), in their order: the
secondary models (streamlens/secondary), the masks (streamlens/segment), then `analytics:`, its
snapshots and its clips (graph/publish/stages.py, graph/publish/clips.py), and last, with
`reid.across`, the global_ids (streamlens/reid/stage.py). The `reid` section's appearances are one
more `embed` entry of the secondary stage (streamlens/reid/model.py). The runtime builds them with the
detector, starts their workers, hands `Stages.route` to the route of a result (graph/publish/route.py) and
closes them at the end; each is a `Stage` (graph/publish/stage.py).

Which mask stage a pipeline gets:
- `segment.model` set: `SegmentStage`, SAM's encoder and decoder on a worker thread;
- no `segment.model`, and a detector that gives masks (`gives_masks`: an Ultralytics `-seg`
  model on the `ultralytics` backend, or its ONNX export on `onnx` or `openvino`):
  `DetectorMaskStage`, those masks carried between keyframes (`segment:` then only says `output`
  and `classes`; it may be left out);
- otherwise none: objects carry no `mask`.

The embeddings SAM's encoder makes are megabytes each, against a few kilobytes for a secondary
model's outputs, so they get a cache of their own, bounded by `segment.cache_items`, in front of the
same Redis as `runtime.cache.redis` (keys `streamlens:segment:...`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .stage import Stage
from .stages import AnalyticsStage, SnapshotStage


@dataclass
class Stages:
    """A pipeline's result stages: `route`, every one in order, of which `secondary` and `segment`
    (each None when it has none) run models of their own."""

    secondary: Stage | None = None
    segment: Stage | None = None
    reid: Stage | None = None
    route: list[Stage] = field(default_factory=list)

    def start(self) -> None:
        for stage in self.route:
            stage.start()

    def close(self) -> None:
        for stage in self.route:
            stage.close()

    @property
    def running(self) -> bool:
        return self.secondary is not None or self.segment is not None

    def secondary_stats(self) -> dict:
        """Per `secondary` entry: looks answered (`calls`), tracks looked at, looks per track, crops
        computed and found in the cache, its hit rate, mean batch, ms per computed crop, crops dropped;
        and under `cache` the cache's own counters. Empty without secondary models."""
        stage = self.secondary
        if stage is None:
            return {}
        out = stage.stats()
        if stage.cache is not None:  # and the values found there that this version cannot read
            out["cache"] = {**stage.cache.stats(), "foreign": stage.foreign}
        return out

    def segment_stats(self) -> dict:
        """The mask stage's figures (`SegmentStage.stats`, `DetectorMaskStage.stats`); empty without masks."""
        return {} if self.segment is None else self.segment.stats()

    def figures(self) -> dict:
        """What a `stats` message says of them: `secondary` and `segment`, each where it runs."""
        out = {}
        if self.secondary is not None:
            out["secondary"] = self.secondary_stats()
        if self.segment is not None:
            out["segment"] = self.segment_stats()
        if self.reid is not None:
            out["reid"] = self.reid.stats()
        return out


#: what the Redis keys of SAM's embeddings start with (the secondary models' outputs: `streamlens:secondary:`)
SEGMENT_PREFIX = "streamlens:segment:"


def segment_cache(cfg):
    """The embeddings' cache for `cfg` (a `PipelineConfig` with `segment`), None when off: a memory
    cache of `segment.cache_items` in front of `runtime.cache.redis` when that is set."""
    from ...secondary.cache import build_cache

    seg, shared = cfg.segment, cfg.runtime.cache
    return build_cache(seg.cache_items, shared.redis, shared.ttl_s, prefix=SEGMENT_PREFIX) if seg.cache else None


def build_stages(cfg, detector, streams, built: list) -> Stages:
    """The stages `cfg` asks for, in order (see the module's docstring); those with models are
    appended to `built` as they are made, so a failure after it closes them. `streams`: the run's
    `StreamSet`, which the clips ask for a stream's source."""
    stages = Stages()
    reid = cfg.reid
    if cfg.secondary or reid is not None:
        from ...secondary.cache import build_cache
        from ...secondary.stage import SecondaryStage

        entries, made = list(cfg.secondary), {}
        if reid is not None:  # one more `embed` entry, named reid (streamlens/reid/model.py)
            from ...reid.model import reid_entry, reid_model

            made[len(entries)] = reid_model(reid)
            entries.append(reid_entry(reid))
        cache = cfg.runtime.cache
        stages.secondary = SecondaryStage(entries, build_cache(cache.items, cache.redis, cache.ttl_s), made,
                                           streams=streams)
        built.append(stages.secondary)
    seg = cfg.segment
    if seg is not None and seg.model is not None:
        from ...segment.stage import SegmentStage

        stages.segment = SegmentStage(seg, segment_cache(cfg), streams=streams)
        built.append(stages.segment)
    elif detector.gives_masks:
        from ...segment.carry import DetectorMaskStage

        stages.segment = DetectorMaskStage(seg.output if seg is not None else "polygon",
                                           seg.classes if seg is not None else None)
    stages.route = [stage for stage in (stages.secondary, stages.segment) if stage is not None]
    if cfg.analytics is not None:
        analytics = AnalyticsStage(cfg.analytics)
        stages.route.append(analytics)
        if cfg.analytics.snapshots is not None:
            stages.route.append(SnapshotStage(cfg.analytics.snapshots))
        if cfg.analytics.clips is not None:
            from .clips import ClipStage

            stages.route.append(ClipStage(cfg.analytics.clips, streams, analytics.next_seq))
    if reid is not None and reid.across:  # last: it gives the objects of frames and events their global_id
        from ...reid.stage import ReidStage

        stages.reid = ReidStage(reid, {source.name: bool(source.live) for source in cfg.sources})
        stages.route.append(stages.reid)
    return stages


__all__ = ["Stages", "build_stages", "segment_cache"]
