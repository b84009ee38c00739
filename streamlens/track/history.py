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
