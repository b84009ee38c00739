"""Sources: where frames come from. `build_source` turns a source's config into a `Source`."""

from __future__ import annotations

from ..config import SourceConfig
from .base import Source


def build_source(cfg: SourceConfig, export_mvs: bool = False) -> Source:
    """A `FileSource` for files, a `LiveSource` for camera URLs and devices. `export_mvs`:
    put the decoder's motion vectors on every frame (for `tracker: {motion: mv}`)."""
    if not cfg.is_file:
        return _live_source(cfg, export_mvs)
    from .file import FileSource

    return FileSource(cfg.name, cfg.uri, live=cfg.live, loop=cfg.loop, max_fps=cfg.max_fps,
                      options=cfg.options, export_mvs=export_mvs, decode=cfg.decode or "thread",
                      max_pixels=cfg.max_pixels)


def _live_source(cfg: SourceConfig, export_mvs: bool) -> Source:
    """A camera URL or a device: a `LiveSource` (decoded on a worker, reconnecting for ever)."""
    from .live import LiveSource

    return LiveSource(cfg.name, cfg.uri, transport=cfg.transport, timeout_s=cfg.timeout_s, stall_s=cfg.stall_s,
                      backoff_initial_s=cfg.backoff_initial_s, backoff_max_s=cfg.backoff_max_s,
                      max_fps=cfg.max_fps, max_staleness_ms=cfg.max_staleness_ms, decode=cfg.decode,
                      options=cfg.options, export_mvs=export_mvs, max_pixels=cfg.max_pixels)


__all__ = ["Source", "build_source"]
