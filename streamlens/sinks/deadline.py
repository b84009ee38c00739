"""A whole-request deadline for `requests`: what the webhook sink posts with.

`requests`' timeouts bound each wait on the socket, not the request: an endpoint that trickles its
answer (a byte of its status line every few seconds) keeps a request going for ever. `DeadlineSession`
is a `requests.Session` whose connections are cut when a request runs past its deadline: the adapter's
connection classes keep every socket they open, and a timer shuts them down at the deadline; the
blocked read then fails, and `post()` raises `Overdue`. Not cut: a TLS handshake in progress (its
reads are bounded one by one by the timeout) and a request through a proxy (`HTTPS_PROXY`), whose
connections are the proxy manager's.

One request at a time per session (the webhook's single worker thread): the deadline cuts every socket
the session holds, idle keep-alive ones included (they are opened again on need).

Example (a server that never answers):
    >>> import socket
    >>> server = socket.create_server(("127.0.0.1", 0))
    >>> session = DeadlineSession()
    >>> try:
    ...     session.post(f"http://127.0.0.1:{server.getsockname()[1]}/", data=b"{}", deadline_s=0.2)
    ... except Overdue as e:
    ...     print(e)
    no answer within 0.2 s
    >>> session.close(); server.close()
"""

from __future__ import annotations

import socket
import threading
import time
import weakref

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool


class Overdue(requests.Timeout):
    """A request cut at its deadline."""


class _Sockets:
    """The sockets a session's connections opened (weakly held), and cutting them all."""

    def __init__(self):
        self._lock = threading.Lock()
        self._open: weakref.WeakSet[socket.socket] = weakref.WeakSet()

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)

    def cut(self) -> None:
        with self._lock:
            found = list(self._open)
        for sock in found:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a read blocked on it, in any thread
            except OSError:
                pass  # closed meanwhile


def _adapter(sockets: _Sockets) -> HTTPAdapter:
    """An adapter whose HTTP and HTTPS pools open their sockets through `sockets`."""

    def kept(base):
        class Kept(base):
            def _new_conn(self):  # urllib3 2.x: the plain socket, while connecting
                sock = super()._new_conn()
                sockets.add(sock)
                return sock

            def connect(self):  # then the one requests use (TLS wraps the plain one in a new object)
                super().connect()
                sockets.add(self.sock)
        return Kept

    pools = {"http": type("Pool", (HTTPConnectionPool,), {"ConnectionCls": kept(HTTPConnection)}),
             "https": type("Pool", (HTTPSConnectionPool,), {"ConnectionCls": kept(HTTPSConnection)})}

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

    return Adapter()


class DeadlineSession(requests.Session):
    """A `requests.Session` whose `post(..., deadline_s=S)` ends within S seconds (plus a thread's
    wake-up), raising `Overdue`, whatever the server does. Of the answer's body at most `BODY_KEPT`
    bytes are read, within the deadline: a short one (an endpoint's "ok") leaves the connection
    to be used again; a longer one is not read further, and its connection is closed."""

    #: the most of an answer's body read so that its connection may be kept
    BODY_KEPT = 64 * 1024

    def __init__(self):
        super().__init__()
        self._sockets = _Sockets()
        adapter = _adapter(self._sockets)
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    def post(self, url, data=None, json=None, *, deadline_s: float, **kwargs):  # noqa: D417
        cut = threading.Event()

        def overdue() -> None:
            cut.set()
            self._sockets.cut()

        timer = threading.Timer(deadline_s, overdue)
        timer.daemon = True
        started = time.monotonic()
        timer.start()
        try:
            # each read may wait past the deadline: the cut, not a read's own timeout, ends a slow answer
            kwargs.setdefault("timeout", (deadline_s, deadline_s + 1.0))
            answer = super().post(url, data=data, json=json, stream=True, **kwargs)
            try:
                body = answer.raw.read(self.BODY_KEPT + 1, decode_content=False)
            except Exception:  # noqa: BLE001 - a body cut short: the answer's status stands
                body = None
            if body is not None and len(body) <= self.BODY_KEPT and answer.raw.read(1) == b"":
                answer.raw.release_conn()  # read to its end: the connection goes back to the pool
            else:
                answer.close()
            return answer
        except requests.ConnectTimeout:
            raise
        except requests.RequestException:
            if cut.is_set() or time.monotonic() - started >= deadline_s:
                raise Overdue(f"no answer within {deadline_s:g} s") from None
            raise
        finally:
            timer.cancel()


__all__ = ["DeadlineSession", "Overdue"]
