"""`stats` messages, and the end of each stream: its last figures, its last `stats`, then its `eos`.

About once a second the run's loop hands each running stream's `stats` to the sinks that want
them, never waiting (`StatsReporter.periodic`). When a stream ends, the engine thread gives its
`StreamEnd` to `StatsReporter.end`: the stream's losses by cause go into its `StreamStats` and
its `eos` (`lost`, `expected`), its last `stats` goes out, then its `eos`, under one lock, so no
`stats` message of a stream follows its `eos`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from ...frame import StatsReport, StreamEnd
from ..publish.fanout import FanOut
from .losses import Losses
from .stream import StreamSet


class StatsReporter:
    """The `stats` and `eos` messages of a run (see the module's docstring).

    `streams`: the run's streams (each its figures, its lane and its source); `out`: the fan-out;
    `losses`: its loss accounting; `capped`:
    the streams whose rate is capped (`max_fps`: they deliver fewer frames than their input
    declares, so their `eos` expects none); `queue_depth(stream)`: frames waiting for the engine;
    `controller`: the budget controller (None: none); `model_stats()`: the secondary models' and the
    masks' figures, by `secondary` and `segment` (None: neither runs, graph/publish/build.py); `extra`:
    values added to every message (a live source adds its own figures: `Source.stats`)."""

    def __init__(self, streams: StreamSet, out: FanOut, losses: Losses, *, capped: set[str],
                 queue_depth: Callable[[str], int], controller=None,
                 model_stats: Callable[[], dict] | None = None, extra: dict | None = None):
        self.streams, self.out, self.losses, self.capped = streams, out, losses, capped
        self.queue_depth, self.controller = queue_depth, controller
        self.model_stats, self.extra = model_stats, dict(extra or {})
        self._ends_lock = threading.Lock()  # a stream's last stats and its eos, against the periodic stats

    def refresh(self) -> None:
        """On the stats' writer (the engine thread; the run's thread once it has ended): what other
        threads posted to each stream's figures, and its losses by cause (`lost`, `shed`,
        `dropped`, and the engine's `deferred_keyframes`, `discarded_detections` and
        `displaced_keyframes`)."""
        for stream in self.streams:  # a snapshot: a stream added meanwhile comes next time
            st, lane = stream.stats, stream.lane
            st.take_posts()
            lost = self.losses.of(st.name)
            st.losses(lost, Losses.dropped(lost), lane.deferred_keyframes if lane else 0,
                      lane.discarded_detections if lane else 0, lane.displaced_keyframes if lane else 0)

    def periodic(self, part: int = 0, parts: int = 1) -> int:
        """The running streams' `stats`, never waiting: a stream's eos may be stuck in a full sink
        queue, which the calling thread (the run's loop) must stay free to close on an abort; these
        figures come again in a second. `part` of `parts`: only the streams whose place in the run
        is `part` modulo `parts` (the run's loop spreads the streams over the second: building 48
        streams' messages at once held the process for 70-120 ms every second, and the frames due
        then, the same streams' every time, came too late; tools/results/overload.md). Returns the
        next part."""
        if self.out.wants_stats and self._ends_lock.acquire(blocking=False):
            try:
                self._publish([s.name for i, s in enumerate(self.streams)
                               if s.stats.reason is None and i % parts == part])
            finally:
                self._ends_lock.release()
        return (part + 1) % parts

    def end(self, end: StreamEnd) -> None:
        """A stream has ended (on the engine thread): its last figures, its last `stats`, its `eos`."""
        st = self.streams[end.stream].stats
        with self._ends_lock:
            self.refresh()
            end = replace(end, lost=dict(st.lost), expected=None if st.name in self.capped else st.total)
            st.end(end.reason, end.detail)
            if self.out.wants_stats:
                self._publish([st.name])
            self.out.publish(end)

    def _publish(self, names: list[str]) -> None:
        reports = []
        models = self.model_stats() if self.model_stats is not None else {}  # one for every stream
        controller = self.controller
        for name in names:
            stream = self.streams[name]
            if stream.lane is not None:  # a float the engine thread writes, read as it is now
                stream.stats.motion_scale = stream.lane.tracker.motion_scale
            values = stream.stats.report(self.queue_depth(name))
            if controller is not None and name in controller.shedders:
                values["control"] = controller.state(name)
            values.update(models)
            values.update(self.extra)
            if stream.source is not None:  # a live source: reconnects, last error (URL masked)
                values.update({k: v for k, v in stream.source.stats().items() if k not in ("state", "dropped")})
            reports.append(StatsReport(name, values))
        self.out.publish_stats(reports)
