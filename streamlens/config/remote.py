"""What a source added over HTTP (`POST /api/streams`) may open: what the operator allows, and never a
listener.

The pipeline file is the operator's: its sources may be anything `sources[i]` takes. A request is
whoever reaches the API; a source it adds is checked here too, once validated as the file's would be
(its path normalised, a relative one resolved against the pipeline file's folder):

- A URL's scheme is one of `runtime.http.add_schemes` (default: the camera schemes rtsp, rtsps, http,
  https, rtmp, rtmps and srt). A file, or a device (`/dev/videoN`), is under one of
  `runtime.http.add_folders` (default none) once every link in both is followed (`/dev/../etc/passwd`
  is `/etc/passwd`; `/dev/v4l/by-id/...` is the `/dev/videoN` it links to).
- It never listens: no option, and no `?key` of its URL, that makes FFmpeg serve or bind an address
  of its choosing (`SERVER_OPTIONS`: `listen`, `localport`, `rtsp_flags: listen`, srt's `mode:
  listener`, rtmp's `timeout`, which implies listening, ...); no unspecified host (`0.0.0.0`, `::`,
  none); udp:// and rtp://, which receive on a local port, only from a multicast group; RTSP over
  `transport: udp` neither (tcp, http, https or udp_multicast).
- It opens only its own scheme's protocols (FFmpeg's `protocol_whitelist`, set by `remote_options`
  and not to be given): a description it fetches (an SDP file over HTTP, which would bind the ports
  it names) cannot make it open another.

Example:
    >>> from streamlens.config.model import HttpConfig, SourceConfig
    >>> src = SourceConfig(uri="tcp://127.0.0.1:26501?listen=1", name="x")
    >>> remote_problems(src, HttpConfig(add_schemes=["tcp"]))
    [('uri', "'?listen' makes FFmpeg listen: a source added over HTTP never does")]
    >>> remote_problems(SourceConfig(uri="/dev/../etc/passwd", name="y"), HttpConfig())  # doctest: +ELLIPSIS
    [('uri', 'files and devices are not added over HTTP in this run (runtime.http.add_folders names none)')]
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from urllib.parse import unquote

from ..urls import host_and_port
from .runtime import HttpConfig
from .sources import SourceConfig, is_device

#: FFmpeg options (and URL `?key`s) with which an input serves, binds an address of its choosing or
#: chooses the protocols it may open: listen (tcp, http, rtmp), listen_timeout (tcp, rtsp),
#: rtmp_listen, the local address and ports (udp, tcp, rtp, srt), port reuse, the whitelist
SERVER_OPTIONS = frozenset({
    "listen", "listen_timeout", "rtmp_listen", "localport", "local_port", "localaddr", "local_addr", "localip",
    "localrtpport", "localrtcpport", "reuse", "reuse_socket", "protocol_whitelist", "protocol_blacklist"})
#: srt's `mode` values that bind (caller, the default, only connects)
_SRT_BINDING = ("listener", "rendezvous")
#: the schemes whose `timeout` option means "listen for an incoming connection"
_RTMP = ("rtmp", "rtmps", "rtmpt", "rtmpts", "rtmpe", "rtmpte")
#: FFmpeg's protocols each scheme's input may open (its `protocol_whitelist`)
_PROTOCOLS = {
    "rtsp": "rtsp,rtsps,tcp,tls,http,https,httpproxy",
    "http": "http,https,tcp,tls,crypto,httpproxy",
    "rtmp": "rtmp,rtmps,rtmpt,rtmpts,rtmpe,rtmpte,ffrtmphttp,ffrtmpcrypt,tcp,tls,http,https,httpproxy",
    "srt": "srt", "tcp": "tcp", "udp": "udp", "rtp": "rtp,udp", "file": "file",
}
_FAMILY = {"rtsps": "rtsp", "https": "http", **{s: "rtmp" for s in _RTMP}}
#: RTSP transports that receive on no local port of their own (udp_multicast joins a group)
_RTSP_TRANSPORTS = ("tcp", "http", "https", "udp_multicast")


def remote_problems(source: SourceConfig, http: HttpConfig) -> list[tuple[str, str]]:
    """What `source` (validated) may not do as a source added over HTTP under `http`: (key below the
    entry, message) pairs; empty when it may be added."""
    found = [("options", message) for message in _option_problems(source.options, _scheme(source.uri))]
    if source.is_file or is_device(source.uri):
        return _path_problems(source.uri, http) + found
    scheme = _scheme(source.uri)
    if scheme not in http.add_schemes:
        return [("uri", f"{scheme}:// is not a scheme runtime.http.add_schemes allows "
                        f"({', '.join(http.add_schemes) or 'none'})")] + found
    found = [("uri", m) for m in _query_problems(source.uri, scheme)] + found
    host = (host_and_port(source.uri) or ("", None, False))[0]
    if _unspecified(host):
        found.insert(0, ("uri", f"host {host or '(none)'!r} is no address to connect to but one to listen on: "
                                "a source added over HTTP never listens"))
    elif scheme in ("udp", "rtp") and not _multicast(host):
        found.insert(0, ("uri", f"{scheme}:// receives on a local port: a source added over HTTP takes it only "
                                "from a multicast group (224.0.0.0/4, ff00::/8)"))
    if scheme in ("rtsp", "rtsps") and source.transport not in _RTSP_TRANSPORTS:
        found.append(("transport", f"{source.transport} receives on local ports: a source added over HTTP uses "
                                   f"one of {', '.join(_RTSP_TRANSPORTS)}"))
    return found


def remote_options(source: SourceConfig) -> dict[str, str]:
    """`source.options` with FFmpeg's `protocol_whitelist` for its scheme (see the module)."""
    scheme = "file" if source.is_file or is_device(source.uri) else _scheme(source.uri)
    protocols = _PROTOCOLS[_FAMILY.get(scheme, scheme)]
    if scheme in ("rtsp", "rtsps") and source.transport == "udp_multicast":
        protocols += ",udp,rtp"
    return {**source.options, "protocol_whitelist": protocols}


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


