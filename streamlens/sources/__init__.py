"""Sources: where frames come from. `build_source` turns a source's config into a `Source`."""

from __future__ import annotations

from dataclasses import replace

from ..config import SourceConfig
from .base import Source
from .clips import ClipSpec


def build_source(cfg: SourceConfig, export_mvs: bool = False, clips: ClipSpec | None = None) -> Source:
    """A `FileSource` for files, a `LiveSource` for camera URLs and devices. `export_mvs`:
    put the decoder's motion vectors on every frame (for `tracker: {motion: mv}`); `clips`: a
    camera records its packets for `analytics.clips` (`clips_spec`)."""
    if clips is not None and cfg.is_file and not cfg.live:  # read as fast as the engine goes: frames in flight
        clips = replace(clips, margin_s=max(clips.margin_s, FILE_CLIP_MARGIN_S))
    if not cfg.is_file:
        return _live_source(cfg, export_mvs, clips)
    from .file import FileSource

    return FileSource(cfg, export_mvs=export_mvs, clips=clips)


def _live_source(cfg: SourceConfig, export_mvs: bool, clips: ClipSpec | None) -> Source:
    """A camera URL or a device: a `LiveSource` (decoded on a worker, reconnecting for ever)."""
    from .live import LiveSource

    return LiveSource(cfg, export_mvs=export_mvs, clips=clips)


#: seconds of packets a live source keeps beyond `pre_s` (the key frame before is kept on top of
#: them): an event comes back from the engine within about the budget of its frame being read (the
#: engine drops live frames older than that), plus the decoder's reordering; one that comes later
#: widens the window (`ClipRecorder.request`)
CLIP_MARGIN_S = 0.3
#: ... and a file that is not live, read ahead of the engine by the frames it has in flight
FILE_CLIP_MARGIN_S = 1.0


def clips_spec(config) -> ClipSpec | None:
    """What each source of `config` records for `analytics.clips` (the source adds its name), or
    None without clips."""
    clips = config.analytics.clips if config.analytics is not None else None
    if clips is None:
        return None
    max_bytes = clips.retain.max_gb * 1e9 if clips.retain.max_gb is not None else None
    return ClipSpec(clips.pre_s, CLIP_MARGIN_S, str(clips.path), clips.retain.days, max_bytes)


__all__ = ["Source", "build_source", "clips_spec"]
