"""A live camera or stream (rtsp(s)://, http(s):// and HLS, rtmp(s)://, udp://, srt://, /dev/videoN)
that keeps running through drops, stalls and outages.

Each source is a small state machine, driven from the runtime's source thread, with its connections
decoded on a worker (a CPU process by default; see worker.py). A frame arrives as the decoder's
planes (`Frame(decoded=YuvPicture)`), converted to BGR when something first reads `Frame.image`:

    connecting --frame--> streaming --lost/ended--> reconnecting --frame--> streaming
        |                    |  \\--no frame for stall_s--> stalled --> reconnecting
        |                    |                                              |
        +--failed--> backing_off --wait--> connecting / reconnecting <------+ (failed)
    any state --stop--> stopped

- A connection attempt that fails waits before the next one (see backoff.py): while the outage is
  younger than a minute, from `backoff_initial_s` doubling up to half a second, so a camera that
  comes back is knocked on again within half a second of its return; after that the wait doubles at
  each attempt up to `backoff_max_s`, so one that stays down is not hammered (all with a little
  jitter). A refused connection fails at once, so quick retries cost a camera that is down almost
  nothing. A stream that
  delivered frames for `HEALTHY_S` seconds and then drops is retried at once, and a new outage begins;
  one that drops sooner (a flapping camera) goes on backing off within the same outage. A source never
  gives up, and a camera that is down at start never takes the pipeline or the other streams down.
- Every network wait is bounded by FFmpeg's own timeout (`timeout_s`, passed as the option the
  protocol honours: see session.py); the watchdog catches what that cannot (bytes that arrive but
  decode to nothing): no frame for `stall_s` seconds and the connection is dropped and reopened.
- `stop` is honoured from any state in under a second: waits poll it every 0.1 s, a worker is given
  0.5 s to end its connection, and a worker process blocked inside FFmpeg is then killed rather than
  waited for (a worker thread is left to end on its own: FFmpeg's timeout bounds it).
- `max_staleness_ms`: a frame that waited longer than this (from decode to hand-over) is dropped.
- Trouble of this host's own with one camera is that camera's alone, and retried like a failed
  connection: a decode worker that cannot be started (no file descriptors or processes left), a
  picture larger than `max_pixels`, or one whose frame ring has no room in shared memory (a camera
  that switched to a larger size; see worker.py). Each ends the attempt with one line naming the
  stream, and the source backs off and tries again; it never raises for them.
- `losses()`: frames the worker dropped (`decoder`: its ring full, or skipped to catch up with the
  camera, see decode.py `CatchUp`), frames dropped for staleness
  (`stale`), pictures refused (`refused`: too large, or no room for them) and packets its decoder
  rejected (`corrupt`), counted across reconnects and workers.
- Credentials in the URL never leave this module unmasked: every log line, error and stats value
  uses `rtsp://***@host/...`.

What the `Frame` fields mean here:
- `index` counts the frames this source decoded, from 0, across reconnects (a frame dropped for
  staleness still takes its number, so gaps in `index` show drops).
- `pts` is in seconds from the source's first frame: the stream's own clock within a connection,
  bridged across a reconnect by the wall-clock time the outage lasted, so it always increases.
- `ts` is `time.time()` when the frame was decoded, i.e. when it became available; `clock` the
  same moment on `time.monotonic()`, read in the worker (the clock is system wide).

Example:
    >>> source = LiveSource("door", "rtsp://user:pw@10.0.0.7/stream1", backoff_max_s=5)
    >>> source.display_uri, source.state
    ('rtsp://***@10.0.0.7/stream1', 'connecting')
    >>> stop = threading.Event()
    >>> for frame in source.frames(stop):         # doctest: +SKIP
    ...     print(frame.index, frame.width, source.state)
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config.common import section
from ..config.sources import SourceConfig
from ..frame import Frame
from ..urls import host_problem, mask_url
from .backoff import Backoff
from .base import Source
from .host_memory import HostMemory
from .session import SessionSpec, behind_limit, input_options
from .clip_outcomes import ClipOutcomes, settle_worker
from .clips import CLOSE_S as CLIPS_CLOSE_S, ClipSpec
from .protocol import ClipDone
from .worker import CLOSE_GRACE_S, Died, Ended, FrameReady, Opened, ProcessWorker, ThinLink, ThreadWorker

log = logging.getLogger("streamlens.sources")

STATES = ("connecting", "streaming", "stalled", "backing_off", "reconnecting", "stopped")
#: how often waits look at the stop event (seconds)
POLL_S = 0.1
#: how long a stalled connection may take to end by itself before its worker is replaced
ABORT_GRACE_S = 1.0
#: a connection that delivered frames this long (seconds) was healthy: its loss is retried at once and
#: the backoff starts again from backoff_initial_s; one lost sooner continues the backoff (a flapping camera)
HEALTHY_S = 5.0
#: the first attempts of an outage that are each logged; after them only a new error or a longer
#: wait, and otherwise the same failure again at most every REPEAT_LOG_S seconds
LOGGED_ATTEMPTS = 5
REPEAT_LOG_S = 60.0
#: how long a failed connection's line may wait for its host's name to be looked up (seconds); only
#: lines that are logged look (kept short: a stop is honoured within a second)
RESOLVE_WAIT_S = 0.5


@dataclass
class _Outcome:
    """How one connection ended, as the state machine sees it."""

    kind: str  # "ended", "stalled", "died", "stopped"
    reason: str = ""
    message: str = ""
    frames: int = 0


class LiveSource(Source):
    """Frames of a live input, reconnecting for ever; see the module's documentation.

    `state` is the current state (one of `STATES`); `on_state(name, state)` is called on each
    change (from the source's thread); `stats()` gives the counters for stats messages.
    """

    def __init__(self, name: str | SourceConfig, uri: str | None = None, *, export_mvs: bool = False,
                 pinned: bool | str = "auto", clips: ClipSpec | None = None, **keys: Any):
        """`LiveSource(cfg)` with the source's typed section, or `LiveSource(name, uri, **keys)` with
        keys of `SourceConfig`, checked as the pipeline file's are (`ValueError`), `uri` taken as a
        camera's (a file too: then paced by its own timestamps, as a camera sends them)."""
        cfg = name if isinstance(name, SourceConfig) else section(
            SourceConfig, str(name), {"source": "live"}, name=name, uri=uri, **keys)
        uri = cfg.uri
        self.name = cfg.name
        self.uri = uri
        self.display_uri = mask_url(uri)
        self.timeout_s = cfg.timeout_s
        self.stall_s = cfg.stall_s
        self.max_staleness_s = None if cfg.max_staleness_ms is None else cfg.max_staleness_ms / 1000.0
        self.decode = cfg.decode
        self.pinned = pinned
        self.backoff = Backoff(cfg.backoff_initial_s, cfg.backoff_max_s)
        self.spec = SessionSpec(
            uri=uri,
            options=input_options(uri, transport=cfg.transport, timeout_s=cfg.timeout_s, user=dict(cfg.options)),
            format="v4l2" if uri.startswith("/dev/video") else None,
            max_fps=cfg.max_fps, export_mvs=export_mvs, fast_decode=cfg.fast_decode, max_pixels=cfg.max_pixels,
            behind_s=behind_limit(uri),
            clips=None if clips is None else dataclasses.replace(clips, stream=cfg.name))
        self.fps: float | None = None
        self.total_frames = None
        self.on_state: Callable[[str, str], None] | None = None
        self.state = "connecting"
        #: connections that delivered frames and then were lost
        self.reconnects = 0
        #: frames dropped before the graph saw them: the worker's slots were full, or too old
        self.dropped_worker = 0
        self.dropped_stale = 0
        #: packets the decoder rejected (lost UDP packets, a stream joined between keyframes)
        self.corrupt_packets = 0
        #: pictures decoded and refused: larger than `max_pixels`, or no room in shared memory for them
        self.refused_frames = 0
        self._retired = (0, 0)  # drops and corrupt packets counted by workers since replaced
        #: what became of the clips asked of its workers (`clip_outcomes`)
        self.clips = ClipOutcomes()
        #: the last connection failure or loss, one line, URL masked
        self.last_error: str | None = None
        self._closed = threading.Event()
        self._running = False
        self._lock = threading.Lock()
        #: the connection now: (worker, session, clock), for clip requests (`clip()`)
        self._now: tuple | None = None
        #: the budget controller's `Shedder`, set by the runtime before `frames()`: on its last rung
        #: the decode worker skips every packet but the keyframes (worker.py `ThinLink`)
        self.thins = True  # the budget controller's shedder gives frames up where they are decoded
        self.thin = None

    # -- state ---------------------------------------------------------------------------------

    def _set_state(self, state: str) -> None:
        if state == self.state:
            return
        self.state = state
        if self.on_state is not None:
            self.on_state(self.name, state)

    def stats(self) -> dict:
        """Counters for a stats message (URL-free)."""
        return {"state": self.state, "reconnects": self.reconnects,
                "dropped_source": self.dropped_worker + self.dropped_stale,
                "last_error": self.last_error}

    def clip_outcomes(self) -> list:
        return self.clips.take()

    def losses(self) -> dict[str, int]:
        return {"corrupt": self.corrupt_packets, "decoder": self.dropped_worker, "stale": self.dropped_stale,
                "refused": self.refused_frames}

    def _count(self, event) -> None:
        """Take the counters a worker sends (they restart with each worker)."""
        self.dropped_worker = self._retired[0] + event.worker_drops
        self.corrupt_packets = self._retired[1] + event.corrupt

    def close(self) -> None:
        """Make a running `frames()` end within about `POLL_S` (its worker is ended there), and a
        later one return at once. Safe to call twice and from any thread."""
        self._closed.set()

    # -- frames --------------------------------------------------------------------------------

    def frames(self, stop: threading.Event) -> Iterator[Frame]:
        """Yield frames until `stop` is set or `close()` is called; never raises for a camera that is
        down, drops, or cannot be taken by this host now (it retries); ends in state `stopped`."""
        with self._lock:
            if self._running:
                raise RuntimeError(f"{self.name}: frames() is already running")
            self._running = True
        try:
            yield from self._machine(lambda: stop.is_set() or self._closed.is_set())
        finally:
            self._set_state("stopped")
            self._running = False
            log.debug("%s: stopped", self.name)

    def _machine(self, stopping: Callable[[], bool]) -> Iterator[Frame]:
        host: HostMemory | None = None  # chosen at the first frame, when the detector is loaded
        clock = _StreamClock()
        worker = None
        session = 0
        streamed_before = False
        lost_at: float | None = None
        repeat = _RepeatFilter(REPEAT_LOG_S)
        link = ThinLink(self.thin) if self.thin is not None else None
        outcome = None
        try:
            while not stopping():
                outcome = _Outcome("stopped")
                announced = 0.0  # when this connection's first frame came
                if worker is None:
                    worker = self._start_worker(outcome)
                if worker is not None:
                    session += 1
                    self._set_state("reconnecting" if streamed_before else "connecting")
                    log.debug("%s: connecting to %s", self.name, self.display_uri)
                    worker.open(session, self.spec)
                    self._now = (worker, session, clock)
                connection = self._connection(worker, session, stopping, outcome, link) if worker is not None else ()
                for ready, thinned in connection:
                    if host is None:
                        host = HostMemory(self.pinned)
                    self._count(ready)
                    clock.index += thinned  # frame numbers count the frames skipped undecoded
                    frame = self._frame(ready, host, clock)
                    if frame is None:
                        continue
                    if not announced:
                        announced = time.monotonic()
                        self._on_streaming(streamed_before, lost_at)
                        repeat.clear()
                    yield frame
                if outcome.kind == "stopped" or stopping():
                    return
                if outcome.kind in ("stalled", "died") and worker is not None:
                    worker.close(0.0)
                    worker = None
                    self._retired = (self.dropped_worker, self.corrupt_packets)
                self.last_error = _describe(outcome, self.stall_s)
                if announced:
                    streamed_before = True
                    self.reconnects += 1
                    lost_at = time.monotonic()
                    # a stream that was delivering is retried at once; a camera that drops again soon
                    # after each connect backs off like one that refuses
                    if lost_at - announced >= HEALTHY_S:
                        self.backoff.reset()
                        wait = 0.0
                    else:
                        wait = self.backoff.next()
                    log.warning("%s: stream lost (%s); reconnecting to %s%s", self.name, self.last_error,
                                self.display_uri, f" in {wait:.1f} s" if wait else "")
                else:
                    wait = self.backoff.next()
                    # the first attempts, then only news (a new error, a longer wait) or once a minute
                    due = repeat.should_log(self.last_error)
                    if due or self.backoff.failures <= LOGGED_ATTEMPTS or not self.backoff.capped:
                        if outcome.reason == "open_failed":  # FFmpeg says "Input/output error" for an unknown host
                            problem = host_problem(self.uri, timeout=RESOLVE_WAIT_S)
                            if problem:
                                self.last_error = f"{problem}; {self.last_error}"
                        log.warning("%s: cannot connect to %s (%s); retrying in %.1f s (attempt %d)", self.name,
                                    self.display_uri, self.last_error, wait, self.backoff.failures)
                if wait:
                    self._set_state("backing_off")
                    if _wait(stopping, wait):
                        return
        finally:
            running = outcome is not None and outcome.kind == "stopped"  # a connection still open
            if running and worker is not None and worker.alive and self.spec.clips:  # its clips written, told
                settle_worker(worker, session, self.clips, CLIPS_CLOSE_S + 1)
            if worker is not None:
                worker.close(CLIPS_CLOSE_S + 1 if self.spec.clips else CLOSE_GRACE_S)

    def clip(self, start_s: float, end_s: float, path: str, index: int = -1) -> bool:
        """Ask this camera's decode worker for a clip of its packets from `start_s` to `end_s` (the
        frames' `pts`) into `path` (clips.py); False when it records none (no `analytics.clips`, or
        no connection now). Any thread; never waits."""
        now = self._now
        if self.spec.clips is None or now is None:
            return False
        worker, session, clock = now
        if clock.session != session:  # no frame of this connection yet: its clock is not known
            return False
        offset = clock.first_pts - clock.base  # a frame's pts -> the connection's own
        worker.clip(session, start_s + offset, end_s + offset, path)
        return True

    def _start_worker(self, outcome: _Outcome):
        """A started decode worker, or None when none can be started now (no file descriptors or
        processes left): `outcome` then says why, and the source backs off and tries again."""
        worker = (ProcessWorker if self.decode == "process" else ThreadWorker)(self.name)
        try:
            worker.start()
        except (OSError, RuntimeError) as error:  # RuntimeError: threads cannot be started
            outcome.kind, outcome.reason = "died", "error"
            outcome.message = f"cannot start its decode worker ({error})"
            return None
        return worker

    def _connection(self, worker, session: int, stopping, outcome: _Outcome,
                    link: ThinLink | None) -> Iterator[tuple[FrameReady, int]]:
        """Yield this connection's frames, each with the packets skipped undecoded before it (the
        controller's last rung, `link`); fill in `outcome` when it ends (or is stopped)."""
        last_progress = time.monotonic()
        while True:
            if stopping():
                outcome.kind = "stopped"
                return
            event = worker.poll(POLL_S)
            thinned = link.follow(worker, session, event) if link is not None else 0
            now = time.monotonic()
            if event is None:
                limit = self.stall_s if outcome.frames else self.stall_s + self.timeout_s
                if now - last_progress > limit:
                    self._stall(worker, session, stopping, outcome)
                    return
                continue
            if isinstance(event, Died):
                outcome.kind, outcome.reason, outcome.message = "died", "error", event.message
                return
            if getattr(event, "session", session) != session:  # from an abandoned connection
                if isinstance(event, FrameReady):
                    event.discard()
                continue
            if isinstance(event, Opened):
                last_progress = now
                if event.info.fps:
                    self.fps = event.info.fps
                log.debug("%s: opened %dx%d %s", self.name, event.info.width, event.info.height, event.info.codec)
            elif isinstance(event, FrameReady):
                last_progress = now
                outcome.frames += 1
                yield event, thinned
            elif isinstance(event, ClipDone):
                self.clips.add(*event)
            elif isinstance(event, Ended):
                self._count(event)
                self.refused_frames += event.detail.get("refused", 0)
                outcome.kind, outcome.reason, outcome.message = "ended", event.reason, event.message
                return

    def _stall(self, worker, session: int, stopping, outcome: _Outcome) -> None:
        """No frame for too long: end this connection (its worker too, if it does not end at once)."""
        self._set_state("stalled")
        outcome.kind = "stalled"
        worker.abort(session)
        deadline = time.monotonic() + ABORT_GRACE_S
        while time.monotonic() < deadline and not stopping():
            event = worker.poll(POLL_S)
            if isinstance(event, FrameReady):
                event.discard()
            elif isinstance(event, ClipDone):
                self.clips.add(*event)
            elif isinstance(event, Ended) and event.session == session:
                self._count(event)
                outcome.kind = "ended_after_stall"
                break
            elif isinstance(event, Died):
                break
        if outcome.kind == "ended_after_stall":
            outcome.kind = "ended"
            outcome.reason = "stalled"

    def _frame(self, ready: FrameReady, host: HostMemory, clock: _StreamClock) -> Frame | None:
        index = clock.count()
        if self.max_staleness_s is not None and time.monotonic() - ready.clock > self.max_staleness_s:
            ready.discard()
            self.dropped_stale += 1
            return None
        picture, mvs = ready.take(host)
        image, decoded = (picture, None) if isinstance(picture, np.ndarray) else (None, picture)
        return Frame(stream=self.name, index=index, pts=clock.pts(ready.session, ready.pts), ts=ready.ts,
                     image=image, decoded=decoded, timings={"decode": ready.decode_ms}, motion_vectors=mvs,
                     clock=ready.clock)

    def _on_streaming(self, streamed_before: bool, lost_at: float | None) -> None:
        self._set_state("streaming")
        if streamed_before and lost_at is not None:
            log.warning("%s: streaming again after %.1f s", self.name, time.monotonic() - lost_at)
        else:
            log.info("%s: streaming from %s", self.name, self.display_uri)


class _StreamClock:
    """Frame numbers and presentation times that keep increasing across reconnects.

    Within one connection `pts` follows the stream's own clock; a new connection continues from the
    last time given plus the wall-clock time between the two frames (at least one frame's time).

    Example:
        >>> clock = _StreamClock()
        >>> clock.pts(1, 100.0), clock.pts(1, 100.5)
        (0.0, 0.5)
        >>> clock.pts(2, 7.0) > 0.5
        True
    """

    def __init__(self, min_step: float = 1e-3):
        self.min_step = min_step
        self.index = 0
        self.session = None
        self.first_pts = 0.0
        self.base = 0.0
        self.last = None
        self.last_wall = 0.0

    def count(self) -> int:
        self.index += 1
        return self.index - 1

    def pts(self, session: int, pts: float) -> float:
        now = time.monotonic()
        if session != self.session:
            self.session, self.first_pts = session, pts
            self.base = 0.0 if self.last is None else self.last + max(self.min_step, now - self.last_wall)
        value = self.base + (pts - self.first_pts)
        if self.last is not None and value <= self.last:
            value = self.last + self.min_step
        self.last, self.last_wall = value, now
        return value


class _RepeatFilter:
    """Says whether a failure line is worth logging: a new message, or the same after `every_s`."""

    def __init__(self, every_s: float):
        self.every_s = every_s
        self.clear()

    def clear(self) -> None:
        self.message, self.at = None, 0.0

    def should_log(self, message: str) -> bool:
        now = time.monotonic()
        if message != self.message or now - self.at >= self.every_s:
            self.message, self.at = message, now
            return True
        return False


def _describe(outcome: _Outcome, stall_s: float) -> str:
    if outcome.kind == "stalled" or outcome.reason == "stalled":
        return f"no frame for {stall_s:g} s"
    return mask_url(outcome.message or outcome.reason or outcome.kind)


def _wait(stopping: Callable[[], bool], seconds: float) -> bool:
    """Sleep `seconds` in `POLL_S` steps; True as soon as `stopping()` says so."""
    deadline = time.monotonic() + seconds
    while not stopping():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(POLL_S, left))
    return True
