"""Sources: where frames come from. `build_source` turns a source's config into a `Source`."""

from __future__ import annotations

from ..config import SourceConfig
from .base import Source


def build_source(cfg: SourceConfig) -> Source:
    """A `FileSource` for files and for URLs/devices that FFmpeg opens directly."""
    from .file import FileSource

    return FileSource(cfg.name, cfg.uri, live=cfg.live, loop=cfg.loop, max_fps=cfg.max_fps,
                      options=cfg.options)


__all__ = ["Source", "build_source"]
