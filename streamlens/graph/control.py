"""The budget controller: it holds the live streams' p95 latency within `runtime.budget_ms`.

Latency here is end to end: from a frame becoming available (`Frame.ts`) to every sink having
published its result. Once a second the controller looks at each live stream's last second: its
p95, and any frame dropped without its say (a full queue, a frame too stale, a decoder that fell
behind). When a stream is over budget or dropping, it climbs one rung of this ladder, then gives the
step `settle_s` (2 s) to take effect (a full queue takes a moment to drain) before the next:

0. (live streams sharing one keyframe schedule, `keyframe_wait`) keyframes no longer wait for their
   detections: each goes out by motion at once and its detections are applied when they come (the
   frames since are replayed), so latency falls back to that of the frames between keyframes while
   the detector keeps its pace: what is given up is the keyframe's own boxes and those of the
   frames until its detections are back;
1. widen the keyframe intervals of every live stream (x1.5, x2, x3, x4 ... up to `max_stretch`):
   less detector work, the cheapest thing to give up, since the tracker carries objects between;
2. batch for throughput: the detector fills its batches up to `max_batch` instead of cutting them
   short to keep each keyframe's latency (keyframes then come back later; frames do not wait);
3. drop frames from the stream furthest behind (highest p95): 1 in 8, then 1 in 4, then 1 in 2,
   evenly spaced; the next rung goes to whichever stream is then furthest behind.

Every frame it drops is counted (`shed`, part of `dropped`) in stats, metrics and the summary.
When every live stream has stayed under 60% of the budget, without drops, for `calm_s`, it comes
down one rung, in the reverse order. A step down that had to be taken back within `calm_s` makes
the next one wait twice as long (up to a minute), so a load at the edge does not see-saw.

Example:
    >>> t = [0.0]
    >>> c = BudgetController(33, ["cam1", "cam2"], max_stretch=2, settle_s=1, clock=lambda: t[0])
    >>> def second(ms):
    ...     t[0] += 1.0
    ...     for stream in ("cam1", "cam2"): c.observe(stream, ms[stream])
    ...     return c.tick({})
    >>> [second({"cam1": 50, "cam2": 20}) for _ in range(4)]
    ['keyframe intervals x1.5', 'keyframe intervals x2', 'batching for throughput', 'cam1: dropping 1 in 8']
    >>> c.shedders["cam1"].fraction, c.shedders["cam2"].fraction
    (0.125, 0.0)
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from ..metrics import nearest_rank

#: keyframe interval factors, in the order the controller tries them
STRETCHES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)
#: shares of a stream's frames dropped, in the order the controller tries them
SHED_STEPS = (0.0, 0.125, 0.25, 0.5)
#: a stream whose p95 stays under this share of the budget is calm
CALM_SHARE = 0.6
#: the longest wait between two steps down, seconds
MAX_CALM_S = 60.0


class Shedder:
    """Drops an even `fraction` of one stream's frames: `drop()` once per frame, in order."""

    def __init__(self) -> None:
        self.fraction = 0.0
        self.dropped = 0
        self._credit = 0.0

    def drop(self) -> bool:
        if self.fraction <= 0.0:
            self._credit = 0.0
            return False
        self._credit += self.fraction
        if self._credit >= 1.0:
            self._credit -= 1.0
            self.dropped += 1
            return True
        return False


