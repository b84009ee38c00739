"""Per-frame loss accounting: what each stream lost before publication, and why.

Frames are lost in several places, each counting its own: the source (packets the decoder
rejected, frames a decode worker dropped, pictures refused), the inbox (its oldest frames, when a
live stream's share is full), admission and the engine (frames too old), and the budget
controller's shedders. `Losses` reads those counters (it writes none of them) and sums them by
cause for a stream's `StreamStats`, its `eos` and the controller.
"""

from __future__ import annotations

from .stream import CAUSES, StreamSet, dropped


class Losses:
    """Every stream's losses by cause (see the module's docstring): each stream of `streams` says
    its own (`Stream.losses`: its source, lane, admission and shedder); `inbox`: the engine's inbox
    channel (for the frames it dropped)."""

    def __init__(self, streams: StreamSet, inbox):
        self.streams, self.inbox = streams, inbox

    def of(self, name: str) -> dict[str, int]:
        """What `name` has lost so far, by cause (`Stream.losses`); nothing for a stream not listed."""
        stream = self.streams.get(name)
        return stream.losses(self.inbox) if stream is not None else dict.fromkeys(CAUSES, 0)

    def late_from_source(self, name: str) -> int:
        """Frames of `name` that came too late from their source (a decoder behind its clock):
        dropped by admission or by the engine."""
        stream = self.streams.get(name)
        return stream.late_from_source() if stream is not None else 0

    def for_controller(self, names: list[str]) -> tuple[dict[str, int], dict[str, int]]:
        """Per stream of `names`, what the budget controller reads (graph/overload/control.py `tick`): the
        frames the machine could not carry, which it answers (every frame lost but those it shed,
        and but those that came too late from a source other than a decode worker that sheds
        undecoded: shedding after a decoder behind its clock would not help it; a worker that gives
        up frames undecoded is relieved), and every frame lost but those it shed (its fair shares
        weigh them)."""
        unshed = {name: self.dropped(lost) - lost["shed"] for name in names for lost in (self.of(name),)}
        answered = {name: n if self._sheds_undecoded(name) else n - self.late_from_source(name)
                    for name, n in unshed.items()}
        return answered, unshed

    def _sheds_undecoded(self, name: str) -> bool:
        stream = self.streams.get(name)
        return stream is not None and stream.shedder is not None and stream.shedder.sheds_undecoded

    dropped = staticmethod(dropped)


__all__ = ["Losses", "CAUSES"]
