"""Slow HTTP clients for the tests and tools/bench_http_flood.py: `Flood(port, n)` keeps `n`
connections to 127.0.0.1:`port` that each send half a request (`HALF_REQUEST`) and then one byte
every `tick_s`, as the slow-client attack of issue 25 did; a connection the server closes is opened
again at its next turn. It runs on one thread of the caller's process (non-blocking sockets, no
thread per client), which needs a descriptor per client: raise RLIMIT_NOFILE first.

Example:
    >>> with Flood(port, 2000) as flood:          # doctest: +SKIP
    ...     time.sleep(10)
    >>> flood.opened, flood.closed_by_server      # doctest: +SKIP
"""

from __future__ import annotations

import errno
import socket
import threading

HALF_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
#: a POST whose body never comes whole: its head says 100 bytes, one comes (issue 45's stuck bodies)
STUCK_BODY = (b"POST /api/streams HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n{")


class Flood:
    """`n` slow clients of 127.0.0.1:`port` on a thread: each connects, sends `HALF_REQUEST`, then one
    byte every `tick_s`; one the server closed connects again at its next turn."""

    def __init__(self, port: int, n: int, tick_s: float = 3.0, first: bytes = HALF_REQUEST, trickle: bool = True):
        """`first`: what each client sends first (`HALF_REQUEST`, or `STUCK_BODY`); `trickle`: then a
        byte every `tick_s` (False: nothing more, the connection held open)."""
        self.address, self.n, self.tick_s = ("127.0.0.1", port), n, tick_s
        self.first, self.trickle = first, trickle
        self.opened = self.closed_by_server = self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flood", daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        sockets: list[socket.socket | None] = [None] * self.n
        started = [False] * self.n
        try:
            while not self._stop.is_set():
                for i in range(self.n):
                    s = sockets[i]
                    if s is None:
                        s = sockets[i] = socket.socket()
                        s.setblocking(False)
                        s.connect_ex(self.address)
                        started[i] = False
                        self.opened += 1
                        continue
                    try:
                        if not started[i]:
                            s.send(self.first)
                        elif self.trickle:
                            s.send(b"a")
                        else:
                            s.recv(1)  # only to hear a close (b"") or an answer
                            raise ConnectionResetError(errno.ECONNRESET, "closed")
                        started[i] = True
                    except BlockingIOError:
                        pass  # still connecting, or its buffer is full
                    except OSError as error:
                        if error.errno in (errno.ENOTCONN, errno.EINPROGRESS, errno.EALREADY):
                            continue
                        s.close()
                        sockets[i] = None
                        self.closed_by_server += 1
                self.ticks += 1
                self._stop.wait(self.tick_s)
        finally:
            for s in sockets:
                if s is not None:
                    s.close()
