"""The recent past of one stream's tracker: enough to re-anchor tracks at a late keyframe and catch up.

For each recent frame the history keeps the frame's index and time, its motion record (what the
motion model kept of it: nothing, a small grey image, or motion vectors) and the tracks as they were
after that frame. A keyframe result that comes back after later frames were already carried by
motion rewinds to its frame's tracks, corrects them, and replays the frames since from their
records. The history holds at most `max_frames` frames (the tracker sizes it in seconds).

Example:
    >>> from streamlens.track.tracks import TrackTable
    >>> history = FrameHistory(max_frames=2)
    >>> for index in range(3):
    ...     history.append(FrameStep(index, index / 30, None, TrackTable.empty()))
    >>> [step.index for step in history.since(0)], history.find(0) is None
    ([1, 2], True)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from .tracks import TrackTable


@dataclass(slots=True)
class FrameStep:
    """One frame as the tracker saw it."""

    index: int
    time: float
    record: object | None
    tracks: TrackTable
    #: whether a keyframe result has corrected this frame's tracks
    corrected: bool = False
    #: whether the stream broke just before this frame (a loop seam, time stamps that restarted, an
    #: outage longer than the tracker's `lost_s`): no track crosses from the frame before
    cut: bool = False


@dataclass(slots=True)
class Replay:
    """The frames after a late keyframe, being redone from their stored motion."""

    tracks: TrackTable      # the tracks as far as the replay has come
    previous: FrameStep     # the last step redone (first: the keyframe's)
    later: list[FrameStep]  # every step after the keyframe's, oldest first
    done: int = 0           # how many of `later` are redone


class FrameHistory:
    """The last `max_frames` `FrameStep`s of a stream, oldest first."""

    def __init__(self, max_frames: int):
        self.max_frames = max(1, max_frames)
        self._steps: deque[FrameStep] = deque(maxlen=self.max_frames)

    def append(self, step: FrameStep) -> None:
        self._steps.append(step)

    def clear(self) -> None:
        self._steps.clear()

    def find(self, index: int) -> FrameStep | None:
        """The step of frame `index`, or None when it is not (or no longer) held."""
        for step in reversed(self._steps):
            if step.index == index:
                return step
            if step.index < index:
                break
        return None

    def since(self, index: int) -> Iterator[FrameStep]:
        """The steps after frame `index`, oldest first."""
        return (step for step in self._steps if step.index > index)

    def previous(self, step: FrameStep) -> FrameStep | None:
        """The step just before `step`, or None."""
        earlier = None
        for candidate in self._steps:
            if candidate is step:
                return earlier
            earlier = candidate
        return None

    @property
    def latest(self) -> FrameStep | None:
        return self._steps[-1] if self._steps else None

    def __len__(self) -> int:
        return len(self._steps)


class StreamClock:
    """The seconds between a stream's frames, and whether the stream broke between two (see
    tracker.py's docs): what the time stamps (`pts`) say when they move forward by a plausible step
    (up to `max_step_frames` frame times for each frame numbered in between), else what
    `Frame.clock` says, never less than the frame numbers account for; a break where time stamps
    go back or the step is longer than `lost_s` (or `max_step_frames` frame times, if longer).

    Example:
        >>> from types import SimpleNamespace as F
        >>> clock = StreamClock(fps=10, lost_s=1.0, max_step_frames=10)
        >>> clock.step(None, F(index=0, pts=5.0, clock=0.0))
        (0.0, False)
        >>> clock.step(0, F(index=1, pts=5.25, clock=0.3))   # the time stamps' step
        (0.25, False)
        >>> clock.step(1, F(index=2, pts=0.0, clock=0.5))    # time stamps went back: a break
        (0.2, True)
    """

    def __init__(self, fps: float, lost_s: float, max_step_frames: int):
        self.fps, self.lost_s, self.max_step_frames = fps, lost_s, max_step_frames
        self._pts: float | None = None
        self._clock = 0.0

    def step(self, previous: int | None, frame) -> tuple[float, bool]:
        """Seconds from the frame numbered `previous` (None: `frame` is the stream's first, 0.0) to
        `frame`, and whether the stream broke between them; `frame` is then the last one seen."""
        dt, broke = 0.0, False
        if previous is not None:
            by_index = max(1, frame.index - previous) / self.fps
            stamped, restarted = None, False
            if frame.pts is not None and self._pts is not None:
                moved = frame.pts - self._pts
                if 0 < moved <= self.max_step_frames * by_index:
                    stamped = moved
                restarted = moved < 0
            dt = stamped if stamped is not None else max(by_index, frame.clock - self._clock)
            broke = restarted or dt > max(self.lost_s, self.max_step_frames / self.fps)
        self._pts, self._clock = frame.pts, frame.clock
        return dt, broke

