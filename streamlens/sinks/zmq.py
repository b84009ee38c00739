"""ZeroMQ PUB sink: every message goes out as `[topic, payload]`, never blocking the pipeline.

Subscribers filter by topic prefix (`frame.cam1`, `frame.`, `eos.`). A subscriber that is slow or
gone costs nothing: when its queue (the high-water mark) is full, ZeroMQ drops for it alone.

Example:
    >>> sink = ZmqSink("tcp://127.0.0.1:0")   # doctest: +SKIP
"""

from __future__ import annotations

import zmq

from ..errors import SinkError
from ..schema import topic
from .base import Sink


class ZmqSink(Sink):
    name = "zmq"

    def __init__(self, endpoint: str, *, hwm: int = 1000, linger_ms: int = 1000):
        self.endpoint = endpoint
        self.hwm = hwm
        self.linger_ms = linger_ms
        self.sent = 0
        self.dropped = 0
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None

    def open(self) -> None:
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PUB)
        self._sock.setsockopt(zmq.SNDHWM, self.hwm)
        self._sock.setsockopt(zmq.LINGER, self.linger_ms)
        try:
            self._sock.bind(self.endpoint)
        except zmq.ZMQError as e:
            self.close()
            raise SinkError(f"zmq sink: cannot bind {self.endpoint}: {e.strerror}") from None
        self.endpoint = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()

    def write(self, item, message, payload) -> None:
        try:
            self._sock.send_multipart([topic(message), payload], flags=zmq.NOBLOCK)
            self.sent += 1
        except zmq.Again:
            self.dropped += 1

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None
