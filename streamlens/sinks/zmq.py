"""The ZeroMQ sink: results fanned out to any number of subscribers, or handed reliably to one consumer.

Every message is multipart `[topic, payload]` (see `streamlens.wire`): topic `<type>.<stream>`,
payload one schema-v1 message in JSON (default) or MessagePack (`format: msgpack`). With
`frames: jpeg`, frame messages carry the (annotated) frame as a JPEG third part.

Two modes:

- `mode: pub` (default): an XPUB socket binds `endpoint`; SUB sockets connect and filter by topic
  prefix. Sends never block: each subscriber has a queue of `hwm` messages in the publisher (and as
  many again in its own socket); once a subscriber's queue is full, ZeroMQ drops further messages
  *for that subscriber alone*, so a slow, stuck or vanished subscriber never slows the pipeline or
  the other subscribers. ZeroMQ does not tell a PUB socket when it drops for one subscriber: that
  subscriber sees the loss as a gap in `seq` (`streamlens subscribe` and `Subscriber` report it).
  A subscriber that joins late gets messages from then on.
- `mode: push`: a PUSH socket binds `endpoint`; PULL sockets connect. Nothing is dropped: when the
  consumer's queue is full (or no consumer is connected) the send waits, the sink's queue fills
  and the pipeline slows to the consumer's pace (a file source waits; a live source drops its
  oldest frames at the input, counted in `dropped`). With several PULL consumers each message goes
  to one of them (round robin): a work queue, not a fan-out. `send_timeout_s` bounds the wait.
  Messages already queued to a consumer that then disconnects are lost with it.

Use pub for dashboards, monitors and anything live: many readers, latest data, no reader may hold
up the cameras. Use push for a consumer that must see every result (a database writer, an
archiver, an evaluation job), accepting that it sets the pace.

`wait_subscribers: N` holds `open()` (so the pipeline's start) until N subscriptions have arrived
(pub: each topic a SUB socket subscribes to counts once; push: N consumers connected), for at most
`wait_timeout_s` seconds, after which the pipeline starts anyway with a warning. Subscribers that
start first thus lose nothing to ZeroMQ's slow-joiner effect.

Stats: the runtime hands this sink a `stats` report per stream about once a second; it is
published as `stats.<stream>` with a `publisher` object added: `sent` and `dropped` (messages of
this stream sent, and refused by the socket), `subscriptions` (pub) or `consumers` (push) now, and
`waited_ms` (push: time spent waiting for the consumer).

CurveZMQ: `curve: {server_secret: FILE, authorized: DIR}` encrypts the traffic with the keys in
`FILE` (see `streamlens.keys`, `streamlens keygen`) and, with `authorized`, lets in only the
subscribers whose public keys are in `DIR`.

Example:
    >>> import zmq
    >>> from streamlens.frame import StreamEnd
    >>> from streamlens.schema import dumps, eos_message
    >>> sink = ZmqSink("tcp://127.0.0.1:*")
    >>> sink.open()
    >>> sub = zmq.Context.instance().socket(zmq.SUB)
    >>> _ = sub.connect(sink.endpoint); sub.subscribe(b"eos.")
    >>> sink.wait_for(1, timeout_s=5)
    True
    >>> end = StreamEnd("cam1", seq=0, frames=0)
    >>> sink.write(end, eos_message(end), dumps(eos_message(end)))
    >>> sub.recv_multipart()[0]
    b'eos.cam1'
    >>> sink.close(); sub.close()
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import cv2
import zmq

from .. import keys, wire
from ..draw import FrameAnnotator
from ..errors import SinkError, StreamlensError
from ..frame import FrameResult, StatsReport, StreamEnd
from ..schema import topic
from .base import Sink

log = logging.getLogger("streamlens.sinks.zmq")

MODES = ("pub", "push")
FRAME_PAYLOADS = ("none", "jpeg")
#: how long close() lets ZeroMQ deliver what is still queued: short for pub (a stuck subscriber
#: must not hold up the exit; what is already in the kernel's socket buffers is delivered anyway),
#: long for push (the consumer must get everything)
DEFAULT_LINGER_MS = {"pub": 200, "push": 10_000}
_POLL_MS = 50


class ZmqSink(Sink):
    """Publishes each result, stream end and stats report (see the module docs for the keys)."""

    name = "zmq"
    wants_stats = True

    def __init__(
        self,
        endpoint: str,
        *,
        mode: str = "pub",
        format: str = "json",
        hwm: int = 1000,
        wait_subscribers: int = 0,
        wait_timeout_s: float = 30.0,
        frames: str = "none",
        jpeg_quality: int = 80,
        annotate: bool = True,
        send_timeout_s: float = 0.0,
        linger_ms: int | None = None,
        curve: dict[str, Any] | None = None,
    ):
        if mode not in MODES:
            raise ValueError(f"zmq sink: unknown mode {mode!r} ({', '.join(MODES)})")
        if format not in wire.FORMATS:
            raise ValueError(f"zmq sink: unknown format {format!r} ({', '.join(wire.FORMATS)})")
        if frames not in FRAME_PAYLOADS:
            raise ValueError(f"zmq sink: unknown frames {frames!r} ({', '.join(FRAME_PAYLOADS)})")
        self.endpoint = endpoint
        self.mode = mode
        self.format = format
        self.hwm = hwm
        self.wait_subscribers = wait_subscribers
        self.wait_timeout_s = wait_timeout_s
        self.frames = frames
        # a publisher never waits; encoding a JPEG per frame is work for a thread of its own
        self.inline = mode == "pub" and frames == "none"
        self.jpeg_quality = jpeg_quality
        self.annotate = annotate
        self.send_timeout_s = send_timeout_s
        self.linger_ms = DEFAULT_LINGER_MS[mode] if linger_ms is None else linger_ms
        self.curve = dict(curve or {})
        #: messages handed to ZeroMQ, and messages the socket refused, per stream
        self.sent: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        #: pub: subscriptions now in; push: consumers connected now
        self.peers = 0
        self._interrupted = False
        #: push: seconds spent waiting for a consumer to take messages
        self.waited_s = 0.0
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None
        self._auth: Any = None
        self._annotators: dict[str, FrameAnnotator] = {}

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
            else:
                self._monitor = self._sock.get_monitor_socket(
                    zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
            if self.curve:
                self._secure()
            self._sock.bind(self.endpoint)
        except zmq.ZMQError as e:
            self.close()
            raise SinkError(f"zmq sink: cannot bind {self.endpoint}: {zmq.strerror(e.errno)}") from None
        except StreamlensError as e:
            self.close()
            raise SinkError(f"zmq sink {self.endpoint}: {e}") from None
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        if self.wait_subscribers and not self.wait_for(self.wait_subscribers, self.wait_timeout_s):
            what = "subscriptions" if self.mode == "pub" else "consumers"
            log.warning("zmq sink %s: %d of %d %s after %g s; starting anyway", self.endpoint,
                        self.peers, self.wait_subscribers, what, self.wait_timeout_s)

    def interrupt_open(self) -> None:
        """End a `wait_subscribers` wait now (Ctrl-C while waiting)."""
        self._interrupted = True

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
            watched = self._sock if self.mode == "pub" else self._monitor
            watched.poll(min(_POLL_MS, max(1, int(left * 1000))), zmq.POLLIN)

    def write(self, item: FrameResult | StreamEnd | StatsReport, message: dict[str, Any],
              payload: bytes) -> None:
        """Send one message: at once or never (pub), or waiting for the consumer (push)."""
        if self._sock is None:
            raise SinkError(f"zmq sink: {self.endpoint} is not open")
        stream = message["stream"]
        if isinstance(item, StatsReport):
            self._count_peers()
            message = {**message, "publisher": self._publisher_stats(stream)}
            payload = wire.encode(message, self.format)
        elif self.format != "json":
            payload = wire.encode(message, self.format)
        parts = [topic(message), payload]
        if self.frames == "jpeg" and isinstance(item, FrameResult):
            parts.append(self._jpeg(item))
        try:
            if self.mode == "pub":
                self._send_now(parts)
            else:
                self._send_waiting(parts)
        except zmq.Again:
            self.dropped[stream] += 1
            return
        except zmq.ZMQError as e:
            raise SinkError(f"zmq sink: cannot send on {self.endpoint}: {zmq.strerror(e.errno)}") from None
        self.sent[stream] += 1

    def close(self) -> None:
        """Close the socket, letting ZeroMQ deliver what is queued for up to `linger_ms`.
        Safe to call twice."""
        if self._monitor is not None:
            self._sock.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    # -- parts --------------------------------------------------------------------------------

    def _secure(self) -> None:
        """CurveZMQ server keys, and an authenticator when only known subscribers may connect."""
        keys.make_server(self._sock, self.curve["server_secret"])
        authorized = self.curve.get("authorized")
        if authorized is not None:
            from zmq.auth.thread import ThreadAuthenticator

            if not Path(authorized).is_dir():
                raise keys.KeyFileError(f"{authorized}: no such folder of authorized public keys")
            self._auth = ThreadAuthenticator(self._ctx, log=log.getChild("auth"))
            self._auth.start()
            self._auth.configure_curve(domain="*", location=str(authorized))

    def _send_now(self, parts: list[bytes]) -> None:
        """Send a multipart message or raise `zmq.Again` (then nothing is sent). Part by part:
        several times faster than pyzmq's send_multipart. Once the first part is taken, ZeroMQ
        takes the rest of the message whole."""
        sock = self._sock
        sock.send(parts[0], zmq.NOBLOCK | zmq.SNDMORE)
        for part in parts[1:-1]:
            sock.send(part, zmq.SNDMORE)
        sock.send(parts[-1])

    def _send_waiting(self, parts: list[bytes]) -> None:
        """Push mode: send, waiting while the consumer's queue is full or no consumer is there."""
        try:
            self._send_now(parts)
            return
        except zmq.Again:
            pass
        started = time.monotonic()
        try:
            while True:
                if self._sock.poll(_POLL_MS, zmq.POLLOUT):
                    try:
                        self._send_now(parts)
                        return
                    except zmq.Again:
                        pass
                waited = time.monotonic() - started
                if self.send_timeout_s and waited >= self.send_timeout_s:
                    raise SinkError(f"zmq sink {self.endpoint}: no consumer took a message for "
                                    f"{self.send_timeout_s:g} s (mode push, send_timeout_s)")
        finally:
            self.waited_s += time.monotonic() - started

    def _jpeg(self, result: FrameResult) -> bytes:
        image = result.frame.image
        if self.annotate:
            size = (result.frame.width, result.frame.height)
            annotator = self._annotators.get(result.frame.stream)
            if annotator is None or annotator.resolution != size:
                annotator = self._annotators[result.frame.stream] = FrameAnnotator(size)
            image = annotator.annotate(image, result.detections)
        ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])
        if not ok:
            raise SinkError(f"zmq sink {self.endpoint}: cannot encode frame {result.frame.index} "
                            f"of {result.frame.stream!r} as JPEG")
        return data.tobytes()

    def _count_peers(self) -> None:
        """Read what the socket says about its peers: (un)subscriptions (pub) or monitor events
        (push). Cheap; called on stats reports and while waiting, never per frame."""
        if self.mode == "pub":
            while True:
                try:
                    event = self._sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    return
                if event[:1] == b"\x01":
                    self.peers += 1
                elif event[:1] == b"\x00":
                    self.peers = max(0, self.peers - 1)
        else:
            from zmq.utils.monitor import recv_monitor_message

            while self._monitor.poll(0):
                event = recv_monitor_message(self._monitor)["event"]
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self.peers += 1
                elif event == zmq.EVENT_DISCONNECTED:
                    self.peers = max(0, self.peers - 1)

    def _publisher_stats(self, stream: str) -> dict[str, Any]:
        stats: dict[str, Any] = {"mode": self.mode, "sent": self.sent[stream], "dropped": self.dropped[stream]}
        if self.mode == "pub":
            stats["subscriptions"] = self.peers
        else:
            stats["consumers"] = self.peers
            stats["waited_ms"] = round(self.waited_s * 1000, 1)
        return stats


__all__ = ["ZmqSink", "MODES", "FRAME_PAYLOADS"]
