"""URL helpers: tell a camera URL from a file path, hide secrets before anything is printed
(`mask_url` for every URL shown, `url_origin` for one whose path is its secret, `hide_in`), check a URL's port (`port_problem`), say when its host does not resolve (`host_problem`) and
whether a listening host keeps a server to this machine (`is_loopback`).

Example:
    >>> mask_url("rtsp://admin:s3cret@10.0.0.5:554/stream1")
    'rtsp://***@10.0.0.5:554/stream1'
    >>> mask_url("rtsp://admin:p@ss/w:rd@[fe80::1]:554/s")
    'rtsp://***@[fe80::1]:554/s'
    >>> mask_url("rtsp://cam/x?user=admin&password=secret&channel=1")
    'rtsp://cam/x?user=admin&password=***&channel=1'
    >>> is_url("clips/a.mp4"), is_url("rtsp://cam/1")
    (False, True)
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: in free text, a URL ends at white space or a quote; its credentials end at its last '@'
_CREDENTIALS_IN_TEXT_RE = re.compile(r"(?<=://)[^\s'\"<>]*@")
#: a query (or fragment) parameter whose name holds one of these words has a secret value: password,
#: passwd, passphrase, pass, pwd, token (access_token, x-auth-token), key (api_key, apikey), secret,
#: auth, sig (signature), credential; case-insensitive. A harmless one (`keyframe=1`) is hidden too.
_SECRET_PARAM_RE = re.compile(r"([?&;#][^=&;#\s'\"<>]*?(?:pass|pwd|token|key|secret|auth|sig|credential)"
                              r"[^=&;#\s'\"<>]*=)[^&;#\s'\"<>]*", re.IGNORECASE)
#: how long `host_problem` waits for the system's resolver (one that cannot reach its DNS server may
#: take 5 s per try and server)
RESOLVE_TIMEOUT_S = 2.0


def is_url(text: str) -> bool:
    """True for `scheme://...` (rtsp, rtsps, http, https, rtmp, udp, srt, ...)."""
    return bool(_SCHEME_RE.match(text))


def mask_url(text: str) -> str:
    """`text` with the secrets of every URL in it hidden: credentials (`user:password@`, `user@`)
    become `***@`, and the value of a query parameter whose name looks secret (password, pass, pwd,
    token, key, secret, passphrase, auth, ...: `_SECRET_PARAM_RE`) becomes `***`.

    Everything from `://` to the URL's last `@` is hidden, so no part of a password shows
    whatever it holds (`@`, `/`, `:`, `#`, `%40`); the price is that an `@` later in a URL (in
    its path or query) hides the host as well. A `text` that is one URL is that URL to its end
    (white space included); in other text a URL ends at white space or a quote. A secret in a URL's
    path (a Slack or Discord webhook) is not seen here: show such a URL with `url_origin`.

    Example:
        >>> mask_url("cannot open 'rtsp://u:a@b@cam/1': 401 Unauthorized")
        "cannot open 'rtsp://***@cam/1': 401 Unauthorized"
        >>> mask_url("GET /api/streams?token=abc123&x=1 answered 200")
        'GET /api/streams?token=***&x=1 answered 200'
    """
    scheme = _SCHEME_RE.match(text)
    if scheme is not None and text.rfind("@") >= scheme.end():
        text = text[:scheme.end()] + "***" + text[text.rindex("@"):]
    else:
        text = _CREDENTIALS_IN_TEXT_RE.sub("***@", text)
    return _SECRET_PARAM_RE.sub(r"\1***", text)


def url_origin(url: str) -> str:
    """`scheme://host[:port]` of `url`, without credentials, path or query: how a URL whose path may
    be its secret (a webhook's) is shown. Text that is no URL is shown as `mask_url` shows it.

    Example:
        >>> url_origin("https://hooks.slack.com/services/T000/B000/XXXXSECRET?x=1")
        'https://hooks.slack.com'
        >>> url_origin("http://user:pw@[::1]:8080/hook")
        'http://[::1]:8080'
    """
    split = host_and_port(url)
    if split is None or _authority_may_hold_credentials(url):
        return mask_url(url) if split is None else url[:_SCHEME_RE.match(url).end()] + "***"
    host, port, bracketed = split
    host = f"[{host}]" if bracketed else host
    return url[:_SCHEME_RE.match(url).end()] + host + (f":{port}" if port is not None else "")


def url_host(url: str) -> str:
    """The host of `url` as FFmpeg and HTTP libraries read it (no brackets), or "" for no URL.

    Example:
        >>> url_host("http://bot:pw@[::1]:8080/hook"), url_host("https://hooks.example/in"), url_host("x.mp4")
        ('::1', 'hooks.example', '')
    """
    split = host_and_port(url)
    return split[0] if split is not None else ""


def hide_in(text: str, url: str) -> str:
    """`text` (an error message about `url`) with `url`'s path, query and credentials hidden wherever
    they appear, whole or in part as HTTP libraries quote them (`with url: /services/...`), and
    every other URL masked (`mask_url`).

    Example:
        >>> hide_in("Max retries exceeded with url: /services/T0/B0/SECRET (Caused by timeout)",
        ...         "https://hooks.slack.com/services/T0/B0/SECRET")
        'Max retries exceeded with url: /*** (Caused by timeout)'
    """
    scheme = _SCHEME_RE.match(url)
    if scheme is not None:
        rest = url[scheme.end():]
        cut = re.search(r"[/?#]", rest.rpartition("@")[2])
        tail = rest.rpartition("@")[2][cut.start():] if cut else ""
        text = text.replace(url, url_origin(url))
        for part in sorted({tail, tail.split("#")[0], tail.split("?")[0]}, key=len, reverse=True):
            if len(part) > 1:
                text = text.replace(part, "/***" if part.startswith("/") else "***")
    return mask_url(text)


def host_and_port(uri: str) -> tuple[str, str | None, bool] | None:
    """The host and the port (as written; None without one) of a URL as FFmpeg splits it
    (`av_url_split`): the authority ends at the first `/`, `?` or `#`, credentials end at its last
    `@`, and an IPv6 address is in brackets. The third value says whether the host was bracketed.
    None for text that is no URL.

    Example:
        >>> host_and_port("rtsp://admin:pw@cam7.local:554/s"), host_and_port("udp://@[ff02::1]:1234")
        (('cam7.local', '554', False), ('ff02::1', '1234', True))
    """
    scheme = _SCHEME_RE.match(uri)
    if scheme is None:
        return None
    authority = re.split(r"[/?#]", uri[scheme.end():], maxsplit=1)[0]
    hostport = authority.rpartition("@")[2]
    if hostport.startswith("[") and "]" in hostport:
        host, _, after = hostport[1:].partition("]")
        return host, after[1:] if after.startswith(":") else None, True
    host, colon, port = hostport.partition(":")
    return host, port if colon else None, False


def _authority_may_hold_credentials(uri: str) -> bool:
    """Whether what FFmpeg reads as host and port may be part of a user name or password: `mask_url`
    hides up to the URL's last `@`, and that `@` comes after the authority (a password holding `/`,
    `?` or `#`, which FFmpeg takes for the end of the host)."""
    scheme = _SCHEME_RE.match(uri)
    if scheme is None:
        return False
    authority = re.split(r"[/?#]", uri[scheme.end():], maxsplit=1)[0]
    return uri.rfind("@") >= scheme.end() + len(authority)


def port_problem(uri: str) -> str | None:
    """What is wrong with the port of URL `uri` (a number from 1 to 65535), None when it is fine or
    absent. The message shows the URL masked (`mask_url`), and the port only where it cannot be part
    of a password. FFmpeg reads a port as C's `atoi` does: `notaport` is port 0 and `99999` is no
    port at all, and a connection to either fails for ever with "Invalid argument".

    Example:
        >>> port_problem("rtsp://admin:s3cret@cam:99999/x")
        'port must be a number from 1 to 65535, got 99999: rtsp://***@cam:99999/x'
        >>> port_problem("rtsp://cam:554/x") is None, port_problem("rtsp://cam/x") is None
        (True, True)
    """
    split = host_and_port(uri)
    if split is None or split[1] is None:
        return None
    host, port, bracketed = split
    digits = port.lstrip("0")
    if port.isascii() and port.isdigit() and len(digits) <= 5 and 1 <= int(digits or "0") <= 65535:
        return None
    url = mask_url(uri)
    url = url if len(url) <= 120 else url[:117] + "..."
    if _authority_may_hold_credentials(uri):
        return (f"port must be a number from 1 to 65535: {url} (a '/', '?' or '#' in a user name "
                "or password is written %2F, %3F, %23)")
    shown = port if len(port) <= 12 else port[:9] + "..."
    shown = shown if port.isascii() and port.isdigit() else repr(shown)
    hint = " (an IPv6 address is written in brackets: [fe80::1]:554)" if not bracketed and ":" in port else ""
    return f"port must be a number from 1 to 65535, got {shown}: {url}{hint}"


def is_loopback(host: str, *, resolve: bool = True) -> bool:
    """Whether listening on `host` keeps the server to this machine: 127.0.0.0/8, ::1, or a name
    that resolves to those alone. `""` and `0.0.0.0` listen everywhere. With `resolve=False` no
    name is looked up (a peer's host, asked about where a hung resolver must not hold anything up):
    only `localhost` and `*.localhost` are names of this machine then.

    Example:
        >>> [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "", "10.0.0.5")]
        [True, True, True, False, False, False]
        >>> is_loopback("cam.localhost", resolve=False), is_loopback("broker.lan", resolve=False)
        (True, False)
    """
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    if not resolve:
        name = host.lower().rstrip(".")
        return name == "localhost" or name.endswith(".localhost")
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in found)


def host_problem(uri: str, timeout: float = RESOLVE_TIMEOUT_S) -> str | None:
    """Why a connection to URL `uri` may have failed in name resolution: `"cannot resolve host
    cam7.local"` when the system's resolver (`socket.getaddrinfo`: /etc/hosts, DNS, mDNS where set
    up) does not know the host, `"cannot resolve host cam7.local: no answer in 2 s"` when it gave no
    answer within `timeout` seconds; None when the host resolves, is an IP address (answered at once),
    is empty (`udp://@:1234`), or the URL is no URL (a device).

    Call it after a connection failed, to name the cause in the line that reports the failure (a
    live source's retry log line), not on every frame: it blocks for up to `timeout` seconds. The
    lookup runs on a daemon thread, so a resolver that hangs never holds the caller longer; calls
    for a host whose lookup is still running wait for that one rather than start another, so a hung
    resolver costs one thread per host, not one per retry. Only the host is ever named, never the
    credentials: where what FFmpeg reads as the host may be part of a password (one holding `/`),
    the answer is None.

    A host that does not resolve now may resolve later (a camera's DNS entry not there yet, DNS
    itself down), so `streamlens validate` reports it as a warning, not a mistake, and a run retries
    such a camera like any other.

    Example:
        >>> host_problem("rtsp://admin:s3cret@cam7.invalid:554/stream1")  # doctest: +ELLIPSIS
        'cannot resolve host cam7.invalid...'
        >>> host_problem("rtsp://10.0.0.5:554/s") is None, host_problem("rtsp://localhost:8554/s") is None
        (True, True)
    """
    split = host_and_port(uri)
    if split is None or not split[0] or _authority_may_hold_credentials(uri):
        return None
    host, _, bracketed = split
    if bracketed:
        return None  # [fe80::1], [fe80::1%25eth0]: an address, nothing to look up
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    with _lookups_lock:
        lookup = _lookups.get(host)
        if lookup is None:
            lookup = _lookups[host] = _Lookup(host)
    if not lookup.done.wait(timeout):
        return f"cannot resolve host {host}: no answer in {timeout:g} s"
    return f"cannot resolve host {host}" if lookup.failed else None


class _Lookup:
    """One `getaddrinfo` of a host on a daemon thread; `done` is set when it has answered."""

    def __init__(self, host: str):
        self.host = host
        self.failed = False
        self.done = threading.Event()
        threading.Thread(target=self._run, name=f"resolve {host}", daemon=True).start()

    def _run(self) -> None:
        try:
            socket.getaddrinfo(self.host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):  # gaierror; UnicodeError: no valid IDNA name (a label of 64+)
            self.failed = True
        finally:
            with _lookups_lock:
                if _lookups.get(self.host) is self:
                    del _lookups[self.host]
            self.done.set()


_lookups: dict[str, _Lookup] = {}  # host -> its lookup while it runs
_lookups_lock = threading.Lock()
