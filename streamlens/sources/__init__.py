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

    return FileSource(cfg, export_mvs=export_mvs)


def _live_source(cfg: SourceConfig, export_mvs: bool) -> Source:
    """A camera URL or a device: a `LiveSource` (decoded on a worker, reconnecting for ever)."""
    from .live import LiveSource

    return LiveSource(cfg, export_mvs=export_mvs)


__all__ = ["Source", "build_source"]
