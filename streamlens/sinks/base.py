"""What every sink is: one place results go. The runtime gives each sink a thread of its own, or
writes an `inline` one on the engine's thread."""

from __future__ import annotations

from typing import Any

from ..frame import FrameResult, StreamEnd


class Sink:
    """Takes results in order (per stream) and writes them somewhere.

    The runtime calls `open()` once before the first item, `write()` for each `FrameResult` and
    `StreamEnd` (and `StatsReport`, if `wants_stats`) with the schema-v1 message already built
    (`message`, and `payload`: the same as compact JSON bytes), and `close()` exactly once at the end, whatever the reason, so a sink must
    flush there. A sink raises `SinkError` with one clear line when it cannot write.
    """

    name: str = "sink"
    #: True for sinks that also want a `StatsReport` about each stream about once a second
    wants_stats: bool = False
    #: True for a sink whose `write` never waits and costs little (a ZeroMQ publisher): the runtime
    #: then calls it on the engine's thread, one thread hop less per frame, under a lock of its own
    #: (stats come from another thread); the others get a thread and a queue each
    inline: bool = False

    def open(self) -> None:
        pass

    def interrupt_open(self) -> None:
        """Called from another thread (Ctrl-C) while `open()` waits, e.g. for subscribers: end the
        wait soon. The default does nothing: most sinks do not wait."""

    def write(self, item: FrameResult | StreamEnd, message: dict[str, Any], payload: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass
