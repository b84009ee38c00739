"""What the peers of one bound ZeroMQ socket may do: how many connect, how much each sends, which
subscriptions count. Used by every socket that strangers reach: a zmq sink's publisher and the
supervisor's relay of it (streamlens/sinks/zmq.py, streamlens/scale/forwarder.py).

A subscription costs a publisher far more than its bytes: libzmq keeps every distinct topic a peer
sends in a trie (one node per byte), about 9 KB for a 200-byte topic, and it keeps them whether or
not the application ever uses them. One peer sending 200,000 junk subscriptions (39 MB) took a
publisher to 1.8 GB. So the bounds are set on what a peer *sends*, before libzmq stores it:

- **Bytes per peer.** Each connection may send `burst` bytes up front (`BASE_BYTES`, enough for
  a CurveZMQ handshake, plus `TOPIC_BYTES` per subscription it is allowed), and `RATE` bytes a
  second after that (heartbeats, a subscriber changing its topics now and then). The kernel counts
  what each connection sent (`TCP_INFO`), read every `CHECK_S`; a connection past its allowance is
  closed (its socket shut down under libzmq, which then drops it and its subscriptions) and
  counted as `flood`. The socket's receive buffer is small (`RCVBUF`), so little more than the
  allowance is ever taken in.
- **Bytes in all.** What every connection sent beyond its rate, together, at most `total` bytes:
  past that, the connection that sent most is closed (counted as `flood`).
- **Connections.** At most `max_peers` at once; one more is refused at its handshake (`peers`).
- **A cool-down.** An address whose connection was closed for flooding is refused for
  `cooldown_s` (doubled each time it happens again, up to `MAX_COOLDOWN_S`), counted as
  `cooldown`: libzmq reconnects by itself and sends every subscription again, so without it one
  peer would flood again ten times a second. Peers already connected from that address stay.
- **Keys.** With CurveZMQ and a folder of authorized public keys, a peer whose key is not there is
  refused (`key`).

The handshakes are checked by a ZAP handler of this module's own (ZeroMQ's hook for deciding who
may connect, on the socket's context), which also serves the CurveZMQ keys. Over `ipc://` the
kernel counts no bytes: only the connections, the cool-down and the keys hold there (an ipc
endpoint is a file whose permissions already choose who may connect).

`topic_allowed` says which subscriptions can match the result contract's topics; the relay passes
only those upstream (see `TopicTable`), and a publisher counts only those as subscribers.

Example:
    >>> topic_allowed(b"frame.cam1."), topic_allowed(b"fra"), topic_allowed(b""), topic_allowed(b"x" * 200)
    (True, True, True, False)
    >>> table = TopicTable(max_topics=1)
    >>> table.subscribe(b"frame."), table.subscribe(b"event."), table.unsubscribe(b"frame.")
    (True, False, True)
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.utils import z85

from .codec import MESSAGE_TYPES, TOPIC_END

log = logging.getLogger("streamlens.wire.peers")

#: bytes every connection may send besides its subscriptions: a greeting and a CurveZMQ handshake
BASE_BYTES = 4096
#: bytes allowed per subscription a peer may hold: the longest topic of the contract and framing
TOPIC_BYTES = 80
#: bytes a second each connection may send once its burst is spent
RATE = 256
#: how often the connections' byte counts are read (seconds)
CHECK_S = 0.1
#: the kernel receive buffer of each connection (bytes; the kernel doubles it): upstream carries
#: only subscriptions, so a small buffer costs nothing and bounds what a flood has in flight
RCVBUF = 8192
#: the longest cool-down of an address that floods again and again (seconds)
MAX_COOLDOWN_S = 300.0
#: ZAP's endpoint in a context (fixed by ZeroMQ's RFC 27)
ZAP_ENDPOINT = "inproc://zeromq.zap.01"
#: why a peer was refused or closed, as counted
REASONS = ("flood", "peers", "cooldown", "key", "topics")

# a stream name of the contract: letters, digits, `_` and `-`, at most 64 (the wire's topics)
_NAME = re.compile(rb"[A-Za-z0-9_-]{1,64}")
# where bytes_received lies in Linux's struct tcp_info (since 4.1)
_BYTES_RECEIVED = struct.Struct("=Q"), 128


def topic_allowed(topic: bytes) -> bool:
    """Whether a subscription to `topic` can match a message of the contract: `` (all), a prefix of
    `<type>.`, or `<type>.` and a prefix of a stream name, with or without the closing dot."""
    for kind in MESSAGE_TYPES:
        head = f"{kind}.".encode()
        if head.startswith(topic):
            return True
        if topic.startswith(head):
            name = topic[len(head):]
            name = name[:-1] if name.endswith(TOPIC_END.encode()) else name
            return _NAME.fullmatch(name) is not None
    return False


class TopicTable:
    """The distinct topics a relay has passed upstream, at most `max_topics`; what is refused is
    counted in `refused`. Fed by an XPUB socket that is not verbose: each topic comes once, when its
    first subscriber takes it, and leaves when its last one does."""

    def __init__(self, max_topics: int):
        self.max_topics = max_topics
        self.passed: set[bytes] = set()
        self.refused = 0

    def subscribe(self, topic: bytes) -> bool:
        """True: pass it upstream. False: it cannot match the contract, or the table is full."""
        if topic in self.passed:
            return False
        if not topic_allowed(topic) or len(self.passed) >= self.max_topics:
            self.refused += 1
            return False
        self.passed.add(topic)
        return True

    def unsubscribe(self, topic: bytes) -> bool:
        """True: pass it upstream (it was passed)."""
        if topic in self.passed:
            self.passed.discard(topic)
            return True
        return False


@dataclass(frozen=True)
class PeerLimits:
    """The bounds of one socket (a zmq sink's `peers` section)."""

    max_peers: int = 512
    subscriptions: int = 256
    topics: int = 4096
    cooldown_s: float = 10.0

    @property
    def burst(self) -> int:
        """Bytes one connection may send up front."""
        return BASE_BYTES + TOPIC_BYTES * self.subscriptions

    @property
    def total(self) -> int:
        """Bytes every connection may have sent beyond its rate, together."""
        return BASE_BYTES * self.max_peers + TOPIC_BYTES * self.topics


class _Connection:
    __slots__ = ("sock", "address", "opened", "counted", "admitted")

    def __init__(self, sock: socket.socket | None, address: str, opened: float):
        self.sock, self.address, self.opened = sock, address, opened
        self.admitted = False  # its handshake passed (see PeerGuard.admitted_now)
        self.counted = sock is not None  # the kernel counts its bytes (tcp)

    def received(self) -> int | None:
        if not self.counted:
            return None
        layout, offset = _BYTES_RECEIVED
        try:
            info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        except OSError:
            self.counted = False
            return None
        if len(info) < offset + layout.size:
            self.counted = False
            return None
        return layout.unpack_from(info, offset)[0]

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class PeerGuard:
    """Holds `sock`'s peers to `limits` (see the module). Call `arm()` after the socket's options
    and before it binds; `close()` after the socket is closed. `refused` counts by reason."""

    def __init__(self, ctx: zmq.Context, sock: zmq.Socket, where: str, limits: PeerLimits,
                 authorized: str | Path | None = None):
        self.ctx, self.sock, self.where, self.limits = ctx, sock, where, limits
        self.refused: Counter[str] = Counter()
        self._keys: set[bytes] | None = None
        if authorized is not None:
            from zmq.auth import load_certificates

            self._keys = set(load_certificates(str(authorized)))
        self._connections: dict[int, _Connection] = {}
        self._cooling: dict[str, tuple[float, float]] = {}  # address -> (until, last cool-down)
        #: handshakes admitted since the start
        self.admitted = 0
        self._trim_at: float | None = None
        self._stop = threading.Event()
        self._zap: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def connected(self) -> int:
        """Connections open now."""
        return len(self._connections)

    @property
    def admitted_now(self) -> int:
        """Connections open now whose handshake was admitted (a push sink's consumers)."""
        return sum(1 for conn in list(self._connections.values()) if conn.admitted)

    def arm(self) -> None:
        """Take the socket's handshakes and connections under watch (before it binds)."""
        self._zap = self.ctx.socket(zmq.REP)
        self._zap.linger = 0
        self._zap.bind(ZAP_ENDPOINT)
        self.sock.zap_domain = b"streamlens"
        self.sock.rcvbuf = RCVBUF
        self._monitor = self.sock.get_monitor_socket(
            zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED)
        self._thread = threading.Thread(target=self._run, name="zmq-peers", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop watching (after the socket is closed, or just before); say what was refused."""
        self._stop.set()
        if self.refused:
            each = ", ".join(f"{why} {n}" for why, n in sorted(self.refused.items()))
            log.warning("%s: %d peer connection(s) refused or closed (%s)", self.where, sum(self.refused.values()),
                        each)
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        for s in (self._zap, self._monitor):
            if s is not None:
                s.close(linger=0)
        self._zap = self._monitor = None

    # -- the watch -----------------------------------------------------------------------------

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._monitor, zmq.POLLIN)
        poller.register(self._zap, zmq.POLLIN)
        next_check = time.monotonic() + CHECK_S
        while not self._stop.is_set():
            try:
                ready = dict(poller.poll(int(CHECK_S * 1000)))
                if self._monitor in ready:
                    self._take_events()
                if self._zap in ready:
                    self._take_events()  # the connection asking is accepted already: counted first
                    self._answer()
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + CHECK_S
                    self._check(now)
            except zmq.ZMQError:  # the context is ending
                return
            except Exception:  # noqa: BLE001 - the watch goes on; what failed is in the debug log
                log.debug("%s: watching peers", self.where, exc_info=True)

    def _take_events(self) -> None:
        from zmq.utils.monitor import recv_monitor_message

        while self._monitor.poll(0):
            event = recv_monitor_message(self._monitor)
            fd = int(event["value"])
            if event["event"] == zmq.EVENT_ACCEPTED:
                self._opened(fd)
            else:
                conn = self._connections.pop(fd, None)
                if conn is not None:
                    conn.close()

    def _opened(self, fd: int) -> None:
        old = self._connections.pop(fd, None)
        if old is not None:
            old.close()
        try:
            sock = socket.socket(fileno=os.dup(fd))  # ours to read and shut; closed when libzmq's is
        except OSError:
            return
        address = ""
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                address = sock.getpeername()[0]
            except OSError:
                pass
        else:
            sock.close()
            sock = None
        self._connections[fd] = _Connection(sock, address, time.monotonic())

    def _answer(self) -> None:
        """One ZAP request: admit, or refuse with 400 and say why (RFC 27)."""
        request = self._zap.recv_multipart()
        version, rid, _domain, address, _identity, mechanism = request[:6]
        credentials = request[6:]
        why = self._refusal(address.decode(errors="replace"), mechanism, credentials)
        if why is None:
            self.admitted += 1
            self._mark_admitted(address.decode(errors="replace"))
            self._zap.send_multipart([version, rid, b"200", b"OK", b"peer-%d" % self.admitted, b""])
        else:
            self.refused[why] += 1
            self._zap.send_multipart([version, rid, b"400", why.encode(), b"", b""])

    def _mark_admitted(self, address: str) -> None:
        """ZAP names no connection, only its address: mark the oldest of that address not yet marked
        (for counting, any of them will do)."""
        for conn in self._connections.values():
            if not conn.admitted and conn.address == address:
                conn.admitted = True
                return
        for conn in self._connections.values():
            if not conn.admitted:
                conn.admitted = True
                return

    def _refusal(self, address: str, mechanism: bytes, credentials: list[bytes]) -> str | None:
        until = self._cooling.get(address, (0.0, 0.0))[0]
        if time.monotonic() < until:
            return "cooldown"
        # those admitted, so that a burst still in its handshakes is admitted up to the bound; and no
        # more than twice the bound in handshakes at once, so that a flood of connections holds few descriptors
        if self.admitted_now >= self.limits.max_peers or len(self._connections) > 2 * self.limits.max_peers:
            if self.refused["peers"] == 0:
                log.warning("%s: %d peers connected, refusing more (peers.max_peers)", self.where,
                            self.limits.max_peers)
            return "peers"
        if self._keys is not None and mechanism == b"CURVE":
            if not credentials or z85.encode(credentials[0]) not in self._keys:
                return "key"
        return None

    def _check(self, now: float) -> None:
        limits = self.limits
        over = []
        for fd, conn in list(self._connections.items()):
            received = conn.received()
            if received is None:
                continue
            excess = received - RATE * (now - conn.opened)
            over.append((excess, fd))
            if excess > limits.burst:
                self._kick(fd, f"sent {received} bytes in {now - conn.opened:.1f} s "
                               f"(peers.subscriptions {limits.subscriptions})")
        live = [(excess, fd) for excess, fd in over if fd in self._connections and excess > 0]
        while live and sum(e for e, _ in live) > limits.total:
            live.sort()
            _, fd = live.pop()
            self._kick(fd, f"the peers together sent more than {limits.total} bytes")
        if self._trim_at is not None and now >= self._trim_at:
            self._trim_at = None
            _trim()

    def _kick(self, fd: int, why: str) -> None:
        """Close a connection that sent too much, and cool its address down."""
        conn = self._connections.pop(fd)
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)  # libzmq's descriptor of it reads the end: it drops the peer
        except OSError:
            pass
        conn.close()
        self.refused["flood"] += 1
        now = time.monotonic()
        _, last = self._cooling.get(conn.address, (0.0, 0.0))
        wait = min(MAX_COOLDOWN_S, last * 2) if last else self.limits.cooldown_s
        self._cooling[conn.address] = (now + wait, wait)
        for address in [a for a, (until, w) in self._cooling.items() if now > until + 2 * w]:
            del self._cooling[address]  # forgiven: quiet for twice its last cool-down
        self._trim_at = now + 1.0  # libzmq frees what it kept for the peer: give it back to the system
        log.warning("%s: closed the connection of peer %s: it %s; refusing it for %g s", self.where,
                    conn.address or "(local)", why, wait)


def _trim() -> None:
    """Give the memory freed on the heap back to the system (glibc keeps it otherwise)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


__all__ = ["PeerGuard", "PeerLimits", "TopicTable", "topic_allowed", "REASONS"]