class BudgetController:
    """The ladder of the module's docstring, for the live streams of one pipeline.

    `observe(stream, ms)` (any thread) takes each published frame's end-to-end latency; `tick(drops)`
    (one thread, about once a second) takes each stream's count of frames dropped so far outside
    the controller, decides, and returns what it did (or None). The runtime reads `stretch`,
    `throughput` and `shedders[stream]` and applies them."""

    def __init__(self, budget_ms: float, streams: list[str], *, max_stretch: float = 4.0,
                 window_s: float = 1.0, calm_s: float = 5.0, settle_s: float = 2.0, keyframe_wait: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        self.budget_ms = float(budget_ms)
        self.stretches = tuple(s for s in STRETCHES if s <= max(1.0, max_stretch))
        self.window_s = window_s
        self.settle_s = settle_s
        self.calm_s = calm_s
        self.clock = clock
        self.shedders = {name: Shedder() for name in streams}
        self.throughput = False
        #: whether live keyframes wait for their detections (rung 0; always True without `keyframe_wait`)
        self.wait = True
        self._wait_rung = keyframe_wait
        #: what the controller did, most recent last
        self.actions: deque[str] = deque(maxlen=64)
        #: every step taken, up or down (`actions` keeps the last 64 of them)
        self.steps = 0
        self._stretch_index = 0
        self._samples = {name: deque() for name in streams}
        self._lock = threading.Lock()
        self._drops: dict[str, int] = {}
        self._calm_since: float | None = None
        self._last_up: float | None = None
        self._last_down: float | None = None

    @property
    def stretch(self) -> float:
        """The factor on every live stream's keyframe intervals (1.0: as configured)."""
        return self.stretches[self._stretch_index]

    @property
    def level(self) -> int:
        """Rungs climbed: 0 is the pipeline as configured."""
        return (self._stretch_index + self.throughput + (not self.wait)
                + sum(SHED_STEPS.index(s.fraction) for s in self.shedders.values()))

    def observe(self, stream: str, ms: float) -> None:
        samples = self._samples.get(stream)
        if samples is not None:
            with self._lock:
                samples.append((self.clock(), ms))

    def p95(self, stream: str) -> float | None:
        """The stream's p95 over the last `window_s` (None: no frame in that time)."""
        with self._lock:
            values = sorted(ms for _, ms in self._samples[stream])
        return nearest_rank(values, 0.95) if values else None

    def tick(self, drops: dict[str, int]) -> str | None:
        now = self.clock()
        with self._lock:
            for samples in self._samples.values():
                while samples and samples[0][0] < now - self.window_s:
                    samples.popleft()
        p95 = {name: self.p95(name) for name in self._samples}
        dropping = {name for name, n in drops.items() if n > self._drops.get(name, n)}
        self._drops.update(drops)
        over = {name for name, ms in p95.items() if ms is not None and ms > self.budget_ms} | dropping
        if over:
            self._calm_since = None
            if self._last_down is not None and now - self._last_down < self.calm_s:
                self.calm_s = min(MAX_CALM_S, 2 * self.calm_s)  # that step down was one too many
            self._last_down = None
            if self._last_up is not None and now - self._last_up < self.settle_s:
                return None  # the last step has not had its time yet
            self._last_up = now
            return self._note(self._step_up(p95, over))
        calm = all(ms is None or ms < CALM_SHARE * self.budget_ms for ms in p95.values())
        if not calm or self.level == 0:
            self._calm_since = None
            return None
        if self._calm_since is None:
            self._calm_since = now
        if now - self._calm_since < self.calm_s:
            return None
        self._calm_since, self._last_down = now, now
        return self._note(self._step_down(p95))

    def _note(self, action: str | None) -> str | None:
        if action:
            self.actions.append(action)
            self.steps += 1
        return action

    def _step_up(self, p95: dict[str, float | None], over: set[str]) -> str | None:
        if self._wait_rung and self.wait:
            self.wait = False
            return "keyframes no longer wait"
        if self._stretch_index + 1 < len(self.stretches):
            self._stretch_index += 1
            return f"keyframe intervals x{self.stretch:g}"
        if not self.throughput:
            self.throughput = True
            return "batching for throughput"
        # the stream furthest behind that can still give up frames; those dropping come first
        candidates = [n for n in self.shedders if self.shedders[n].fraction < SHED_STEPS[-1]]
        if not candidates:
            return None
        worst = max(candidates, key=lambda n: (n in over, p95[n] if p95[n] is not None else 0.0))
        shedder = self.shedders[worst]
        shedder.fraction = SHED_STEPS[SHED_STEPS.index(shedder.fraction) + 1]
        return f"{worst}: dropping 1 in {round(1 / shedder.fraction)}"

    def _step_down(self, p95: dict[str, float | None]) -> str:
        shed = [n for n, s in self.shedders.items() if s.fraction > 0]
        if shed:  # give frames back first to the stream with the most room
            best = min(shed, key=lambda n: p95[n] if p95[n] is not None else 0.0)
            shedder = self.shedders[best]
            shedder.fraction = SHED_STEPS[SHED_STEPS.index(shedder.fraction) - 1]
            return f"{best}: " + (f"dropping 1 in {round(1 / shedder.fraction)}" if shedder.fraction
                                  else "no longer dropping")
        if self.throughput:
            self.throughput = False
            return "batching for latency"
        if self._stretch_index:
            self._stretch_index -= 1
            return f"keyframe intervals x{self.stretch:g}"
        self.wait = True
        return "keyframes wait again"

    def state(self, stream: str) -> dict:
        """What the controller does to `stream` now, for its stats."""
        shedder = self.shedders.get(stream)
        return {"level": self.level, "keyframe_stretch": self.stretch, "keyframe_wait": self.wait,
                "batching": "throughput" if self.throughput else "latency",
                "shed_fraction": shedder.fraction if shedder else 0.0}
