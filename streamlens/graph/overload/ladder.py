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

The ladder, in the order the budget controller (control.py) climbs it; a controller's state is always
a prefix of it, so its rung count (`level`) says every part of it:

0. (live streams sharing one keyframe schedule, `keyframe_wait`) keyframes no longer wait for their
   detections: each goes out by motion at once and its detections are applied when they come (the
   frames since are replayed), so latency falls back to that of the frames between keyframes while
   the detector keeps its pace: what is given up is the keyframe's own boxes and those of the
   frames until its detections are back;
1. widen the keyframe intervals of every live stream (x1.5, x2, x3, x4 ... up to `max_stretch`):
   less detector work, the cheapest thing to give up, since the tracker carries objects between.
   A detector already behind its schedule (`pace`, chooser.py: it brings keyframes three intervals
   apart) stays as busy under a smaller stretch, so the first step goes that far at once;
2. batch for throughput: the detector fills its batches up to `max_batch` instead of cutting them
   short to keep each keyframe's latency (keyframes then come back later; frames do not wait).
   Not a rung for a detector that runs one keyframe a call (a model exported with a fixed batch of
   1, `BudgetController.attach`): it would change nothing and cost a second on the way up and a calm
   wait on the way down;
3. drop frames: one share for every live stream alike (`SHED_STEPS`: 1 in 8, 1 in 4, 1 in 3,
   1 in 2, 2 in 3, 3 in 4, 5 in 6, 7 in 8, 9 in 10), before the frames cost the engine anything: a
   camera's decode worker skips the end of each group of pictures undecoded, so its decoding gives
   way too; other frames are dropped after decoding, evenly spaced within each stream and staggered
   between streams (`Shedder`). When frames were dropped outside the controller in the last
   second, this rung does not climb one step at a time: it goes at once
   to the first share that would have carried that second's load (the frames published, over those
   published and dropped), so that the engine's own drops, which come in bursts, turn into even
   shedding within a tick or two. Keyframes keep their spacing in time (the schedules count the
   frames shed), so shedding costs frames, not detections;
4. decode keyframes only (`keyframes_only`): past 9 in 10 the decoding itself is what the machine
   cannot carry, so every live source that can (cameras, live files) skips every packet but its
   keyframes undecoded, in its decode worker or on its own thread (`Shedder`, counted as shed);
   other sources go on dropping 9 in 10.

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
