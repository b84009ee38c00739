"""Who may ask the HTTP server what: the Host (and Origin) a request names, and the access token.

Host. Every request, on every address the server listens on (127.0.0.1 included), must name in its
`Host` header (and in its `Origin` header when it sends one) a host this server answers for:

- the address it listens on (`runtime.http.host`);
- on loopback, `localhost`, `127.0.0.1` and `[::1]`;
- listening on every address (`0.0.0.0`, `::`, ``), any numeric address, `localhost` and this
  machine's own name;
- the names in `runtime.http.allowed_hosts` (a name a proxy forwards under, a DNS name).

Anything else is answered 403 before any other check: a web page the operator visits cannot read the
run through DNS rebinding (its requests name the attacker's host), and a cross-site page's requests
carry its own `Origin`. The port is not compared (a proxy may forward under another).

The token. Off loopback, or with `runtime.http.require_token` (a loopback server behind a proxy),
every route but `/healthz` asks for the token held by the environment variable `runtime.http.token_env`
names, at least `MIN_TOKEN_CHARS` characters long. It is taken in two ways only:

- `Authorization: Bearer <token>` on any request (scripts, Prometheus' `authorization` setting);
- once, as `?token=<token>` on any page or route: the answer is a 303 to the same address without
  it, setting an HttpOnly, SameSite=Strict cookie that holds a digest of the token (never the token
  itself), which the page's own requests then carry. The token never stays in an address bar, a
  history entry's next address, a `Referer` (`Referrer-Policy: no-referrer` on every answer) or a
  log line.

A wrong token (by header or `?token=`) counts against the client's address: after `WRONG_TRIES`
wrong ones within `WRONG_WINDOW_S`, its tokens are not even compared until the oldest of them is
that old: 429 with `Retry-After`. A cookie is a 256-bit digest and a stale one (a restart with
another token) is no guess, so it never counts. Behind a proxy every client has the proxy's address
and shares its count. Nothing waits on a thread: the count is a small table the event loop keeps.

The cookie header is read in one pass (split on `;`), never with `http.cookies.SimpleCookie`
(quadratic on crafted input), and tokens are compared with `hmac.compare_digest`.

Example:
    >>> host_name("127.0.0.1:9464"), host_name("[::1]:80"), host_name("Cam.Example."), host_name("a:b:c")
    ('127.0.0.1', '[::1]', 'cam.example', None)
    >>> sorted(allowed_hosts("127.0.0.1", ["grafana.lan"]))
    ['127.0.0.1', '[::1]', 'grafana.lan', 'localhost']
    >>> cookie_value("a=1; streamlens_9464=abc; b", "streamlens_9464")
    'abc'
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import socket
import time
from collections import deque
from urllib.parse import urlsplit

from ..errors import StreamlensError
from ..urls import is_loopback
from .reply import Reply, text_reply

#: the shortest token accepted
MIN_TOKEN_CHARS = 16
#: wrong tokens from one address within the window before its tokens are refused unread
WRONG_TRIES, WRONG_WINDOW_S = 10, 60.0
#: addresses whose wrong tries are remembered at most (the oldest forgotten first)
WRONG_ADDRESSES = 4096
#: the hosts a loopback server answers for, beside its own address
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
#: addresses that mean "every address"
WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def token_problem(token: str | None, env: str, why: str) -> str | None:
    """What is wrong with the token read from variable `env` (None: nothing); `why`: what needs it."""
    if not token:
        return f"the environment variable {env} is not set: {why}"
    if len(token) < MIN_TOKEN_CHARS:
        return (f"the token in {env} is {len(token)} characters long: at least {MIN_TOKEN_CHARS} are needed "
                f"(for example: python -c 'import secrets; print(secrets.token_urlsafe(24))')")
    return None


def needs_token(host: str, require_token: bool) -> bool:
    """Whether a server listening on `host` asks for the token."""
    return require_token or not is_loopback(host)


def _normal(name: str) -> str | None:
    """`name` as hosts are compared: lower case, no trailing dot, IPv6 in brackets; None if empty."""
    name = name.strip().lower().rstrip(".")
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return name or None
    return f"[{address}]" if address.version == 6 else str(address)


def host_name(value: str) -> str | None:
    """The host of a `Host` header's value (`name`, `name:port`, `[v6]:port`), normalised; None
    when it is none of those."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or value[end + 1:] and not value[end + 1:].startswith(":"):
            return None
        return _normal(value[:end + 1])
    if value.count(":") > 1:
        return None
    return _normal(value.partition(":")[0])


def allowed_hosts(bind: str, extra: list[str]) -> set[str]:
    """The host names a server listening on `bind` answers for, `extra` added (see the module)."""
    names = {n for n in map(_normal, extra) if n}
    if bind in WILDCARDS:
        names.update(("localhost", _normal(socket.gethostname()) or "localhost"))
    else:
        names.add(_normal(bind) or bind)
    if is_loopback(bind):
        names.update(LOOPBACK_NAMES)
    return names


def cookie_value(header: str, name: str) -> str | None:
    """The value of cookie `name` in a `Cookie` header, read in one pass; None when absent."""
    for part in header.split(";"):
        key, eq, value = part.partition("=")
        if eq and key.strip() == name:
            return value.strip().strip('"')
    return None


def _same(given: str, expected: bytes) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected)


