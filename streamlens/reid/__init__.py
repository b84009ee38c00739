"""Appearance per track and identities across cameras (see docs/reid.md).

`describe(image_bgr, boxes)` is the weight-free appearance descriptor (streamlens/reid/appearance.py);
`similarity(a, b)` the cosine between descriptors.
"""

from .appearance import DIM, describe, similarity

__all__ = ["describe", "similarity", "DIM"]
