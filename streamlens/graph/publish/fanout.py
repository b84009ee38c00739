"""The fan-out: each result serialised once (schema v1) and handed to every sink.

- A sink whose writes never wait (`Sink.inline`: a ZeroMQ publisher) is written on the caller's
  thread (the engine's): one thread hop less per frame. Every other sink has a bounded channel and a
  thread of its own, so a slow one holds up only its own queue.
- A frame's latency ends when the last sink has published it: `on_published(result, publish_ms)`
  is called then, on whichever thread that was.
- `stats` messages go only to the sinks that want them, and never wait: a busy sink's queue keeps
  only the newest.
- A sink that fails to write is closed (it flushes what it holds) and `on_error` is told; one that
  fails to close tells `on_close_error`. Neither stops the other sinks.

Example:
    >>> from streamlens.sinks import Sink
    >>> class Printer(Sink):
    ...     name, inline = "print", True
    ...     def write(self, item, message, payload): print(message["type"], message["stream"])
    >>> from streamlens.frame import StreamEnd
    >>> out = FanOut([Printer()], 8, on_published=lambda r, ms: None, on_error=print, on_close_error=print)
    >>> out.publish(StreamEnd("cam1", 0, 0, "end"))
    eos cam1
    >>> out.close()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ...frame import FrameResult, StatsReport, StreamEnd
from ...sinks import Sink
from ...wire.schema import dumps, message_for
from ..channel import Channel, ChannelClosed


class _InlineSink:
    """A sink written on the caller's thread, and its lock (stats come from another thread)."""

    __slots__ = ("sink", "lock", "open")

    def __init__(self, sink: Sink):
        self.sink = sink
        self.lock = threading.Lock()
        self.open = True


class FanOut:
    """Every sink of a pipeline (see the module's docstring). `threads()` are to be started by the
    owner; `close()` ends the queued sinks (they write what they hold, then close) and closes the
    inline ones."""

    def __init__(self, sinks: list[Sink], queue_size: int, *,
                 on_published: Callable[[FrameResult, float], None],
                 on_error: Callable[[BaseException], None], on_close_error: Callable[[BaseException], None]):
        self.on_published, self.on_error, self.on_close_error = on_published, on_error, on_close_error
        self._inline = [_InlineSink(s) for s in sinks if s.inline]
        self._queued = [s for s in sinks if not s.inline]
        self._channels = [Channel(queue_size, f"sink:{s.name}") for s in self._queued]
        self._unpublished: dict[int, list] = {}  # id(result) -> [sinks still to write it, handed at]
        self._lock = threading.Lock()

    @property
    def wants_stats(self) -> bool:
        """Whether any sink takes `stats` messages."""
        return any(sink.wants_stats for sink in self.sinks)

    @property
    def sinks(self) -> list[Sink]:
        return self._queued + [entry.sink for entry in self._inline]

    def refusals(self) -> dict[str, dict[str, int]]:
        """Peers each sink refused or disconnected, by its key path and the reason; those with any."""
        return {sink.where or sink.name: refused for sink in self.sinks if (refused := sink.refusals())}

    def threads(self) -> list[threading.Thread]:
        """One thread per queued sink, not started."""
        return [threading.Thread(target=self._run, args=(s, ch), name=f"sink-{s.name}", daemon=True)
                for s, ch in zip(self._queued, self._channels)]

    def publish(self, item: FrameResult | StreamEnd) -> None:
        """Hand a result or a stream's end to every sink; waits only for room in a queued sink's channel."""
        message = message_for(item)
        payload = dumps(message)
        result = isinstance(item, FrameResult)
        handed = time.perf_counter()
        if result and self._channels:  # the last sink to publish it ends its latency
            with self._lock:
                self._unpublished[id(item)] = [len(self._channels) + len(self._inline), handed]
        written = sum(self._write_inline(entry, item, message, payload) for entry in self._inline)
        if result and self._channels:
            for _ in range(written):
                self._written(item)
        elif result and written == len(self._inline):  # every sink is inline (or there is none): done now
            self.on_published(item, (time.perf_counter() - handed) * 1000)
        for ch in self._channels:
            ch.put((item, message, payload))

    def publish_stats(self, reports: list[StatsReport]) -> None:
        """Hand `stats` to the sinks that want them, never waiting on a busy one."""
        queued = [ch for sink, ch in zip(self._queued, self._channels) if sink.wants_stats]
        inline = [entry for entry in self._inline if entry.sink.wants_stats]
        if not (queued or inline):
            return
        for report in reports:
            message = message_for(report)
            payload = dumps(message)
            for ch in queued:
                ch.put((report, message, payload), key="stats", drop_oldest=True)
            for entry in inline:
                self._write_inline(entry, report, message, payload)

    def interrupt(self) -> None:
        """Wake every sink blocked in a write (an abort); each still flushes and closes."""
        for sink in self.sinks:
            sink.interrupt()

    def close_queues(self) -> None:
        """No more results: each queued sink writes what it holds, then closes."""
        for ch in self._channels:
            ch.close()

    def close(self) -> None:
        """`close_queues()`, and close the inline sinks now."""
        self.close_queues()
        for entry in self._inline:
            with entry.lock:
                if entry.open:
                    entry.open = False
                    self._close(entry.sink)

    def _write_inline(self, entry: _InlineSink, item, message: dict, payload: bytes) -> bool:
        with entry.lock:
            if not entry.open:
                return False
            try:
                entry.sink.write(item, message, payload)
                return True
            except BaseException as e:  # noqa: BLE001 - the run ends with it, as for a queued sink
                entry.open = False
                self.on_error(e)
                self._close(entry.sink)
                return False

    def _close(self, sink: Sink) -> None:
        try:
            sink.close()
        except BaseException as e:  # noqa: BLE001
            self.on_close_error(e)

    def _written(self, item: FrameResult) -> None:
        with self._lock:
            entry = self._unpublished.get(id(item))
            if entry is None:
                return
            entry[0] -= 1
            if entry[0] > 0:
                return
            del self._unpublished[id(item)]
            # under the lock: the sinks' threads end frames' latencies one at a time
            self.on_published(item, (time.perf_counter() - entry[1]) * 1000)

    def _run(self, sink: Sink, channel: Channel) -> None:
        try:
            while True:
                try:
                    item, message, payload = channel.get()
                except ChannelClosed:
                    break
                sink.write(item, message, payload)
                if isinstance(item, FrameResult):
                    self._written(item)
        except BaseException as e:  # noqa: BLE001
            self.on_error(e)  # the error first: the engine then finds this channel closed
            channel.close(discard=True)
        finally:
            self._close(sink)