class _WrongTries:
    """Wrong tokens by client address, over the last `WRONG_WINDOW_S`. One writer: the event loop."""

    def __init__(self):
        self._seen: dict[str, deque[float]] = {}

    def wait_s(self, address: str, now: float) -> float:
        """Seconds until `address` may try again (0: now)."""
        tries = self._seen.get(address)
        if tries is None:
            return 0.0
        while tries and now - tries[0] >= WRONG_WINDOW_S:
            tries.popleft()
        if not tries:
            del self._seen[address]
            return 0.0
        return WRONG_WINDOW_S - (now - tries[0]) if len(tries) >= WRONG_TRIES else 0.0

    def add(self, address: str, now: float) -> None:
        if address not in self._seen and len(self._seen) >= WRONG_ADDRESSES:
            self._seen = {a: t for a, t in self._seen.items() if t and now - t[-1] < WRONG_WINDOW_S}
            while len(self._seen) >= WRONG_ADDRESSES:
                del self._seen[next(iter(self._seen))]
        self._seen.setdefault(address, deque(maxlen=WRONG_TRIES)).append(now)


class Guard:
    """The checks of one server (see the module): `refused_host(headers)` first, then, on every
    route but `/healthz`, `authenticate(...)`. Call both on the server's event loop."""

    def __init__(self, host: str, port: int, allowed: list[str], require_token: bool, token_env: str):
        self.bind = host
        self.hosts = allowed_hosts(host, allowed)
        self.any_address = host in WILDCARDS
        self.token_env = token_env
        self.required = needs_token(host, require_token)
        self.cookie_name = f"streamlens_{port}"  # cookies ignore ports: each server its own
        self._token: bytes | None = None
        self._cookie = b""
        self._wrong = _WrongTries()

    def read_token(self) -> None:
        """Read the token when one is needed; a `StreamlensError` of one line when it is unset or
        short (a run's preflight says the same before anything starts)."""
        if not self.required:
            return
        token = os.environ.get(self.token_env, "")
        why = (f"listening on {self.bind or 'every address'}" + ("" if is_loopback(self.bind) else
               " (not a loopback address)") + ", every route but /healthz needs the access token it holds")
        problem = token_problem(token, self.token_env, why)
        if problem is not None:
            raise StreamlensError(f"runtime.http.token_env: {problem}")
        self._token = token.encode()
        self._cookie = hmac.new(self._token, b"streamlens page cookie", hashlib.sha256).hexdigest().encode()

    def set_port(self, port: int) -> None:
        """The port listened on, once known (`port: 0`): it names the cookie."""
        self.cookie_name = f"streamlens_{port}"

    # -- Host and Origin ----------------------------------------------------------------------------

    def _allowed(self, name: str | None) -> bool:
        if name is None:
            return False
        if name in self.hosts:
            return True
        if self.any_address:
            try:
                ipaddress.ip_address(name.strip("[]"))
                return True
            except ValueError:
                return False
        return False

    def refused_host(self, headers) -> Reply | None:
        """403 when the request's `Host` or `Origin` names a host this server does not answer for
        (a request without `Host`, HTTP/1.0, is no browser's and passes); None when it may go on."""
        host = headers.get("Host")
        if host is not None and not self._allowed(host_name(host)):
            return text_reply(403, "forbidden: this server does not answer for that Host; add the name to "
                                   "runtime.http.allowed_hosts")
        origin = headers.get("Origin")
        if origin is not None:
            try:
                netloc = urlsplit(origin).netloc
            except ValueError:
                netloc = ""
            if not self._allowed(host_name(netloc) if netloc else None):
                return text_reply(403, "forbidden: requests from another site's page are refused")
        return None

    # -- the token ------------------------------------------------------------------------------------

    def authenticate(self, headers, query: dict, target, address: str) -> Reply | None:
        """None when the request may go on; else its answer: 401 (no token or a wrong one), 429 (too
        many wrong ones from `address`), or the token exchange's 303 to `target` (the request's
        relative URL, a `yarl.URL`) without `token`, setting the cookie."""
        if self._token is None:
            return None
        given = query.get("token")
        auth = headers.get("Authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if given is None and bearer is None:
            cookie = cookie_value(headers.get("Cookie", ""), self.cookie_name)
            if cookie is not None and _same(cookie, self._cookie):
                return None
            return self._unauthorized()
        now = time.monotonic()
        wait = self._wrong.wait_s(address, now)
        if wait > 0:
            return text_reply(429, "too many wrong tokens from this address: try again later",
                              {"Retry-After": str(int(wait) + 1)})
        if not _same(given[0] if given is not None else bearer, self._token):
            self._wrong.add(address, now)
            return self._unauthorized()
        if given is None:
            return None
        kept = [(k, v) for k, v in target.query.items() if k != "token"]  # in their order
        location = str(target.with_query(kept))
        if not (location.isascii() and location.isprintable() and location.startswith("/")) \
                or location.startswith("//") or "\\" in location:  # never off this server (//host/...)
            location = "/"
        return Reply(303, "text/plain; charset=utf-8", b"", {
            "Location": location,
            "Set-Cookie": f"{self.cookie_name}={self._cookie.decode()}; HttpOnly; SameSite=Strict; Path=/",
            "Cache-Control": "no-store"})

    @staticmethod
    def _unauthorized() -> Reply:
        return text_reply(401, "unauthorized: this server asks for its access token: send it as "
                               "Authorization: Bearer <token>, or open /?token=<token> once",
                          {"WWW-Authenticate": 'Bearer realm="streamlens"'})
