"""What every sink is: one place results go. The runtime gives each sink a thread of its own, or
writes an `inline` one on the engine's thread."""

from __future__ import annotations

from typing import Any

from ..frame import FrameResult, StreamEnd


def os_reason(error: OSError) -> str:
    """Why a file operation failed, in words (`No space left on device`); a file standing where a
    folder is to be made reads `a file is in the way of a folder`."""
    if isinstance(error, FileExistsError):
        return "a file is in the way of a folder"
    return error.strerror or str(error)


class Sink:
    """Takes results in order (per stream) and writes them somewhere.

    The runtime calls `open()` once before the first item, `write()` for each `FrameResult` and
    `StreamEnd` (and `StatsReport`, if `wants_stats`) with the schema-v1 message already built
    (`message`, and `payload`: the same as compact JSON bytes), and `close()` exactly once at the
    end, whatever the reason, so a sink must flush there; `close()` returns in bounded time (a sink
    that lingers for a peer bounds and documents how long). A sink raises `SinkError` with one
    clear line when it cannot open or write, naming its entry of the pipeline file when it has one
    (`where`: `sinks[1].path: cannot open ...`). `open()` checks what can be checked before the
    first frame (that output files can be made), so such mistakes end the run at its start.
    """

    name: str = "sink"
    #: True for sinks that also want a `StatsReport` about each stream about once a second
    wants_stats: bool = False
    #: True for a sink whose `write` never waits and costs little (a ZeroMQ publisher): the runtime
    #: then calls it on the engine's thread, one thread hop less per frame, under a lock of its own
    #: (stats come from another thread); the others get a thread and a queue each
    inline: bool = False
    #: the sink's entry in the pipeline file (`sinks[1]`), named in its errors; None when made in code
    where: str | None = None

    def key(self, name: str) -> str:
        """How an error names this sink's key `name`: `sinks[1].path` for a sink of a pipeline
        file, else the sink's kind (`video sink`)."""
        return f"{self.where}.{name}" if self.where else f"{self.name} sink"

    def open(self) -> None:
        pass

    def interrupt_open(self) -> None:
        """Called from another thread (Ctrl-C) while `open()` waits, e.g. for subscribers: end the
        wait soon. The default does nothing: most sinks do not wait."""

    def interrupt(self) -> None:
        """Called from another thread when the run is aborted (a second Ctrl-C): a `write()` or
        `open()` that waits should give up soon (what a write gives up is counted in `drops()`),
        and `close()` should not linger; what is already in hand is still flushed. The default
        ends an `open()` that waits."""
        self.interrupt_open()

    def drops(self) -> dict[str, int]:
        """Messages this sink has dropped so far, per stream: never delivered (a push consumer that
        took nothing for `send_timeout_s`, an interrupted write). Empty for sinks that never drop.
        Safe to call from any thread."""
        return {}

    #: where it listens, for a sink that others connect to (a zmq sink's bound endpoint), else None
    endpoint: str | None = None
    #: each stream's frame rate, for a sink that encodes each stream at its own rate (None: it does not)
    stream_fps: dict | None = None

    def stream_added(self, stream: str, fps: float | None) -> None:
        """A stream added while running, at `fps` frames a second (None: unknown): a sink that encodes
        each stream at its own rate (`stream_fps`) keeps it."""
        if fps and self.stream_fps is not None:
            self.stream_fps[stream] = fps

    def refusals(self) -> dict[str, int]:
        """Peers refused or disconnected, by reason (a sink that others connect to; see
        streamlens/wire/peers.py). Others: none."""
        return {}

    def write(self, item: FrameResult | StreamEnd, message: dict[str, Any], payload: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass
