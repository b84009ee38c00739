"""The HTTP server of a run, on 127.0.0.1 by default: `/metrics` (Prometheus, streamlens/http/metrics.py),
`/healthz`, and the live page at `/` with the JSON API behind it (streamlens/http/api.py;
`runtime.http.page: false` leaves the first two). Who may ask what: streamlens/http/auth.py.

`/healthz` answers JSON: `{"state": "running", "streams": {"cam1": "running"}}`, with HTTP 200 while
the pipeline is `running` or `degraded` (a stream stalled, reconnecting or failed) and 503 while it
is `starting` or `stopping`. It asks for no token (its Host is checked as every request's is).

The library: aiohttp's web server, at its low level (`aiohttp.web.Server`: a request handler, no
application or router; the routes are a handful of paths, dispatched in api.py). Chosen over uvicorn
with Starlette because it runs inside the pipeline's process on an event loop the server owns, on a
thread of its own, with no signal handling or process model to turn off; because it bounds a
request's head itself (`max_line_size`, `max_field_size`, `max_headers`: 400 or 431 past them) and
its connection manager (`Server.connection_made`/`connection_lost`) and connection handler
(`RequestHandler`, an asyncio protocol) are public, which is where the number of connections is
bounded and each request head given its deadline. It is well kept, packaged by Debian and on PyPI,
and works without its compiled parts.

Limits, so that no client costs more than a socket and a little memory, and no number of them costs
the pipeline a thread or a file descriptor it needs:

- No thread per client: one event loop on the thread `http` parses, checks the Host and the token,
  and writes; whatever reads the run's figures or frames (a scrape, the JSON, a JPEG encoded) runs
  on `WORKER_THREADS` threads of a pool, so the loop is never held for long. Until a connection's
  first request head is whole it is a small `_Gate` (its bytes kept, no aiohttp handler or task
  made), so a flood of slow clients costs little CPU.
- At most `MAX_CONNECTIONS` connections at once. One more closes the connection that has waited
  longest without a whole request head in (idle between requests, or still sending its head); only
  when every connection has a request in hand is the newcomer closed instead. A flood of slow
  clients therefore holds at most `MAX_CONNECTIONS` descriptors, and a scrape still gets in: its
  head is whole as it arrives, which marks it, so no burst of newcomers closes it.
- Connections not yet accepted wait in the kernel's queue (`LISTEN_QUEUE`, no descriptor of the
  run's), accepted `ACCEPT_BATCH` at a time: a burst of slow clients does not get a scrape refused.
- `HEAD_DEADLINE_S` for each request's head, from the connection's opening or from the answer
  before being handed over: a client that sends half a request and then a byte every few seconds is
  closed then (kept here rather than left to aiohttp's keep-alive timer, which only its newest
  releases start when a connection opens).
- The request line and each header at most `MAX_LINE` bytes, at most `MAX_HEADERS` headers. GET
  and HEAD are answered, and POST and DELETE on the routes that add and remove streams (405
  otherwise); a request's body is read only there, bounded in size and time (http/changes.py).
- A request path that is not UTF-8, or a route that fails, answers 400, 404 or a bare 500: never a
  Python error, and the log line (debug) names the path, never its query.

Over plain HTTP the token crosses the network in clear: beyond a trusted network, put a TLS proxy in
front, listen on 127.0.0.1 with `runtime.http.require_token: true`, and name the proxy's host in
`runtime.http.allowed_hosts`. Camera URLs are shown with their credentials masked, everywhere.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from ..errors import StreamlensError
from .api import HISTORY_EVERY_S, Api
from .auth import Guard
from .changes import ALLOW, add_stream, read_source, remove_stream, stream_named
from .metrics import Exposition, ServerCollector, health
from .reply import Reply, text_reply

if TYPE_CHECKING:
    from .run_view import RunView

log = logging.getLogger("streamlens.http")

#: the unit of the CPU times in /proc/self/task/*/stat (`MetricsServer.cpu_seconds`)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: connections held at once (see the module)
MAX_CONNECTIONS = 256
#: seconds each request's head has, from the connection's opening or the end of the answer before
HEAD_DEADLINE_S = 10.0
#: the longest request line or header, in bytes, and the most headers in a request
MAX_LINE, MAX_HEADERS = 8190, 64
#: threads that read the run for the answers (a scrape, the JSON, JPEGs)
WORKER_THREADS = 2
#: connections accepted at a time (asyncio's batch), and the kernel's queue of connections not yet
#: accepted (no descriptor of the run's until accepted; the kernel caps it at net.core.somaxconn):
#: long, so that a burst of slow clients does not fill it and have a scrape refused
ACCEPT_BATCH, LISTEN_QUEUE = 128, 4096
#: seconds `close()` gives answers in hand to finish
CLOSE_S = 2.0


class _Connections:
    """The connections open now, the longest idle first, at most `limit`, each given `deadline_s` for
    its next request head (see the module). Used on the event loop only."""

    def __init__(self, limit: int, deadline_s: float):
        self.limit, self.deadline_s = limit, deadline_s
        self._open: OrderedDict = OrderedDict()  # RequestHandler -> its transport
        self._heard: set = set()  # a request head came in whole: not closed for room
        self._busy: set = set()  # a request is being answered: not closed for room or time
        self._timers: dict = {}  # RequestHandler -> the asyncio.TimerHandle of its deadline
        #: connections closed to keep the bound, and for sending no whole head in time
        self.closed_over_limit = self.closed_late = 0

    @property
    def open_now(self) -> int:
        return len(self._open)

    def opened(self, handler, transport) -> None:
        self._open[handler] = transport
        while len(self._open) > self.limit:
            victim = next((h for h in self._open if h not in self._busy and h not in self._heard), handler)
            self._open.pop(victim).abort()  # the descriptor goes now, not after a goodbye
            self.closed_over_limit += 1
            if victim is handler:
                return
        self._arm(handler)

    def closed(self, handler) -> None:
        self._open.pop(handler, None)
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
        self._busy.add(handler)
        self._disarm(handler)

    def idle(self, handler) -> None:
        """`handler`'s answer is handed over: its next head has `deadline_s` from now."""
        self._busy.discard(handler)
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
    """aiohttp's handler of one connection, which tells the `_Connections` as soon as a request's
    head has come in whole (its blank line), before aiohttp hands it on: from then on the connection
    is no slow client's, and a burst of new ones does not close it."""

    tracked: _Connections | None = None
    _tail = b""

    def data_received(self, data: bytes) -> None:
        if self.tracked is not None and (b"\r\n\r\n" in data or b"\r\n\r\n" in self._tail + data[:3]):
            self.tracked.heard(self)
        self._tail = data[-3:]
        super().data_received(data)


