"""What a run has done: each stream's counters, rates and latency (`StreamStats`), and how the run
ended (`RunReport`). The runtime fills them in; the progress display, the summary, `stats`
messages and `/metrics` read them.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from ..frame import FrameResult
from ..metrics import LatencyHistogram, percentiles

EXIT_DONE, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130
#: the states of a stream that has ended: `StreamEnd.reason` ("end" shown as "ended")
ENDED_STATES = ("ended", "truncated", "stopped", "error")


#: the stages of a frame's latency, in order. `latency_ms` of a result has all but `publish` (which
#: ends after the message has gone), and `total`: from the frame becoming available to the hand-off
STAGES = ("decode", "queue", "batch", "detect", "track", "publish")


@dataclass
class StreamStats:
    """What one stream has done so far; read by the progress display, the summary and /metrics."""

    name: str
    uri: str
    total: int | None = None
    frames: int = 0
    keyframes: int = 0
    objects: int = 0
    #: frames dropped anywhere before publication, `shed` included
    dropped: int = 0
    #: frames the budget controller dropped
    shed: int = 0
    late_keyframes: int = 0
    deferred_keyframes: int = 0
    #: keyframes whose detections came back too late for the tracker to apply (older than its history)
    discarded_detections: int = 0
    #: frames (and packets, `corrupt`) lost by cause: see `Pipeline._refresh_drops`
    lost: dict = field(default_factory=dict)
    #: how the stream ended (end, truncated, stopped, error) and what went wrong, once it has
    reason: str | None = None
    detail: str | None = None
    state: str = "starting"
    started: float | None = None
    ended: float | None = None
    _recent: deque = field(default_factory=lambda: deque(maxlen=64), repr=False)
    #: (keyframe, stage timings, publish ms, end-to-end ms) of the most recent published frames
    _window: deque = field(default_factory=lambda: deque(maxlen=256), repr=False)
    #: (batch ms, detect ms) of the most recent keyframes back from the detector
    _detected: deque = field(default_factory=lambda: deque(maxlen=64), repr=False)
    #: end to end: from the frame becoming available to every sink having published it
    latency: LatencyHistogram = field(default_factory=LatencyHistogram, repr=False)
    stages: dict = field(default_factory=lambda: {stage: LatencyHistogram() for stage in STAGES}, repr=False)

    def count(self, result: FrameResult) -> None:
        """A result handed to the sinks."""
        now = time.monotonic()
        if self.started is None:
            self.started = now
            if self.state == "starting":  # a live source reports its own states (streaming, ...)
                self.state = "running"
        self.frames += 1
        self.keyframes += result.keyframe
        self.late_keyframes += result.frame.keyframe and not result.keyframe
        self.objects += len(result.detections)
        self._recent.append(now)

    def published(self, result: FrameResult, publish_ms: float, total_ms: float) -> None:
        """Every sink has published `result`, `publish_ms` after it was handed to them."""
        timings = result.frame.timings
        self._window.append((result.keyframe, timings, publish_ms, total_ms))
        self.latency.observe(total_ms)
        for stage in ("decode", "queue", "track"):
            if stage in timings:
                self.stages[stage].observe(timings[stage])
        self.stages["publish"].observe(publish_ms)

    def detected(self, batch: float, detect: float) -> None:
        """A keyframe is back from the detector (in time or late): ms waited for its batch, and the
        batch's detector call."""
        self._detected.append((batch, detect))
        self.stages["batch"].observe(batch)
        self.stages["detect"].observe(detect)

    def latency_percentiles(self) -> dict[str, float]:
        """p50, p95 and p99 end to end over the last 256 published frames."""
        # list() copies the deque in one step; iterating it directly races the engine's appends
        return percentiles([total for *_, total in list(self._window)])

    def report(self, queue_depth: int) -> dict:
        """The values of a `stats` message: counters, current rates, latency percentiles over the
        last 256 published frames (`batch` and `detect`: the last 64 keyframes back from the detector,
        late ones included)."""
        window, detected = list(self._window), list(self._detected)
        stages = {stage: percentiles([t[stage] for _, t, _, _ in window if stage in t])
                  for stage in ("decode", "queue")}
        stages["batch"] = percentiles([b for b, _ in detected])
        stages["detect"] = percentiles([d for _, d in detected])
        stages["track"] = percentiles([t["track"] for _, t, _, _ in window if "track" in t])
        stages["publish"] = percentiles([p for _, _, p, _ in window])
        return {"ts": round(time.time(), 6), "state": self.state, "frames": self.frames,
                "keyframes": self.keyframes, "fps": round(self.fps, 2),
                "keyframe_rate": round(sum(k for k, *_ in window) / len(window), 4) if window else 0.0,
                "latency_ms": self.latency_percentiles(), "stages_ms": stages,
                "queue_depth": queue_depth, "dropped": self.dropped, "shed": self.shed, "lost": dict(self.lost),
                "late_keyframes": self.late_keyframes, "deferred_keyframes": self.deferred_keyframes,
                "discarded_detections": self.discarded_detections}

    @property
    def fps(self) -> float:
        """Frames per second over the last 64 frames (the current rate)."""
        recent = list(self._recent)  # one consistent copy: the engine appends as this runs
        if len(recent) < 2 or recent[-1] == recent[0]:
            return 0.0
        return (len(recent) - 1) / (recent[-1] - recent[0])

    @property
    def wall_s(self) -> float:
        if self.started is None:
            return 0.0
        return (self.ended or time.monotonic()) - self.started

    @property
    def mean_fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class RunReport:
    """How a run ended: `status` is done, interrupted or failed; `error` the first error's line."""

    status: str
    error: str | None
    wall_s: float
    streams: list[StreamStats]
    #: what the budget controller did, in order (its last 64 steps), how many steps it took, and the
    #: rung it ended on (see graph/control.py)
    control_actions: list[str] = field(default_factory=list)
    control_level: int = 0
    control_steps: int = 0
    #: messages each sink could not deliver, by its entry (`sinks[2] (webhook)`), those with any
    sink_losses: dict = field(default_factory=dict)
    #: the secondary models' figures (`Pipeline.secondary_stats()`), empty without them
    secondary: dict = field(default_factory=dict)

    @property
    def incomplete(self) -> list[str]:
        """One line for each stream whose input ended before its end: a truncated file, or a stream
        ended by an error of its own (the other streams went on)."""
        lines = []
        for st in self.streams:
            if st.reason == "truncated" or st.reason == "error" and st.detail:
                where = "" if st.uri in st.detail else f"{st.uri}: "
                lines.append(f"{st.name}: {where}{st.detail}")
        return lines

    @property
    def exit_code(self) -> int:
        """0 done, 130 interrupted, 1 failed, or a stream's input truncated or ended by its own error
        (even when the run was then interrupted)."""
        if self.status in ("done", "interrupted") and self.incomplete:
            return EXIT_FAILED
        return {"done": EXIT_DONE, "interrupted": EXIT_INTERRUPTED}.get(self.status, EXIT_FAILED)
