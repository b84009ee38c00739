"""Where a frame's pixels land in the graph's process: plain numpy memory, or pinned (page-locked)
host memory when a CUDA detector will copy them to the GPU.

A pinned buffer lets the detector's host-to-device copy run asynchronously (DMA, `non_blocking=True`)
and about twice as fast as from pageable memory. Pinned buffers come from PyTorch's caching host
allocator (`torch.empty(..., pin_memory=True)`): a freed frame's block goes back to that cache and
is handed out again, so the costly page-locking happens only while the cache warms up. The numpy
array returned shares the tensor's memory and keeps the tensor alive.

`pinned="auto"` pins only when torch is already imported (a torch detector is in the pipeline) and
CUDA is available: importing torch just to find out would cost a CPU-only pipeline seconds and
hundreds of megabytes.

Example:
    >>> alloc = HostMemory(pinned=False)
    >>> alloc.empty((2, 4, 3)).shape, alloc.pinned
    ((2, 4, 3), False)
"""

from __future__ import annotations

import logging
import sys

import numpy as np

log = logging.getLogger("streamlens.sources")


def cuda_is_available(import_torch: bool) -> bool:
    """Whether torch sees a CUDA device; without `import_torch`, False unless torch is loaded."""
    if not import_torch and "torch" not in sys.modules:
        return False
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken driver means no CUDA, not a failed pipeline
        return False


class HostMemory:
    """Allocates frame arrays (uint8), pinned when `pinned` is True, or `"auto"` and CUDA is there."""

    def __init__(self, pinned: bool | str = "auto"):
        if pinned == "auto":
            pinned = cuda_is_available(import_torch=False)
        elif pinned and not cuda_is_available(import_torch=True):
            log.warning("pinned host memory asked for, but CUDA is not available: using plain memory")
            pinned = False
        self.pinned = bool(pinned)

    def empty(self, shape: tuple[int, ...]) -> np.ndarray:
        if not self.pinned:
            return np.empty(shape, np.uint8)
        import torch

        return torch.empty(shape, dtype=torch.uint8, pin_memory=True).numpy()
