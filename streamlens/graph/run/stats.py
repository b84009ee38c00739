"""What a run has done: each stream's counters, rates and latency (`StreamStats`), and how the run
ended (`RunReport`). The progress display, the summary, `stats` messages and `/metrics` read them.

A stream's `StreamStats` has one writer: the engine thread while it runs (it counts each result it
publishes, each keyframe back from the detector, the losses, the stream's end), then the thread
that called `run()`, once the engine thread has ended. Other threads post what they saw
(`post_published`: a sink thread ends a frame's latency; `post_state`: a live source's state) and
the writer takes those posts in (`take_posts`) before it next writes. The writer holds the
stats' lock while it writes; `snapshot()` takes it to copy, so a reader on another thread gets
figures that belong together.

Example:
    >>> st = StreamStats("cam1", "cam1.mp4")
    >>> st.post_state("streaming"); st.state
    'starting'
    >>> st.take_posts(); st.snapshot().state
    'streaming'
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from ...frame import FrameResult
from ...metrics import LatencyHistogram, percentiles

EXIT_DONE, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130
#: the states of a stream that has ended: `StreamEnd.reason` ("end" shown as "ended")
ENDED_STATES = ("ended", "truncated", "stopped", "removed", "error")


#: the stages of a frame's latency, in order. `latency_ms` of a result has all but `publish` (which
#: ends after the message has gone), and `total`: from the frame becoming available to the hand-off
STAGES = ("decode", "queue", "batch", "detect", "track", "publish")
#: the stages a published frame's own timings may hold, in the order of a `_window` row
_FRAME_STAGES = ("decode", "queue", "track")


@dataclass
class StreamStats:
    """What one stream has done so far; read by the progress display, the summary and /metrics.
    One thread writes it (see the module's docstring); others post to it or read a `snapshot()`."""

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
    #: keyframes that gave their place in the detector's queue to a frame worth more (by motion)
    displaced_keyframes: int = 0
    #: keyframes whose detections came back too late for the tracker to apply (older than its history)
    discarded_detections: int = 0
    #: frames (and packets, `corrupt`) lost by cause: see `graph.run.stream.Stream.losses`
    lost: dict = field(default_factory=dict)
    #: `analytics.clips`: clips lost (not written, or never recorded), and why the last one was
    clips_lost: int = 0
    clip_loss: str | None = None
    #: the factor the stream's tracker takes its motion vectors at (`mv`: track/motion/scale.py), else None
    motion_scale: float | None = None
    #: how the stream ended (end, truncated, stopped, error) and what went wrong, once it has
    reason: str | None = None
    detail: str | None = None
    state: str = "starting"
    started: float | None = None
    ended: float | None = None
    _recent: deque = field(default_factory=lambda: deque(maxlen=64), repr=False)
    #: (keyframe, then ms: decode, queue, track (None where the frame has no such stage), publish,
    #: end to end) of the most recent published frames: flat rows, cheap to copy to the supervisor
    _window: deque = field(default_factory=lambda: deque(maxlen=256), repr=False)
    #: (batch ms, detect ms) of the most recent keyframes back from the detector
    _detected: deque = field(default_factory=lambda: deque(maxlen=64), repr=False)
    #: end to end: from the frame becoming available to every sink having published it
    latency: LatencyHistogram = field(default_factory=LatencyHistogram, repr=False)
    stages: dict = field(default_factory=lambda: {stage: LatencyHistogram() for stage in STAGES}, repr=False)
    #: held by the writer while it writes, and by `snapshot()` and `report()` while they read
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    #: what other threads saw, for the writer to take in (`take_posts`)
    _posts: deque = field(default_factory=deque, repr=False, compare=False)

    # -- any thread ---------------------------------------------------------------------------

    def post_published(self, result: FrameResult, publish_ms: float, total_ms: float) -> None:
        """Every sink has published `result`, `publish_ms` after it was handed to them (taken in as
        `published` by the writer)."""
        self._posts.append((self.published, (result, publish_ms, total_ms)))

    def post_state(self, state: str) -> None:
        """A live source's state (streaming, stalled, ...): taken in unless the stream has ended."""
        self._posts.append((self._source_state, (state,)))

    def snapshot(self) -> StreamStats:
        """A copy of the figures as they are now, which stays as it is while the run goes on."""
        with self._lock:
            out = copy.copy(self)
            out.lost = dict(self.lost)
            out._recent, out._window, out._detected = deque(self._recent), deque(self._window), deque(self._detected)
            out.latency = self.latency.copy()
            out.stages = {stage: histogram.copy() for stage, histogram in self.stages.items()}
        return out

    def __getstate__(self) -> dict:  # a snapshot crosses to the supervisor pickled: no lock, no posts
        state = self.__dict__.copy()
        del state["_lock"], state["_posts"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock, self._posts = threading.RLock(), deque()

    # -- the writer ---------------------------------------------------------------------------

    def take_posts(self) -> None:
        """Take in what other threads posted, in order."""
        posts = self._posts  # appended by other threads, taken here (deque's ends are thread-safe)
        while posts:
            method, args = posts.popleft()
            method(*args)

    def count(self, result: FrameResult) -> None:
        """A result handed to the sinks."""
        now = time.monotonic()
        with self._lock:
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
        own = [timings.get(stage) for stage in _FRAME_STAGES]
        with self._lock:
            self._window.append((result.keyframe, *own, publish_ms, total_ms))
            self.latency.observe(total_ms)
            for stage, ms in zip(_FRAME_STAGES, own):
                if ms is not None:
                    self.stages[stage].observe(ms)
            self.stages["publish"].observe(publish_ms)

    def detected(self, batch: float, detect: float) -> None:
        """A keyframe is back from the detector (in time or late): ms waited for its batch, and the
        batch's detector call."""
        with self._lock:
            self._detected.append((batch, detect))
            self.stages["batch"].observe(batch)
            self.stages["detect"].observe(detect)

    def losses(self, lost: dict[str, int], dropped: int, deferred_keyframes: int, discarded_detections: int,
               displaced_keyframes: int = 0) -> None:
        """What the stream has lost so far, by cause (graph/run/losses.py), and the engine's counts of
        deferred keyframes, of detections that came back too late to apply and of keyframes that
        gave their place in the detector's queue."""
        with self._lock:
            self.lost, self.shed, self.dropped = lost, lost.get("shed", 0), dropped
            self.deferred_keyframes, self.discarded_detections = deferred_keyframes, discarded_detections
            self.displaced_keyframes = displaced_keyframes

    def clip_lost(self, reason: str) -> None:
        """A clip of the stream is lost, and why (graph/publish/clips.py)."""
        with self._lock:
            self.clips_lost += 1
            self.clip_loss = reason

    def end(self, reason: str, detail: str | None) -> None:
        """The stream has ended: how (`StreamEnd.reason`), and what went wrong."""
        with self._lock:
            self.reason, self.detail = reason, detail
            self.state = {"end": "ended"}.get(reason, reason)
            self.ended = time.monotonic()

    def _source_state(self, state: str) -> None:
        with self._lock:
            if self.state not in ENDED_STATES:
                self.state = state

    # -- readers ------------------------------------------------------------------------------

    def latency_percentiles(self) -> dict[str, float]:
        """p50, p95 and p99 end to end over the last 256 published frames."""
        with self._lock:
            window = list(self._window)
        return percentiles([row[-1] for row in window])

    def report(self, queue_depth: int) -> dict:
        """The values of a `stats` message: counters, current rates, latency percentiles over the
        last 256 published frames (`batch` and `detect`: the last 64 keyframes back from the detector,
        late ones included)."""
        with self._lock:
            return self._report(queue_depth)

    def _report(self, queue_depth: int) -> dict:
        window, detected = list(self._window), list(self._detected)
        columns = dict(zip(("keyframe", *_FRAME_STAGES, "publish"), zip(*window))) if window else {}
        stages = {stage: percentiles([ms for ms in columns.get(stage, ()) if ms is not None])
                  for stage in ("decode", "queue")}
        stages["batch"] = percentiles([b for b, _ in detected])
        stages["detect"] = percentiles([d for _, d in detected])
        stages["track"] = percentiles([ms for ms in columns.get("track", ()) if ms is not None])
        stages["publish"] = percentiles(list(columns.get("publish", ())))
        return {"ts": round(time.time(), 6), "state": self.state, "frames": self.frames,
                "keyframes": self.keyframes, "fps": round(self.fps, 2),
                "keyframe_rate": round(sum(columns["keyframe"]) / len(window), 4) if window else 0.0,
                "latency_ms": self.latency_percentiles(), "stages_ms": stages,
                "queue_depth": queue_depth, "dropped": self.dropped, "shed": self.shed, "lost": dict(self.lost),
                "late_keyframes": self.late_keyframes, "deferred_keyframes": self.deferred_keyframes,
                "displaced_keyframes": self.displaced_keyframes, "discarded_detections": self.discarded_detections,
                "clips_lost": self.clips_lost,
                **({} if self.motion_scale is None else {"motion_scale": round(self.motion_scale, 3)})}

    @property
    def fps(self) -> float:
        """Frames per second over the last 64 frames (the current rate)."""
        with self._lock:
            recent = list(self._recent)
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
    #: rung it ended on (see graph/overload/control.py)
    control_actions: list[str] = field(default_factory=list)
    control_level: int = 0
    control_steps: int = 0
    #: messages each sink could not deliver, by its entry (`sinks[2] (webhook)`), those with any
    sink_losses: dict = field(default_factory=dict)
    #: the secondary models' figures (`Pipeline.secondary_stats()`), empty without them
    secondary: dict = field(default_factory=dict)
    #: the mask stage's figures (`Pipeline.segment_stats()`), empty without masks
    segment: dict = field(default_factory=dict)

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
