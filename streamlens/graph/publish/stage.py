"""`Stage`: what every result stage is (the route of a result, graph/publish/route.py, calls them in order
on the engine thread). Each method has a default that does nothing, so a stage gives only what it
does; nothing is probed: what a stage takes part in is declared here.

Example:
    >>> class Count(Stage):
    ...     def __init__(self): self.n = 0
    ...     def process(self, result, messages):
    ...         self.n += 1
    ...         return result, messages
    >>> Count().offers, Count().stats()
    (False, {})
"""

from __future__ import annotations


class Stage:
    """One step a result goes through after the engine (see the module)."""

    #: it looks at the keyframes whose detections the tracker applied: `offer()` is called for each
    offers = False

    def process(self, result, messages: list):
        """`result` (a `FrameResult`, replaced rather than changed) and the messages its stages have
        made so far (events, embeddings): returns both, with what this stage adds."""
        return result, messages

    def offer(self, frame, found, tracked) -> None:
        """A keyframe the tracker applied (in time or late): `found`, the detector's boxes on `frame`
        at `conf`, and `tracked`, the objects they gave. Only called when `offers` is True."""

    def stream_ended(self, stream: str) -> list | None:
        """`stream` has ended: what it holds for it goes, and the messages that says (None: none)."""
        return None

    def start(self) -> None:
        """Start its worker, if it has one (before the first result)."""

    def close(self) -> None:
        """Stop its worker and let go of what it holds (after the last result)."""

    def stats(self) -> dict:
        """Its figures for the `stats` messages and /metrics (empty: none)."""
        return {}


__all__ = ["Stage"]
