"""The ZeroMQ sink: results fanned out to any number of subscribers, or handed reliably to one consumer.

Every message is multipart `[topic, payload]` (see `streamlens.wire.codec`): topic `<type>.<stream>.`
(ending in a dot, so `frame.cam1.` is exactly cam1's frames and `frame.` every stream's),
payload one schema-v1 message in JSON (default) or MessagePack (`format: msgpack`). With
`frames: jpeg`, frame messages carry the (annotated) frame as a JPEG third part; an event with a
snapshot (`analytics.snapshots`) carries its JPEG as a third part whatever `frames` says.

Two modes:

- `mode: pub` (default): an XPUB socket binds `endpoint`; SUB sockets connect and filter by topic
  prefix. Sends never block: each subscriber has a queue of `hwm` messages in the publisher (and as
  many again in its own socket); once a subscriber's queue is full, ZeroMQ drops further messages
  *for that subscriber alone*, so a slow, stuck or vanished subscriber never slows the pipeline or
  the other subscribers. ZeroMQ does not tell a PUB socket when it drops for one subscriber: that
  subscriber sees the loss as a gap in `seq` (`streamlens subscribe` and `Subscriber` report it).
  A subscriber that joins late gets messages from then on.
- `mode: push`: a PUSH socket binds `endpoint`; PULL sockets connect. Nothing is dropped while a
  consumer takes messages: when its queue is full (or no consumer is connected) the send waits,
  the sink's queue fills and the pipeline slows to the consumer's pace (a file source waits; a
  live source drops its oldest frames at the input, counted in `dropped`). With several PULL
  consumers each message goes to one of them (round robin): a work queue, not a fan-out.
  A send waits at most `send_timeout_s` (default `DEFAULT_SEND_TIMEOUT_S`, 10 s): a message no
  consumer took by then is dropped and counted, a warning says that the sink drops from now on, and until a consumer takes a message again every message that finds no
  room is dropped at once (counted) instead of waiting. A consumer that is gone or stuck thus
  holds up the pipeline once, for `send_timeout_s`, never for ever. Messages already queued to a
  consumer that then disconnects are lost with it (ZeroMQ does not say how many).

Use pub for dashboards, monitors and anything live: many readers, latest data, no reader may hold
up the cameras. Use push for a consumer that must see every result (a database writer, an
archiver, an evaluation job), accepting that it sets the pace.

`wait_subscribers: N` holds `open()` (so the pipeline's start) until N subscriptions have arrived
(pub: each topic of the contract a SUB socket subscribes to counts once, behind the supervisor of
several engines each distinct topic once; push: N consumers connected), for at most
`wait_timeout_s` seconds, after which the pipeline starts anyway with a warning. Subscribers that
start first thus lose nothing to ZeroMQ's slow-joiner effect.

Stats: the runtime hands this sink a `stats` report per stream about once a second; it is
published as `stats.<stream>.` with a `publisher` object added: `sent` and `dropped` (messages of
this stream sent, and dropped by this sink: refused by the socket, or no consumer took them in
time), `subscriptions` (pub) or `consumers` (push) now, and for push `waited_ms` (time spent
waiting for the consumer) and `dropping` (true while no consumer takes messages), and once a peer
has been refused, `refused` by reason (`refusals()`). `drops()` gives
the same drop counts to the runtime. A pub socket cannot count what ZeroMQ drops for one slow
subscriber (libzmq does not report it): that subscriber sees the loss as gaps in `seq`.

Closing: `close()` lets ZeroMQ deliver what is still queued for at most `linger_ms` (default
200 ms for pub, 10 s for push), then drops it; after `interrupt()` (a second Ctrl-C) it does not
linger at all, and a send that waits gives up within one poll step (the message dropped, counted).

CurveZMQ: `curve: {server_secret: FILE, authorized: DIR}` encrypts the traffic with the keys in
`FILE` (see `streamlens.wire.keys`, `streamlens keygen`) and, with `authorized`, lets in only the
subscribers whose public keys are in `DIR` (a peer with another key is refused, counted as `key`).

Peers: `peers: {max_peers, subscriptions, topics, cooldown_s}` bounds what the socket's peers may do
(streamlens/wire/peers.py): connections at once, the bytes of subscriptions each may send (past
them it is disconnected and its address refused for a while), and the distinct topics counted.
A subscription that cannot match a topic of the contract never counts as a subscriber.

Example:
    >>> import zmq
    >>> from streamlens.frame import StreamEnd
    >>> from streamlens.wire.schema import dumps, eos_message
    >>> sink = ZmqSink("tcp://127.0.0.1:*")
    >>> sink.open()
    >>> sub = zmq.Context.instance().socket(zmq.SUB)
    >>> _ = sub.connect(sink.endpoint); sub.subscribe(b"eos.")
    >>> sink.wait_for(1, timeout_s=5)
    True
    >>> end = StreamEnd("cam1", seq=0, frames=0)
    >>> sink.write(end, eos_message(end), dumps(eos_message(end)))
    >>> sub.recv_multipart()[0]
    b'eos.cam1.'
    >>> sink.close(); sub.close()
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import zmq

from ..config.common import section
from ..config.sinks import PeersConfig, ZmqSinkConfig
from ..errors import SinkError, StreamlensError
from ..frame import Event, FrameResult, StatsReport, StreamEnd
from ..wire import codec, keys
from ..wire.peers import PeerGuard, PeerLimits, topic_allowed
from ..wire.schema import topic
from .base import Sink

log = logging.getLogger("streamlens.sinks.zmq")

#: how long close() lets ZeroMQ deliver what is still queued: short for pub (a stuck subscriber
#: must not hold up the exit; what is already in the kernel's socket buffers is delivered anyway),
#: long for push (the consumer must get everything)
DEFAULT_LINGER_MS = {"pub": 200, "push": 10_000}
#: push: how long one send waits for a consumer to take the message before it is dropped
DEFAULT_SEND_TIMEOUT_S = 10.0
_POLL_MS = 50


def guard(ctx: zmq.Context, sock: zmq.Socket, where: str, peers: PeersConfig,
          curve: dict[str, Any] | None) -> PeerGuard:
    """Put `sock`'s peers under a `PeerGuard` with the bounds of `peers`, and make it a CurveZMQ
    server with the keys of `curve` (`server_secret`, `authorized`) when given; before it binds.
    Close the guard after closing the socket."""
    authorized = None
    if curve:
        keys.make_server(sock, curve["server_secret"])
        authorized = curve.get("authorized")
        if authorized is not None and not Path(authorized).is_dir():
            raise keys.KeyFileError(f"{authorized}: no such folder of authorized public keys")
    limits = PeerLimits(peers.max_peers, peers.subscriptions, peers.topics, peers.cooldown_s)
    watch = PeerGuard(ctx, sock, where, limits, authorized)
    watch.arm()
    return watch


class ZmqSink(Sink):
    """Publishes each result, stream end and stats report (see the module docs for the keys)."""

    name = "zmq"
    wants_stats = True

    def __init__(self, endpoint: str | ZmqSinkConfig, **keys: Any):
        """`ZmqSink(cfg)` with the sink's typed section, or `ZmqSink(endpoint, **keys)` with its
        keys, checked as the pipeline file's are (`ValueError`)."""
        cfg = endpoint if isinstance(endpoint, ZmqSinkConfig) else section(
            ZmqSinkConfig, "zmq sink", type="zmq", endpoint=endpoint, **keys)
        self.endpoint = cfg.endpoint
        self.mode = cfg.mode
        self.format = cfg.format
        self.hwm = cfg.hwm
        self.wait_subscribers = cfg.wait_subscribers
        self.wait_timeout_s = cfg.wait_timeout_s
        self.frames = cfg.frames
        # a publisher never waits; encoding a JPEG per frame is work for a thread of its own
        self.inline = cfg.mode == "pub" and cfg.frames == "none"
        self.jpeg_quality = cfg.jpeg_quality
        self.annotate = cfg.annotate
        self.send_timeout_s = DEFAULT_SEND_TIMEOUT_S if cfg.send_timeout_s is None else cfg.send_timeout_s
        self.linger_ms = DEFAULT_LINGER_MS[cfg.mode] if cfg.linger_ms is None else cfg.linger_ms
        self.curve = cfg.curve.model_dump() if cfg.curve is not None else {}
        self.peer_bounds = cfg.peers
        #: messages handed to ZeroMQ, and messages the socket refused, per stream
        self.sent: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        #: pub: subscriptions now in; push: consumers connected now
        self.peers = 0
        self._interrupted = False  # interrupt_open(): stop waiting for subscribers
        self._aborted = False  # interrupt(): stop waiting at all, close without lingering
        #: push: seconds spent waiting for a consumer to take messages
        self.waited_s = 0.0
        #: push: True while no consumer takes messages (a send timed out): sends do not wait
        self.dropping = False
        self._dropped_before = 0  # messages dropped when `dropping` began
        self._connected = self._connected_before = 0  # push: consumers ever connected; when dropping began
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._guard: PeerGuard | None = None
        self._refused: Counter[str] = Counter()  # the guard's counts, kept once it is closed
        self._annotators: Any = None  # made with the first annotated frame: drawing imports supervision

    # -- life cycle ---------------------------------------------------------------------------

    def open(self) -> None:
        """Bind the socket (with CurveZMQ if configured), then wait for subscribers if asked."""
        self._ctx = zmq.Context()
        try:
            self._sock = self._ctx.socket(zmq.XPUB if self.mode == "pub" else zmq.PUSH)
            self._sock.sndhwm = self.hwm
            self._sock.linger = self.linger_ms
            if self.mode == "pub":
                self._sock.setsockopt(zmq.XPUB_VERBOSER, 1)  # every (un)subscription, for counting
                self._sock.setsockopt(zmq.MAXMSGSIZE, codec.MAX_UPSTREAM_BYTES)  # more: the peer is dropped
            self._guard = guard(self._ctx, self._sock, self.where or f"zmq sink {self.endpoint}",
                                self.peer_bounds, self.curve)
            self._sock.bind(self.endpoint)
        except zmq.ZMQError as e:
            self.close()
            raise SinkError(f"{self.key('endpoint')}: cannot bind {self.endpoint}: "
                            f"{zmq.strerror(e.errno)}") from None
        except StreamlensError as e:
            self.close()
            where = self.key("curve") if self.where else f"zmq sink {self.endpoint}"
            raise SinkError(f"{where}: {e}") from None
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        if not self.where:
            self._guard.where = f"zmq sink {self.endpoint}"
        if self.wait_subscribers and not self.wait_for(self.wait_subscribers, self.wait_timeout_s):
            what = "subscriptions" if self.mode == "pub" else "consumers"
            log.warning("zmq sink %s: %d of %d %s after %g s; starting anyway", self.endpoint,
                        self.peers, self.wait_subscribers, what, self.wait_timeout_s)

    def interrupt_open(self) -> None:
        """End a `wait_subscribers` wait now (Ctrl-C while waiting)."""
        self._interrupted = True

    def interrupt(self) -> None:
        """From any thread (a second Ctrl-C): end a `wait_subscribers` wait, make a push send that
        waits give up within one poll step (the message dropped and counted), send without waiting
        from now on, and let `close()` discard what is queued instead of lingering."""
        self._interrupted = self._aborted = True

    def refusals(self) -> dict[str, int]:
        """Peers refused at their handshake or disconnected, by reason (streamlens/wire/peers.py)."""
        return dict(self._guard.refused) if self._guard is not None else dict(self._refused)

    def drops(self) -> dict[str, int]:
        """Messages dropped per stream (see `dropped`)."""
        return dict(self.dropped)

    def wait_for(self, count: int, timeout_s: float) -> bool:
        """Wait until `count` subscriptions (pub) or consumers (push) are in; False on timeout or
        when `interrupt_open()` is called."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._count_peers()
            if self.peers >= count:
                return True
            left = deadline - time.monotonic()
            if left <= 0 or self._interrupted:
                return False
            step = min(_POLL_MS, max(1, int(left * 1000)))
            if self.mode == "pub":
                self._sock.poll(step, zmq.POLLIN)
            else:
                time.sleep(step / 1000)  # the guard counts the consumers' connections

    def write(self, item: FrameResult | StreamEnd | StatsReport, message: dict[str, Any],
              payload: bytes) -> None:
        """Send one message: at once or never (pub), or waiting for the consumer for at most
        `send_timeout_s` (push). A message not sent is counted in `dropped`."""
        if self._sock is None:
            raise SinkError(f"zmq sink: {self.endpoint} is not open")
        stream = message["stream"]
        if isinstance(item, StatsReport):
            self._count_peers()
            message = {**message, "publisher": self._publisher_stats(stream)}
            payload = codec.encode(message, self.format)
        elif self.format != "json":
            payload = codec.encode(message, self.format)
        parts = [topic(message), payload]
        if self.frames == "jpeg" and isinstance(item, FrameResult):
            parts.append(self._jpeg(item))
        elif isinstance(item, Event) and item.snapshot is not None:
            parts.append(item.snapshot.jpeg)
        try:
            if self.mode == "pub":
                self._send_now(parts)
                sent = True
            else:
                sent = self._send_waiting(parts)
        except zmq.Again:
            sent = False
        except zmq.ZMQError as e:
            raise SinkError(f"zmq sink: cannot send on {self.endpoint}: {zmq.strerror(e.errno)}") from None
        if sent:
            self.sent[stream] += 1
        else:
            self.dropped[stream] += 1

    def close(self) -> None:
        """Close the socket, letting ZeroMQ deliver what is queued for up to `linger_ms` (not at
        all after `interrupt()`); log what was dropped, if anything. Safe to call twice."""
        if self._sock is not None:
            self._sock.close(linger=0 if self._aborted else self.linger_ms)
            self._sock = None
            if self.dropped:
                each = ", ".join(f"{stream}: {n}" for stream, n in sorted(self.dropped.items()))
                log.warning("zmq sink %s: %d message(s) dropped (%s)", self.endpoint,
                            sum(self.dropped.values()), each)
        if self._guard is not None:
            self._refused = Counter(self._guard.refused)
            self._guard.close()
            self._guard = None
        if self._ctx is not None:
            self._term(self._ctx)
            self._ctx = None

    # -- parts --------------------------------------------------------------------------------

    def _term(self, ctx: zmq.Context) -> None:
        """End the context, which waits while ZeroMQ delivers what is still queued (`linger_ms`);
        on another thread, so that `interrupt()` ends the wait at once (ZeroMQ then finishes on
        its own, or the process ends)."""
        ended = threading.Event()
        threading.Thread(target=lambda: (ctx.term(), ended.set()), name="zmq-linger", daemon=True).start()
        while not ended.wait(_POLL_MS / 1000):
            if self._aborted:
                log.warning("zmq sink %s: closed without waiting for queued messages to be delivered",
                            self.endpoint)
                return

    def _send_now(self, parts: list[bytes]) -> None:
        """Send a multipart message or raise `zmq.Again` (then nothing is sent). Part by part:
        several times faster than pyzmq's send_multipart. Once the first part is taken, ZeroMQ
        takes the rest of the message whole."""
        sock = self._sock
        sock.send(parts[0], zmq.NOBLOCK | zmq.SNDMORE)
        for part in parts[1:-1]:
            sock.send(part, zmq.SNDMORE)
        sock.send(parts[-1])

    def _send_waiting(self, parts: list[bytes]) -> bool:
        """Push mode: send, waiting while the consumer's queue is full or no consumer is there, for
        at most `send_timeout_s`, and not at all after `interrupt()` or while `dropping` (unless a
        consumer has connected since). False: not sent (the caller counts the drop)."""
        try:
            self._send_now(parts)
        except zmq.Again:
            if self._aborted:
                return False
            if self.dropping:
                self._count_peers()
                if self._connected == self._connected_before:
                    return False
                self._resume()  # a consumer came: wait for it as usual
        else:
            if self.dropping:
                self._resume()
            return True
        started = time.monotonic()
        deadline = started + self.send_timeout_s
        try:
            while not self._aborted:
                if self._sock.poll(_POLL_MS, zmq.POLLOUT):
                    try:
                        self._send_now(parts)
                        return True
                    except zmq.Again:
                        pass
                if time.monotonic() >= deadline:
                    self.dropping = True
                    self._dropped_before = sum(self.dropped.values())
                    self._count_peers()
                    self._connected_before = self._connected
                    log.warning("zmq sink %s: no consumer took a message for %g s (mode push, "
                                "send_timeout_s); dropping messages until one does",
                                self.endpoint, self.send_timeout_s)
                    break
            return False
        finally:
            self.waited_s += time.monotonic() - started

    def _resume(self) -> None:
        self.dropping = False
        log.warning("zmq sink %s: a consumer takes messages again (%d dropped meanwhile)",
                    self.endpoint, sum(self.dropped.values()) - self._dropped_before)

    def _jpeg(self, result: FrameResult) -> bytes:
        from .draw import StreamAnnotators, encode_jpeg

        if self.annotate and self._annotators is None:
            self._annotators = StreamAnnotators()
        image = self._annotators.annotate(result) if self.annotate else result.frame.image
        try:
            return encode_jpeg(image, self.jpeg_quality)
        except ValueError:
            raise SinkError(f"zmq sink {self.endpoint}: cannot encode frame {result.frame.index} "
                            f"of {result.frame.stream!r} as JPEG") from None

    def _count_peers(self) -> None:
        """Read what the socket says about its peers: (un)subscriptions (pub), or the connections
        the guard admitted (push). Cheap; called on stats reports and while waiting, never per frame."""
        if self.mode == "pub":
            while True:
                try:
                    event = self._sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    return
                if not topic_allowed(event[1:]):
                    continue  # it cannot match a topic of ours: no subscriber
                if event[:1] == b"\x01":
                    self.peers += 1
                elif event[:1] == b"\x00":
                    self.peers = max(0, self.peers - 1)
        elif self._guard is not None:
            self.peers = self._guard.admitted_now
            self._connected = self._guard.admitted

    def _publisher_stats(self, stream: str) -> dict[str, Any]:
        stats: dict[str, Any] = {"mode": self.mode, "sent": self.sent[stream], "dropped": self.dropped[stream]}
        refused = self.refusals()
        if refused:
            stats["refused"] = refused
        if self.mode == "pub":
            stats["subscriptions"] = self.peers
        else:
            stats["consumers"] = self.peers
            stats["waited_ms"] = round(self.waited_s * 1000, 1)
            stats["dropping"] = self.dropping
        return stats


__all__ = ["ZmqSink", "DEFAULT_LINGER_MS", "DEFAULT_SEND_TIMEOUT_S"]
