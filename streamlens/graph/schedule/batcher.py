"""Temporal batching: gather keyframes for the detector, as many as the per-frame budget allows.

The detector's thread takes keyframes (of every stream) from its queue in arrival order. `Batcher`
returns them in batches, closing a batch when
- it holds `max_batch` keyframes, or as many as the budget allows (below), or
- `max_wait_ms` has passed since its first keyframe arrived.

Budget: `budget_ms` (default 33, one frame at 30 fps) is how long a keyframe may take to its
detections, counted from its frame's `clock` (when the frame became available: the engine's queue,
and a live file's decoding, are inside it; from its arrival here for an item without one).
`DetectCost` learns how long the detector takes for a batch of n frames (fixed + per_frame x n, from
the batches it has timed), and the batcher stops gathering once the first keyframe's age plus the
detector's time for one more frame would break the budget: a detector that needs 25 ms a frame on a
CPU runs one frame at a time, one that needs 2 ms on a GPU gathers 8. `budget_ms=None` turns the
budget off (files and the bulk mode for archives: throughput, not latency, with `max_wait_ms` then
only a bound on idle waiting).

A batch also stops gathering when nothing could join it: `can_grow(until)` (the engine's, see
`Engine.batch_can_grow`) says whether any stream could still bring a keyframe by `until`, the end of
the wait. At one live stream, whose keyframe is in the batch already, the detector starts at once
instead of idling `max_wait_ms` for a keyframe that cannot come.

Example:
    >>> from streamlens.graph.channel import Channel
    >>> jobs = Channel(8)
    >>> for i in range(3): _ = jobs.put(i)
    >>> Batcher(jobs, max_batch=2, max_wait_ms=0).next_batch().items
    [0, 1]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..channel import Channel, ChannelClosed


class DetectCost:
    """How long the detector takes for n frames: `fixed_ms + per_frame_ms * n`, learnt from timed batches.

    A running least-squares fit over decaying sums (recent batches count most, half-life about 20
    batches), so it follows a detector whose speed changes (a GPU warming up, a CPU that gets busy).
    Until it has seen two batch sizes it assumes the whole time is per frame.

    Example:
        >>> cost = DetectCost()
        >>> for n, ms in [(1, 12.0), (2, 14.0), (4, 18.0)] * 5: cost.observe(n, ms)
        >>> round(cost.estimate(8), 1)
        26.0
    """

    def __init__(self, decay: float = 0.966):
        self.decay = decay
        self._s = [0.0] * 5  # weights, sum n, sum ms, sum n*n, sum n*ms

    def observe(self, frames: int, ms: float) -> None:
        s, d = self._s, self.decay
        for i, value in enumerate((1.0, frames, ms, frames * frames, frames * ms)):
            s[i] = s[i] * d + value

    @property
    def known(self) -> bool:
        return self._s[0] > 0

    def estimate(self, frames: int) -> float:
        """Milliseconds for a batch of `frames` (0.0 before any observation)."""
        w, sn, sm, snn, snm = self._s
        if w == 0:
            return 0.0
        spread = w * snn - sn * sn
        if spread <= 1e-6 * w * w:  # one batch size seen so far: all of it per frame
            return sm / sn * frames if sn else 0.0
        per_frame = max(0.0, (w * snm - sn * sm) / spread)
        fixed = max(0.0, (sm - per_frame * sn) / w)
        return fixed + per_frame * frames


@dataclass(slots=True)
class Batch:
    """Keyframes to detect at once, in arrival order; `waited_ms`: how long the first waited for
    the others."""

    items: list = field(default_factory=list)
    waited_ms: float = 0.0


class Batcher:
    """Gathers batches of keyframes from `jobs` (see the module's docstring).

    `observe(frames, ms)` feeds the detector's measured time back into the budget.
    """

    def __init__(self, jobs: Channel, *, max_batch: int, max_wait_ms: float, budget_ms: float | None = 33.0,
                 clock: Callable[[], float] = time.monotonic, can_grow: Callable[[float], bool] | None = None):
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch!r}: expected at least 1")
        self.jobs = jobs
        self.max_batch = max_batch
        self.max_wait = max(0.0, max_wait_ms) / 1000.0
        self.budget_ms = budget_ms
        self.clock = clock
        #: whether a keyframe could still join a batch by the given time on `clock` (None: always)
        self.can_grow = can_grow
        self.cost = DetectCost()

    def batch_limit(self, waited_ms: float) -> int:
        """How many keyframes a batch may hold once its first keyframe is `waited_ms` old: at least
        1, at most `max_batch`."""
        if self.budget_ms is None or not self.cost.known:
            return self.max_batch
        n = 1
        while n < self.max_batch and waited_ms + self.cost.estimate(n + 1) <= self.budget_ms:
            n += 1
        return n

    def next_batch(self) -> Batch:
        """The next batch; waits as long as it takes for its first keyframe. Raises
        `ChannelClosed` once `jobs` is closed and empty (a batch cut short by the close is returned)."""
        batch = Batch([self.jobs.get()])
        started = self.clock()
        due = getattr(batch.items[0], "clock", None)  # a frame's: when it became available, on this clock
        born = started if due is None else min(started, due)
        while True:
            now = self.clock()
            waited = now - started
            if len(batch.items) >= self.batch_limit((now - born) * 1000.0):
                break
            if self.can_grow is not None and not self.can_grow(started + self.max_wait):
                break
            try:
                item = self.jobs.get(timeout=max(0.0, self.max_wait - waited))
            except ChannelClosed:
                break
            if item is None:  # max_wait_ms has passed
                break
            batch.items.append(item)
        batch.waited_ms = (self.clock() - started) * 1000.0
        return batch

    def observe(self, frames: int, ms: float) -> None:
        """The detector took `ms` for a batch of `frames` frames."""
        if frames > 0:
            self.cost.observe(frames, ms)
