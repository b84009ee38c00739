"""Which frames the detector sees: a per-stream keyframe schedule.

A fixed `interval` runs the detector on every N-th frame of a stream; `offset` staggers streams so
their keyframes do not all land on the same tick and pile up in the detector.

Example:
    >>> s = KeyframeScheduler(interval=3, offset=1)
    >>> [s.is_keyframe() for _ in range(8)]
    [True, True, False, False, True, False, False, True]
"""

from __future__ import annotations


class KeyframeScheduler:
    """Decides, frame by frame, whether the detector runs. The first frame of a stream always
    is a keyframe (a tracker knows nothing before it); the next one is frame `offset` (when
    non-zero), and from there every `interval`-th frame."""

    def __init__(self, interval: int = 1, offset: int = 0):
        if interval < 1:
            raise ValueError("interval must be >= 1")
        self.interval = interval
        self._countdown = 0  # frames until the next keyframe
        self._offset = offset % interval

    def is_keyframe(self) -> bool:
        """Call once per frame, in order."""
        if self._countdown == 0:
            self._countdown = self.interval - 1
            if self._offset:  # the first keyframe is shifted only once
                self._countdown, self._offset = self._offset - 1, 0
            return True
        self._countdown -= 1
        return False


def stagger_offsets(interval: int, streams: int) -> list[int]:
    """Offsets that spread `streams` keyframe schedules evenly over one interval."""
    return [(i * interval) // max(streams, 1) for i in range(streams)]