def _option_problems(options: dict[str, str], scheme: str) -> list[str]:
    found = []
    for key, value in options.items():
        if (bad := _server_option(key, value, scheme)) is not None:
            found.append(f"{key}: {bad}")
    return found


def _query_problems(uri: str, scheme: str) -> list[str]:
    """The `?key=value` pairs of `uri` that FFmpeg's protocols read as options (tcp, udp, rtp and srt
    take them from the URL: everything after its first `?`, split at `&` and `=`) and that listen."""
    query = uri.partition("?")[2]
    found = []
    for part in query.split("&") if query else []:
        key, _, value = part.partition("=")
        if _server_option(key, value, scheme) is not None:
            found.append(f"{'?' + key if len(key) <= 40 else '?' + key[:37] + '...'!r} makes FFmpeg listen: "
                         "a source added over HTTP never does")
    return found


def _server_option(key: str, value: str, scheme: str) -> str | None:
    """Why option `key` with `value` makes an input listen (or pick its protocols); None if it does not."""
    name, value = unquote(key).strip().lower(), unquote(value).strip().lower()
    if name in SERVER_OPTIONS:
        return "an option that listens or binds (or picks FFmpeg's protocols): not taken over HTTP"
    if name == "rtsp_flags" and "listen" in value:
        return "listen makes RTSP a server: not taken over HTTP"
    if name == "mode" and value in _SRT_BINDING:
        return f"{value} binds a local port: a source added over HTTP only connects (caller)"
    if name == "timeout" and scheme in _RTMP:
        return "for rtmp it means listening for a connection: not taken over HTTP"
    return None


def _path_problems(path: str, http: HttpConfig) -> list[tuple[str, str]]:
    if not http.add_folders:
        return [("uri", "files and devices are not added over HTTP in this run (runtime.http.add_folders names none)")]
    real = Path(os.path.realpath(path))  # the file it opens: every link followed
    if any(real.is_relative_to(os.path.realpath(folder)) for folder in http.add_folders):
        return []
    return [("uri", f"not under a folder runtime.http.add_folders names ({', '.join(map(str, http.add_folders))})")]


def _unspecified(host: str) -> bool:
    """An empty host or a wildcard address (`0.0.0.0`, `::`, and C's spellings of them: `0`, `0x0`)."""
    if not host:
        return True
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        pass
    try:
        return socket.inet_aton(host) == b"\0\0\0\0"
    except OSError:
        return False


def _multicast(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_multicast
    except ValueError:
        return False


__all__ = ["remote_problems", "remote_options", "SERVER_OPTIONS"]
