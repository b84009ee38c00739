"""Files of one `reid.across` group, taken in the order of their media time.

Cameras of a group reach the reid stage together: each is paced by its own clock. Files read as
files are not: each is decoded as fast as it goes, so one may be a second ahead of another, and
which of the group's results the linker (streamlens/reid/links.py) sees first would depend on how
fast each decoded on that run. For a group whose clock is `media` and whose streams are all files,
`MediaOrder` makes the engine take their frames as a merge by media time: a frame is admitted
(graph/admit.py) only when every earlier frame of the group has been published, and when it is the
earliest of the frames the group's streams have waiting (ties go to the stream named first in
`across`). The group's results then reach the result stages in one order, the same on every run,
as if the files were cameras that started together. It costs the group's overlap: one of its
frames is with the engine (or the detector) at a time.

A stream of the group that has not joined, or has ended, is not waited for. A wait ends when the
stream is stopped.

Example:
    >>> import numpy as np
    >>> order, going = MediaOrder(["a", "b"]), threading.Event()
    >>> order.joined("a"), order.joined("b"), order.ended("b")   # b ended: a is not held for it
    (None, None, None)
    >>> order.take_turn(Frame("a", 0, 0.0, 0.0, np.zeros((2, 2, 3), np.uint8)), going)
    >>> order.published("a")
"""

from __future__ import annotations

import threading

from ..frame import Frame, MediaClock

#: how long one wait lasts before the stop is looked at again (seconds)
WAIT_STEP_S = 0.1


class MediaOrder:
    """One group's merge by media time (see the module's docstring). `streams`: the group's names,
    in `across`' order (the order of ties). Admission calls `take_turn` on a stream's own thread; the
    engine calls `published` after each of the group's results and `ended` when a stream ends."""

    def __init__(self, streams: list[str]):
        self._rank = {name: i for i, name in enumerate(streams)}
        self._cond = threading.Condition()
        self._open: set[str] = set()  # streams joined and not ended
        self._waiting: dict[str, tuple[float, int]] = {}  # stream -> its next frame's (media time, rank)
        self._unpublished: dict[str, int] = {}  # stream -> frames admitted and not yet published
        self._clocks: dict[str, MediaClock] = {}

    def joined(self, stream: str) -> None:
        """A stream of the group starts (again): its frames are waited for from now on."""
        with self._cond:
            self._open.add(stream)
            self._clocks[stream] = MediaClock()
            self._unpublished[stream] = 0
            self._cond.notify_all()

    def take_turn(self, frame: Frame, stopped: threading.Event) -> None:
        """Wait until `frame` is the group's next (see the module's docstring), then count it as
        admitted. Returns at once when the stream is stopped."""
        stream = frame.stream
        with self._cond:
            if stream not in self._open:
                return
            # its media time as the lane's clock reads it (a frame without pts: its number)
            mine = (self._clocks[stream].at(frame.pts, frame.index), self._rank[stream])
            self._waiting[stream] = mine
            self._cond.notify_all()
            while not stopped.is_set() and not self._is_turn(stream, mine):
                self._cond.wait(WAIT_STEP_S)
            self._waiting.pop(stream, None)
            self._unpublished[stream] += 1
            self._cond.notify_all()

    def _is_turn(self, stream: str, mine: tuple[float, int]) -> bool:
        if any(self._unpublished[name] for name in self._open):
            return False
        return all(name == stream or (name in self._waiting and self._waiting[name] > mine) for name in self._open)

    def published(self, stream: str) -> None:
        """The engine published one of the stream's frames."""
        with self._cond:
            if self._unpublished.get(stream, 0) > 0:
                self._unpublished[stream] -= 1
                self._cond.notify_all()

    def ended(self, stream: str) -> None:
        """The stream ended (or was removed): the others no longer wait for it, nor for a frame of
        it that was admitted and never reached the engine."""
        with self._cond:
            self._open.discard(stream)
            self._waiting.pop(stream, None)
            self._unpublished.pop(stream, None)
            self._cond.notify_all()


def media_orders(cfg) -> dict[str, MediaOrder]:
    """A `MediaOrder` for each stream of a `reid.across` group that needs one (media clock, every
    source a file read as a file, not `runtime.mode: bulk`), by stream name; empty otherwise."""
    reid = cfg.reid
    if reid is None or not reid.across or cfg.runtime.mode == "bulk":
        return {}
    live = {source.name: bool(source.live) for source in cfg.sources}
    if any(live.get(name, False) for name in reid.across):
        return {}
    if reid.clock == "wall":
        return {}
    order = MediaOrder(list(reid.across))
    return {name: order for name in reid.across}


__all__ = ["MediaOrder", "media_orders"]
