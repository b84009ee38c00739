"""The ladder's rungs as one number, so that the engines of one machine can climb it together.

Each engine process (`runtime.workers`) has its own budget controller, and each reads only its own
streams' latencies. They share the machine's cores, though: past capacity one engine's controller
could climb to shedding half its frames while the other's, served first by the scheduler, climbed
nothing and took the cores that shedding freed (highway K=20: one engine's streams kept 44% of
their frames and saw 18 detections in 30 s, the other's 83% and 80). So the supervisor tells each
engine the highest rung the other engines of its machine have climbed (their *own* rung, not what
they apply), and an engine applies the higher of its own and that floor (`Rungs.at`): the engines
shed alike, and each still climbs and comes down on its own evidence alone, so that two engines
never hold each other up.

The ladder is ordered (control.py): keyframes no longer wait, then each interval stretch, then
batching for throughput, then each share shed, then keyframes only; a controller's state is always
a prefix of it, so its rung count (`level`) says every part of it.

Example:
    >>> Rungs.at(0, wait_rung=True, stretches=3, batching=False)
    Rungs(wait=True, stretch_index=0, throughput=False, shed_index=0, keyframes_only=False)
    >>> Rungs.at(4, wait_rung=True, stretches=3, batching=False)   # no wait, x1.5, x2, 1 in 8
    Rungs(wait=False, stretch_index=2, throughput=False, shed_index=1, keyframes_only=False)
    >>> Rungs.at(99, wait_rung=False, stretches=3, batching=True).keyframes_only
    True
"""

from __future__ import annotations

from typing import NamedTuple

from .shedding import SHED_STEPS


class Rungs(NamedTuple):
    """Where on the ladder: the parts the runtime applies."""

    wait: bool            # live keyframes wait for their detections
    stretch_index: int    # into the controller's stretches
    throughput: bool      # the detector fills its batches
    shed_index: int       # into `SHED_STEPS`
    keyframes_only: bool  # live sources decode their keyframes only

    @property
    def level(self) -> int:
        """Rungs climbed (as `BudgetController.level` counts them)."""
        return self.stretch_index + self.throughput + (not self.wait) + self.shed_index + self.keyframes_only

    @staticmethod
    def at(level: int, *, wait_rung: bool, stretches: int, batching: bool) -> Rungs:
        """The rungs `level` steps up a ladder with (or without) the keyframes' wait, `stretches`
        interval factors (the first is x1) and (or without) the batching rung; past its top, the top."""
        left = max(0, level)
        wait = not (wait_rung and left)
        left -= not wait
        stretch = min(left, stretches - 1)
        left -= stretch
        throughput = batching and left > 0
        left -= throughput
        shed = min(left, len(SHED_STEPS) - 1)
        left -= shed
        return Rungs(wait, stretch, throughput, shed, left > 0)


__all__ = ["Rungs"]
