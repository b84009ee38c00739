"""Per-frame loss accounting: what each stream lost before publication, and why.

Frames are lost in several places, each counting its own: the source (packets the decoder
rejected, frames a decode worker dropped, pictures refused), the inbox (its oldest frames, when a
live stream's share is full), admission and the engine (frames too old), and the budget
controller's shedders. `Losses` reads those counters (it writes none of them) and sums them by
cause for a stream's `StreamStats`, its `eos` and the controller.
"""

from __future__ import annotations

#: the causes of loss, in the order `eos` messages and /metrics give them
CAUSES = ("corrupt", "decoder", "refused", "inbox", "stale", "shed")


class Losses:
    """Every stream's losses by cause (see the module's docstring). `sources`: the run's sources
    by name; `lanes` and `admissions`: the engine's lanes and each stream's admission (for the
    frames each found too old); `inbox`: the engine's inbox channel; `shedders`: the budget
    controller's, by stream (empty without one)."""

    def __init__(self, sources: dict, lanes: dict, admissions: dict, inbox, shedders: dict):
        self.sources, self.lanes, self.admissions = sources, lanes, admissions
        self.inbox, self.shedders = inbox, shedders

    def of(self, name: str) -> dict[str, int]:
        """What `name` has lost so far, by cause: packets the decoder rejected (`corrupt`), frames a
        decode worker dropped (`decoder`), pictures refused (`refused`: larger than `max_pixels`, or
        no room in shared memory for them), the oldest frames of a full inbox (`inbox`), frames too
        old for the source's reader, admission or the engine (`stale`: past the source's
        `max_staleness_ms`, or past the budget controller's `max_wait_s`: they could no longer be
        published within the budget), and frames the budget controller gave up (`shed`)."""
        src, lane, admit = self.sources.get(name), self.lanes.get(name), self.admissions.get(name)
        found = src.losses() if src is not None else {}
        stale = found.get("stale", 0) + (lane.stale_dropped + lane.late_from_source if lane else 0)
        stale += admit.late_from_source if admit is not None else 0
        shedder = self.shedders.get(name)
        return {"corrupt": found.get("corrupt", 0), "decoder": found.get("decoder", 0),
                "refused": found.get("refused", 0), "inbox": self.inbox.dropped[name], "stale": stale,
                "shed": shedder.dropped if shedder is not None else 0}

    def late_from_source(self, name: str) -> int:
        """Frames of `name` that came too late from their source (a decoder behind its clock):
        dropped by admission or by the engine."""
        lane, admit = self.lanes.get(name), self.admissions.get(name)
        return (lane.late_from_source if lane else 0) + (admit.late_from_source if admit is not None else 0)

    def for_controller(self, names: list[str]) -> tuple[dict[str, int], dict[str, int]]:
        """Per stream of `names`, what the budget controller reads (graph/control.py `tick`): the
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
        shedder = self.shedders.get(name)
        return shedder is not None and shedder.sheds_undecoded

    @staticmethod
    def dropped(lost: dict[str, int]) -> int:
        """Every frame lost before publication: all of `lost` but `corrupt` (packets, not frames)."""
        return sum(n for cause, n in lost.items() if cause != "corrupt")