class _Gate(asyncio.Protocol):
    """A connection until its first request head is whole (its blank line, or more than `GATE_BYTES`,
    which aiohttp then refuses): only then is aiohttp's handler made for it (`_Server.promote`). A slow
    client that never sends a whole head costs this small object and its bytes, not a handler and
    its task: a flood of them costs the server a fraction of the CPU."""

    __slots__ = ("server", "transport", "head", "promoted")

    def __init__(self, server: _Server):
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


class _Server(web.Server):
    """aiohttp's low-level server, its connections counted in a `_Connections`, each behind a `_Gate`
    until its first request head is whole."""

    def __init__(self, handler, connections: _Connections, **kwargs):
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


class _ServerLog:
    """What aiohttp's connection handler would log (a malformed request, a handler that failed), as
    one debug line of ours: what happened and the exception's type, never its text, which for a
    malformed request is the request line, query and all."""

    def debug(self, msg: str, *args, exc_info=None, **_) -> None:
        what = f" ({type(exc_info).__name__})" if isinstance(exc_info, BaseException) else ""
        log.debug("http: %s%s", msg % args if args else msg, what)

    exception = warning = error = info = debug


def _http_config(pipeline: RunView):
    """The pipeline's `runtime.http` section (defaults where it has none)."""
    from ..config.model import HttpConfig

    runtime = getattr(getattr(pipeline, "config", None), "runtime", None)
    return getattr(runtime, "http", None) or HttpConfig()


