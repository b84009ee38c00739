"""What every source is: something that yields `Frame`s of one named stream until it ends or is stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from ..frame import Frame


class Source:
    """A stream of decoded frames. The runtime runs `frames()` on a thread of its own.

    `frames(stop)` yields frames in order until the input ends or `stop` is set, then returns;
    it raises `SourceError` (one clear line naming the input) when the input cannot be read.
    `close()` releases what the source holds; it is safe to call twice.
    """

    name: str
    #: frames the stream will produce, when known in advance (a file played once), else None
    total_frames: int | None = None
    #: the stream's nominal frame rate, when known
    fps: float | None = None
    #: why the input ended before its end (a truncated file, a read error), once `frames()` has
    #: ended; None when it ended whole, was stopped, or has not ended
    incomplete: str | None = None
    #: told each state of the source (a camera's: streaming, reconnecting, ...) as `on_state(name,
    #: state)`, when set (by the runtime, before `frames()`)
    on_state: Callable[[str, str], None] | None = None
    #: whether it gives up frames for the budget controller where it decodes them: then the runtime
    #: sets `thin` (the stream's `Shedder`) before `frames()`; `thins_here`: asked on the graph's
    #: thread (else a decode worker has the share)
    thins: bool = False
    thin = None
    thins_here: bool = False

    def stats(self) -> dict:
        """Figures of its own for the stream's `stats` message (a camera's reconnects and last
        error, its URL masked); none by default."""
        return {}

    def losses(self) -> dict[str, int]:
        """What this source lost so far, by cause, counted since it was made: `corrupt` (packets the
        decoder rejected), `decoder` (frames a decode worker dropped, its ring full), `stale` (frames
        too old when they reached the source's reader). Causes that cannot happen are left out."""
        return {}

    def frames(self, stop: threading.Event) -> Iterator[Frame]:
        raise NotImplementedError

    def clip(self, start_s: float, end_s: float, path: str, index: int = -1) -> bool:
        """Record a clip of the stream's own packets from `start_s` to `end_s` (frames' `pts`) into
        `path` (`analytics.clips`; any thread, never waits); `index`: the event's frame. False when
        this source records none."""
        return False

    def clip_outcomes(self) -> list:
        """What became of the clips asked of it since last asked (the engine's thread): each a
        `protocol.ClipDone` (path, reason: None when written, else why it is lost; refused)."""
        return []

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
