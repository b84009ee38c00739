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
  and writes; whatever reads the run's figures or frames runs on threads of its own, so the loop is
  never held for long and no client's work waits behind another kind's: the page and its API (the
  JSON, a JPEG encoded) on `WORKER_THREADS` threads, `/metrics` on one thread of its own, and the
  changes of streams (a new source probed, a file opened) on one more, at most `MAX_CHANGES` in
  hand (503 with `Retry-After` past them). `/healthz` is answered on the loop. Until a connection's
  first request head is whole it is a small gate (http/connections.py: its bytes kept, no aiohttp
  handler or task made), so a flood of slow clients costs little CPU.
- At most `MAX_CONNECTIONS` connections at once. One more closes the connection that has waited
  longest without a whole request head in (idle between requests, or still sending its head), else
  the one that has waited longest for its request's body (a request whose body has not come whole
  is not being answered); only when every connection has a request being answered is the newcomer
  closed instead. A flood of slow clients or of stuck bodies therefore holds at most
  `MAX_CONNECTIONS` descriptors, and a scrape still gets in: its head is whole as it arrives,
  which marks it, so no burst of newcomers closes it.
- Connections not yet accepted wait in the kernel's queue (`LISTEN_QUEUE`, no descriptor of the
  run's), accepted `ACCEPT_BATCH` at a time: a burst of slow clients does not get a scrape refused.
- `HEAD_DEADLINE_S` for each request's head, from the connection's opening or from the answer
  before being handed over: a client that sends half a request and then a byte every few seconds is
  closed then (kept here rather than left to aiohttp's keep-alive timer, which only its newest
  releases start when a connection opens).
- The request line and each header at most `MAX_LINE` bytes, at most `MAX_HEADERS` headers. GET
  and HEAD are answered, and POST and DELETE on the routes that add and remove streams and POST on
  `/api/search` (405 otherwise); a request's body is read only there, bounded in size and, whole,
  in time (http/changes.py, http/search.py). Searches run on one thread of their own, a few in
  hand per client (http/search.py).
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from ..errors import StreamlensError
from .api import HISTORY_EVERY_S, Api
from .auth import Guard
from .changes import ALLOW, add_stream, read_source, remove_stream, stream_named
from .connections import Connections, GatedServer
from .metrics import Exposition, ServerCollector, health
from .reply import Reply, text_reply
from .search import Searches, read_jpeg

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
#: threads that read the run for the answers (the JSON, JPEGs); a scrape has a thread of its own,
#: and so have the changes (`POST` and `DELETE /api/streams`: a source probed) and the searches
WORKER_THREADS = 2
#: changes of streams in hand at once (answered or waiting for their thread; not those reading their
#: body); one more is answered 503 with `Retry-After` at once
MAX_CHANGES = 32
#: connections accepted at a time (asyncio's batch), and the kernel's queue of connections not yet
#: accepted (no descriptor of the run's until accepted; the kernel caps it at net.core.somaxconn):
#: long, so that a burst of slow clients does not fill it and have a scrape refused
ACCEPT_BATCH, LISTEN_QUEUE = 128, 4096
#: seconds `close()` gives answers in hand to finish
CLOSE_S = 2.0


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
        self.connections = Connections(MAX_CONNECTIONS, HEAD_DEADLINE_S)
        self._threads: dict[int, float] = {}  # the server's threads (kernel ids) -> CPU seconds last read
        self.exposition = Exposition(pipeline, ServerCollector(self.connections, self.cpu_seconds))
        self._api = Api(pipeline, http.preview_fps) if http.page else None
        self._searches = Searches(pipeline) if http.page else None
        self.manage = http.manage  # streams added and removed over HTTP (http/changes.py)
        #: the threads answers are made on, by what they answer: `answers` (the page and its API),
        #: `scrape` (/metrics alone), `changes` (streams added and removed: a source probed)
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._changes_in_hand = 0  # on the loop only
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

    async def _off_loop(self, pool: str, fn, *args) -> Reply:
        return await asyncio.get_running_loop().run_in_executor(self._pools[pool], functools.partial(fn, *args))

    async def _changing(self, fn, *args) -> Reply:
        """`fn(*args)` on the thread of changes, at most `MAX_CHANGES` in hand (503 past them)."""
        if self._changes_in_hand >= MAX_CHANGES:
            return text_reply(503, f"busy: {MAX_CHANGES} changes of streams are in hand; try again",
                              {"Retry-After": "1"})
        self._changes_in_hand += 1
        try:
            return await self._off_loop("changes", fn, *args)
        finally:
            self._changes_in_hand -= 1

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
        if path == "/api/search" and self._searches is not None and request.method != "DELETE":
            return await self._search(request, query)
        if changes:
            return await self._change(request, path)
        if path == "/metrics":
            return await self._off_loop("scrape", self.exposition.reply, request.query_string, headers.get("Accept", ""),
                                        headers.get("Accept-Encoding", ""))
        if self._api is None:
            return text_reply(404, "not found: try /metrics or /healthz")
        return await self._off_loop("answers", self._api.route, path, query, request.remote or "")

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
            return await self._changing(remove_stream, self.pipeline, name)
        self.connections.reading(request.protocol)  # closed for room, if need be, until its body is whole
        try:
            data = await read_source(request)
        finally:
            self.connections.busy(request.protocol)
        if isinstance(data, Reply):
            return data
        return await self._changing(add_stream, self.pipeline, data)

    async def _search(self, request: web.BaseRequest, query: dict) -> Reply:
        """`GET` and `POST /api/search` (http/search.py), on the search thread, a few per client."""
        peer = request.remote or ""
        refused = self._searches.admit(peer)
        if refused is not None:
            return refused
        try:
            if request.method != "POST":
                return await self._off_loop("search", self._searches.by_track, query)
            self.connections.reading(request.protocol)  # closed for room, if need be, until its body is whole
            try:
                body = await read_jpeg(request)
            finally:
                self.connections.busy(request.protocol)
            if isinstance(body, Reply):
                return body
            return await self._off_loop("search", self._searches.by_image, body, query)
        finally:
            self._searches.done(peer)

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
        server = GatedServer(self._handle, self.connections, access_log=None, logger=_ServerLog(),
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
        self._pools = {name: ThreadPoolExecutor(n, thread_name_prefix=f"http-{name}", initializer=self._mine)
                       for name, n in (("answers", WORKER_THREADS), ("scrape", 1), ("changes", 1), ("search", 1))}
        started, failed = threading.Event(), []
        self._thread = threading.Thread(target=self._serve, args=(sock, started, failed), name="http", daemon=True)
        self._thread.start()
        started.wait()
        if failed:
            for pool in self._pools.values():
                pool.shutdown(wait=False)
            raise StreamlensError(f"http.port: cannot serve on {self.host}:{self.port}: {failed[0]}")

    def close(self) -> None:
        """Stop listening, give the answers in hand `CLOSE_S` to finish, and end the thread."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CLOSE_S + 5)
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