def _response(reply: Reply) -> web.Response:
    headers = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
    if reply.ctype.startswith(("application/json", "image/")) or reply.code == 204:
        headers["Cache-Control"] = "no-store"
    headers.update(reply.headers)
    if reply.code in (204, 304):
        return web.Response(status=reply.code, headers=headers)
    headers["Content-Type"] = reply.ctype
    return web.Response(status=reply.code, body=reply.body, headers=headers)


def _shown(path: str) -> str:
    """`path` fit for a log line: printable ASCII, at most 200 characters (never the query)."""
    return path.encode("ascii", "backslashreplace").decode()[:200]


class MetricsServer:
    """Serves `/metrics`, `/healthz`, and the live page and its API (`runtime.http.page`), for one
    run (a `RunView`) on a thread of its own; see the module's docstring for the limits and
    streamlens/http/auth.py for the Host and the token.

    `port=0` picks a free port (read `.port` after `start()`); `close()` ends it.

        server = MetricsServer(pipeline, "127.0.0.1", 0)
        server.start()
        ...  # http://127.0.0.1:{server.port}/metrics
        server.close()
    """

    def __init__(self, pipeline: RunView, host: str = "127.0.0.1", port: int = 9464):
        self.pipeline = pipeline
        self.host, self.port = host, port
        http = _http_config(pipeline)
        self.token_env = http.token_env
        self.guard = Guard(host, port, list(http.allowed_hosts), http.require_token, http.token_env)
        self.connections = _Connections(MAX_CONNECTIONS, HEAD_DEADLINE_S)
        self._threads: dict[int, float] = {}  # the server's threads (kernel ids) -> CPU seconds last read
        self.exposition = Exposition(pipeline, ServerCollector(self.connections, self.cpu_seconds))
        self._api = Api(pipeline, http.preview_fps) if http.page else None
        self.manage = http.manage  # streams added and removed over HTTP (http/changes.py)
        self._pool: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.ServerRunner | None = None
        self._thread: threading.Thread | None = None

    # -- answering ------------------------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.Response:
        handler = request.protocol
        self.connections.busy(handler)
        try:
            reply = await self._answer(request)
        except Exception:  # noqa: BLE001 - one request fails, never the server
            log.debug("http %s %s failed", request.method, _shown(request.path), exc_info=True)
            reply = text_reply(500, "internal error")
        finally:
            self.connections.idle(handler)
        return _response(reply)

    async def _off_loop(self, fn, *args) -> Reply:
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))

    async def _answer(self, request: web.BaseRequest) -> Reply:
        changes = request.method in ("POST", "DELETE")
        if request.method not in ("GET", "HEAD") and not changes:
            return text_reply(405, "method not allowed: this server answers GET and HEAD, and changes streams "
                                   "with POST /api/streams and DELETE /api/streams/<name>", {"Allow": ALLOW})
        headers = request.headers
        refused = self.guard.refused_host(headers)
        if refused is not None:
            return refused
        path = request.path
        if path == "/healthz":
            return health(self.pipeline)
        query = {key: request.query.getall(key) for key in dict.fromkeys(request.query.keys())}
        refused = self.guard.authenticate(headers, query, request.rel_url, request.remote or "")
        if refused is not None:
            return refused
        if changes:
            return await self._change(request, path)
        if path == "/metrics":
            return await self._off_loop(self.exposition.reply, request.query_string, headers.get("Accept", ""),
                                        headers.get("Accept-Encoding", ""))
        if self._api is None:
            return text_reply(404, "not found: try /metrics or /healthz")
        return await self._off_loop(self._api.route, path, query, request.remote or "")

    async def _change(self, request: web.BaseRequest, path: str) -> Reply:
        """`POST /api/streams` and `DELETE /api/streams/<name>` (http/changes.py)."""
        name = stream_named(path) if request.method == "DELETE" else None
        if not (request.method == "POST" and path == "/api/streams" or name is not None) or self._api is None:
            return text_reply(405, "method not allowed: POST /api/streams adds a stream, DELETE "
                                   "/api/streams/<name> removes one; everything else answers GET and HEAD",
                              {"Allow": ALLOW})
        if not self.manage or not hasattr(self.pipeline, "add_stream"):
            return text_reply(403, "streams are not changed over HTTP in this run (runtime.http.manage: false)")
        if name is not None:
            return await self._off_loop(remove_stream, self.pipeline, name)
        data = await read_source(request)
        if isinstance(data, Reply):
            return data
        return await self._off_loop(add_stream, self.pipeline, data)

    async def _sample_history(self) -> None:
        while True:
            await asyncio.sleep(HISTORY_EVERY_S)
            try:
                self._api.history.sample()
            except Exception:  # noqa: BLE001 - a figure missed now is taken again in a second
                log.debug("latency history", exc_info=True)

    # -- starting and ending --------------------------------------------------------------------

    def _listen(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            return socket.create_server((self.host.strip("[]"), self.port), family=family, backlog=LISTEN_QUEUE)
        except OSError as e:
            raise StreamlensError(f"http.port: cannot listen on {self.host}:{self.port}: "
                                  f"{e.strerror or e}") from None

    async def _open(self, sock: socket.socket) -> None:
        server = _Server(self._handle, self.connections, access_log=None, logger=_ServerLog(),
                         keepalive_timeout=HEAD_DEADLINE_S,
                         max_line_size=MAX_LINE, max_field_size=MAX_LINE, max_headers=MAX_HEADERS,
                         lingering_time=1.0)
        self._runner = web.ServerRunner(server, shutdown_timeout=CLOSE_S)
        await self._runner.setup()
        await web.SockSite(self._runner, sock, backlog=ACCEPT_BATCH).start()
        sock.listen(LISTEN_QUEUE)  # asyncio listened with its batch: the queue is longer
        if self._api is not None:
            asyncio.get_running_loop().create_task(self._sample_history(), name="http-history")

    def _serve(self, sock: socket.socket, started: threading.Event, failed: list) -> None:
        self._mine()
        loop = self._loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._open(sock))
        except BaseException as error:  # noqa: BLE001 - told to start(), which raises it
            failed.append(error)
            sock.close()
            loop.close()
            started.set()
            return
        started.set()
        try:
            loop.run_forever()
        finally:
            try:
                self.connections.abort_all()  # those still behind their gate too: aiohttp knows only its own
                loop.run_until_complete(self._runner.cleanup())
                for task in asyncio.all_tasks(loop):
                    task.cancel()
                loop.run_until_complete(asyncio.sleep(0))
            except Exception:  # noqa: BLE001 - ending: nothing left to tell
                log.debug("closing the HTTP server", exc_info=True)
            loop.close()

    def _mine(self) -> None:
        """Count the calling thread's CPU time as the server's."""
        self._threads[threading.get_native_id()] = 0.0

    def cpu_seconds(self) -> float | None:
        """CPU time the server's threads (the event loop and the pool) have used, read from /proc
        (None where there is none); a thread that has ended keeps its last figure."""
        for tid in list(self._threads):
            try:
                stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            except OSError:
                if not Path("/proc/self/task").is_dir():
                    return None
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            self._threads[tid] = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
        return sum(self._threads.values())

    def start(self) -> None:
        """Read the token (a `StreamlensError` of one line when one is needed and unset or short),
        listen, and serve on the thread `http`."""
        self.guard.read_token()
        sock = self._listen()
        self.port = sock.getsockname()[1]
        self.guard.set_port(self.port)
        self._pool = ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="http-worker", initializer=self._mine)
        started, failed = threading.Event(), []
        self._thread = threading.Thread(target=self._serve, args=(sock, started, failed), name="http", daemon=True)
        self._thread.start()
        started.wait()
        if failed:
            self._pool.shutdown(wait=False)
            raise StreamlensError(f"http.port: cannot serve on {self.host}:{self.port}: {failed[0]}")

    def close(self) -> None:
        """Stop listening, give the answers in hand `CLOSE_S` to finish, and end the thread."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CLOSE_S + 5)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
