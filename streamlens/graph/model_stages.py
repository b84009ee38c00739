"""The result stages that run models of their own beside the detector: the secondary models
(streamlens/secondary) and the masks (streamlens/segment). The runtime builds them with the
detector (`build_model_stages`), starts their workers, hands them to the route (graph/route.py) and
closes them at the end; each has `start()`, `stats()` and `close()`.

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

from dataclasses import dataclass


@dataclass
class ModelStages:
    """A pipeline's secondary stage and mask stage (each None when it has none)."""

    secondary: object = None
    segment: object = None

    def start(self) -> None:
        for stage in (self.secondary, self.segment):
            if stage is not None and hasattr(stage, "start"):
                stage.start()

    def close(self) -> None:
        for stage in (self.secondary, self.segment):
            if stage is not None and hasattr(stage, "close"):
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
        return out


#: what the Redis keys of SAM's embeddings start with (the secondary models' outputs: `streamlens:secondary:`)
SEGMENT_PREFIX = "streamlens:segment:"


def segment_cache(cfg):
    """The embeddings' cache for `cfg` (a `PipelineConfig` with `segment`), None when off: a memory
    cache of `segment.cache_items` in front of `runtime.cache.redis` when that is set."""
    from ..secondary.cache import build_cache

    seg, shared = cfg.segment, cfg.runtime.cache
    return build_cache(seg.cache_items, shared.redis, shared.ttl_s, prefix=SEGMENT_PREFIX) if seg.cache else None


def build_model_stages(cfg, detector, built: list) -> ModelStages:
    """The model stages `cfg` asks for (see the module's docstring); each is appended to `built` as
    it is made, so a failure after it closes it."""
    stages = ModelStages()
    if cfg.secondary:
        from ..secondary.cache import build_cache
        from ..secondary.stage import SecondaryStage

        cache = cfg.runtime.cache
        stages.secondary = SecondaryStage(cfg.secondary, build_cache(cache.items, cache.redis, cache.ttl_s))
        built.append(stages.secondary)
    seg = cfg.segment
    if seg is not None and seg.model is not None:
        from ..segment.stage import SegmentStage

        stages.segment = SegmentStage(seg, segment_cache(cfg))
        built.append(stages.segment)
    elif getattr(detector, "gives_masks", False):
        from ..segment.carry import DetectorMaskStage

        stages.segment = DetectorMaskStage(seg.output if seg is not None else "polygon",
                                           seg.classes if seg is not None else None)
    return stages


__all__ = ["ModelStages", "build_model_stages", "segment_cache"]
