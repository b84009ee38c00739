"""The HTTP server's connections (server.py): how many are held, which is closed to make room, and
the deadline of each request's head.

`Connections` knows each open connection's state: idle (between requests, or still sending its
head), heard (its head whole), busy (its request answered), or reading (its request in hand, its
body still coming: `POST /api/streams`). At most `limit` are held; one more closes, to make room,
the connection idle longest, else the one that has been reading its body longest, else the newcomer
itself. A request whose body has not come whole is not busy answering: a flood of stuck bodies
therefore never keeps a scrape out, which is closed only when every connection has a request it is
answering.

Until a connection's first request head is whole it is a small `_Gate` (its bytes kept, no aiohttp
handler or task made): a flood of slow clients costs little CPU. Used on the server's event loop only.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from aiohttp import web


class Connections:
    """The connections open now, the longest idle first, at most `limit`, each given `deadline_s` for
    its next request head (see the module). Used on the event loop only."""

    def __init__(self, limit: int, deadline_s: float):
        self.limit, self.deadline_s = limit, deadline_s
        self._open: OrderedDict = OrderedDict()  # RequestHandler -> its transport
        self._heard: set = set()  # a request head came in whole: not closed for room
        self._busy: set = set()  # a request is being answered: not closed for room or time
        self._reading: OrderedDict = OrderedDict()  # a request's body is coming: closed for room, stalest first
        self._timers: dict = {}  # RequestHandler -> the asyncio.TimerHandle of its deadline
        #: connections closed to keep the bound, and for sending no whole head in time
        self.closed_over_limit = self.closed_late = 0

    @property
    def open_now(self) -> int:
        return len(self._open)

    def opened(self, handler, transport) -> None:
        self._open[handler] = transport
        while len(self._open) > self.limit:
            victim = next((h for h in self._open if h is not handler and h not in self._busy and h not in self._heard
                           and h not in self._reading), None) or next(iter(self._reading), handler)
            self._reading.pop(victim, None)
            self._open.pop(victim).abort()  # the descriptor goes now, not after a goodbye
            self.closed_over_limit += 1
            if victim is handler:
                return
        self._arm(handler)

    def closed(self, handler) -> None:
        self._open.pop(handler, None)
        self._reading.pop(handler, None)
        self._heard.discard(handler)
        self._busy.discard(handler)
        self._disarm(handler)

    def promote(self, gate, handler) -> None:
        """`gate`'s connection, its head whole, is `handler`'s from now on (heard: not closed for room)."""
        transport = self._open.pop(gate, None)
        self._disarm(gate)
        if transport is None:  # closed meanwhile
            return
        self._open[handler] = transport
        self._heard.add(handler)
        self._arm(handler)

    def abort_all(self) -> None:
        """Close every connection now (the server is ending)."""
        for transport in list(self._open.values()):
            transport.abort()

    def heard(self, handler) -> None:
        """A request head came in whole on `handler`: it is no longer closed for room (it still is
        if no request is answered before its deadline: a blank line is no request)."""
        self._heard.add(handler)

    def busy(self, handler) -> None:
        """`handler`'s request is being answered: it is closed neither for time nor for room."""
        self._reading.pop(handler, None)
        self._busy.add(handler)
        self._disarm(handler)

    def reading(self, handler) -> None:
        """`handler`'s request waits for its body (which has its own deadline): until `busy()` it
        may be closed for room, the one reading longest first."""
        self._busy.discard(handler)
        self._reading[handler] = True

    def idle(self, handler) -> None:
        """`handler`'s answer is handed over: its next head has `deadline_s` from now."""
        self._busy.discard(handler)
        self._reading.pop(handler, None)
        self._heard.discard(handler)
        if handler in self._open:
            self._open.move_to_end(handler)
            self._arm(handler)

    def _arm(self, handler) -> None:
        self._disarm(handler)
        self._timers[handler] = asyncio.get_running_loop().call_later(self.deadline_s, self._expire, handler)

    def _disarm(self, handler) -> None:
        timer = self._timers.pop(handler, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, handler) -> None:
        self._timers.pop(handler, None)
        transport = self._open.get(handler)
        if transport is not None and handler not in self._busy:
            transport.abort()
            self.closed_late += 1

    def __len__(self) -> int:
        return len(self._open)


class _Handler(web.RequestHandler):
    """aiohttp's handler of one connection, which tells the `Connections` as soon as a request's
    head has come in whole (its blank line), before aiohttp hands it on: from then on the connection
    is no slow client's, and a burst of new ones does not close it."""

    tracked: Connections | None = None
    _tail = b""

    def data_received(self, data: bytes) -> None:
        if self.tracked is not None and (b"\r\n\r\n" in data or b"\r\n\r\n" in self._tail + data[:3]):
            self.tracked.heard(self)
        self._tail = data[-3:]
        super().data_received(data)


class _Gate(asyncio.Protocol):
    """A connection until its first request head is whole (its blank line, or more than `GATE_BYTES`,
    which aiohttp then refuses): only then is aiohttp's handler made for it (`GatedServer.promote`). A slow
    client that never sends a whole head costs this small object and its bytes, not a handler and
    its task: a flood of them costs the server a fraction of the CPU."""

    __slots__ = ("server", "transport", "head", "promoted")

    def __init__(self, server: GatedServer):
        self.server, self.transport, self.head, self.promoted = server, None, b"", False

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server.tracked.opened(self, transport)

    def data_received(self, data: bytes) -> None:
        self.head += data
        if b"\r\n\r\n" in self.head[-len(data) - 3:] or len(self.head) > GATE_BYTES:
            self.promoted = True
            self.server.promote(self)

    def eof_received(self) -> bool:
        return False  # the client is done before a whole head: close

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.promoted:
            self.server.tracked.closed(self)


#: the most a connection may send before its head is handed to aiohttp (which answers 400 past its limits)
GATE_BYTES = 16384


class GatedServer(web.Server):
    """aiohttp's low-level server, its connections counted in a `Connections`, each behind a `_Gate`
    until its first request head is whole."""

    def __init__(self, handler, connections: Connections, **kwargs):
        super().__init__(handler, **kwargs)
        self.tracked = connections
        self._handler_args = kwargs

    def __call__(self) -> _Gate:
        return _Gate(self)

    def promote(self, gate: _Gate) -> None:
        """Hand `gate`'s connection, and what it has read, to a new aiohttp handler."""
        handler = _Handler(self, loop=asyncio.get_running_loop(), **self._handler_args)
        handler.tracked = self.tracked
        self.tracked.promote(gate, handler)
        gate.transport.set_protocol(handler)
        handler.connection_made(gate.transport)
        handler.data_received(gate.head)
        gate.head = b""

    def connection_lost(self, handler, exc: BaseException | None = None) -> None:
        self.tracked.closed(handler)
        super().connection_lost(handler, exc)


__all__ = ["Connections", "GatedServer", "GATE_BYTES"]
