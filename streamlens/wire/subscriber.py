"""Reading a pipeline's results over ZeroMQ: `Subscriber`, and gap detection from `seq`.

A `Subscriber` connects a SUB socket (or, for a sink in `mode: push`, a PULL socket) to a zmq
sink's endpoint and yields one `Message` per ZeroMQ message: the topic, the schema-v1 message as
a dict (JSON and MessagePack payloads alike), and the JPEG frame when the sink sends one.

`seq` counts each stream's messages from 0 without gaps, so loss shows as a jump: the message
after a jump carries a `Gap` (also kept in `Subscriber.gaps`). The first message seen of a stream
sets where counting starts (a subscriber that joins late is not missing anything); a stream whose
`seq` goes back (the publisher restarted) starts again; a stream starts again after its `eos`.
Subscribe to a stream's `frame` topic to see its gaps: messages filtered out by topic are not
counted as lost.

Topics are `<type>.<stream>.` (see `streamlens.wire.codec`); a filter that names a type and a stream is
exact, `frame.cam1` receives cam1's frames and never cam10's. `streams=["cam1"]` receives
everything of cam1 (its frame, eos, stats and event topics) and nothing else.

Example:
    >>> with Subscriber("tcp://127.0.0.1:5555", topics=["frame.cam1", "eos."]) as sub:  # doctest: +SKIP
    ...     for msg in sub:
    ...         if msg.gap:
    ...             print("lost", msg.gap.missing, "messages of", msg.stream)
    ...         if msg.type == "eos":
    ...             break
    ...         print(msg.seq, len(msg.data["objects"]))
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from ..errors import StreamlensError
from . import codec, keys


class SubscriberError(StreamlensError):
    """A subscriber cannot connect (bad endpoint, unreadable key file), named in the message."""


@dataclass(frozen=True, slots=True)
class Gap:
    """Messages of `stream` lost before the one with `seq == received`: `expected .. received-1`.

    Example:
        >>> Gap("cam1", expected=41, received=57).missing
        16
    """

    stream: str
    expected: int
    received: int

    @property
    def missing(self) -> int:
        return self.received - self.expected

    def __str__(self) -> str:
        last = self.received - 1
        span = f"seq {self.expected}" if last == self.expected else f"seq {self.expected} to {last}"
        return f"{self.stream}: {self.missing} message(s) lost ({span})"


@dataclass(slots=True)
class Message:
    """One message received: `data` is the schema-v1 dict; `jpeg` the frame image, if sent;
    `gap` the loss found just before this message, if any."""

    topic: str
    data: dict[str, Any]
    jpeg: bytes | None = None
    gap: Gap | None = None

    @property
    def type(self) -> str:
        return self.data.get("type", "")

    @property
    def stream(self) -> str:
        return self.data.get("stream", "")

    @property
    def seq(self) -> int | None:
        return self.data.get("seq")


#: the messages numbered by a `seq` of their own per stream, apart from its frames'
SEQ_KINDS = ("event", "embedding")


class SeqTracker:
    """Finds gaps in each stream's `seq` (see the module docs for the rules).

    Example:
        >>> t = SeqTracker()
        >>> [t.check("cam1", s) for s in (5, 6, 9)]
        [None, None, Gap(stream='cam1', expected=7, received=9)]
    """

    def __init__(self) -> None:
        self._next: dict[tuple[str, str], int] = {}

    def check(self, stream: str, seq: int, *, last: bool = False, kind: str = "frame") -> Gap | None:
        """Note message `seq` of `stream` (`last`: it is the stream's eos); the gap before it.
        `kind`: "frame" for results and the eos, "event" for events and "embedding" for embeddings,
        which have a `seq` of their own."""
        expected = self._next.get((stream, kind))
        gap = Gap(stream, expected, seq) if expected is not None and seq > expected else None
        if last:
            for each in ("frame", *SEQ_KINDS):
                self._next.pop((stream, each), None)
        else:
            self._next[(stream, kind)] = seq + 1
        return gap


class Subscriber:
    """Connects to a zmq sink and receives its messages; `close()` it, or use it in `with`.

    - `topics`: topic prefixes to receive (`frame.`, `eos.`, `frame.cam1`: exact, see
      `codec.exact_filter`); `streams`: stream names whose every message to receive. Neither given:
      everything.
    - `pull`: connect a PULL socket, for a sink in `mode: push` (topics are then filtered here).
    - `hwm`: how many messages this side queues before ZeroMQ drops (pub) or the sender waits.
    - `server_key`: the publisher's public key file, to connect with CurveZMQ; `client_key`: this
      subscriber's secret key file (a throwaway key pair without it).
    """

    def __init__(self, endpoint: str, topics: Iterable[str] = (), *, streams: Iterable[str] = (),
                 pull: bool = False, hwm: int = 1000, server_key: str | Path | None = None,
                 client_key: str | Path | None = None, context: zmq.Context | None = None):
        self.endpoint = endpoint
        streams = list(streams)
        for name in streams:
            if not name or codec.TOPIC_END in name:
                raise SubscriberError(f"stream {name!r}: a stream name is not empty and holds no '.' "
                                      "(the dot ends a topic)")
        self.topics = ([codec.exact_filter(t) for t in topics]
                       + [t for name in streams for t in codec.stream_topics(name)]) or [""]
        self.pull = pull
        self.gaps: list[Gap] = []
        self.received = 0
        self._tracker = SeqTracker()
        self._own_context = context is None
        self._ctx = context or zmq.Context()
        self._sock = self._ctx.socket(zmq.PULL if pull else zmq.SUB)
        try:
            self._sock.rcvhwm = hwm
            self._sock.linger = 0
            self._sock.setsockopt(zmq.MAXMSGSIZE, codec.MAX_DOWNSTREAM_BYTES)  # more: that publisher is dropped
            if server_key is not None:
                keys.make_client(self._sock, server_key, client_key)
            elif client_key is not None:
                raise SubscriberError(f"client key {client_key} given without the server's public key")
            if not pull:
                for t in self.topics:
                    self._sock.subscribe(t.encode())
            self._sock.connect(endpoint)
        except zmq.ZMQError as e:
            self.close()
            raise SubscriberError(f"cannot connect to {endpoint!r}: {zmq.strerror(e.errno)}") from None
        except StreamlensError as e:
            self.close()
            raise SubscriberError(str(e)) from None

    @property
    def missing(self) -> int:
        """Messages lost so far, summed over every gap."""
        return sum(g.missing for g in self.gaps)

    def recv(self, timeout: float | None = None) -> Message | None:
        """The next message; None if none comes within `timeout` seconds (None: wait forever).

        A payload that is neither JSON nor MessagePack raises `codec.PayloadError`."""
        wait_ms = None if timeout is None else max(0, int(timeout * 1000))
        while True:
            if wait_ms is not None and not self._sock.poll(wait_ms, zmq.POLLIN):
                return None
            parts = self._recv_parts()
            topic = parts[0].decode("utf-8", "replace")
            if self.pull and not any(topic.startswith(t) for t in self.topics):
                continue
            message = Message(topic, codec.decode(parts[1]) if len(parts) > 1 else {},
                              parts[2] if len(parts) > 2 else None)
            self.received += 1
            seq = message.seq
            if isinstance(seq, int) and message.type in ("frame", "eos", *SEQ_KINDS):
                message.gap = self._tracker.check(message.stream, seq, last=message.type == "eos",
                                                  kind=message.type if message.type in SEQ_KINDS else "frame")
                if message.gap is not None:
                    self.gaps.append(message.gap)
            return message

    def _recv_parts(self) -> list[bytes]:
        """One multipart message, part by part (several times faster than recv_multipart)."""
        sock = self._sock
        parts = [sock.recv()]
        while sock.rcvmore:
            parts.append(sock.recv())
        return parts

    def __iter__(self) -> Iterator[Message]:
        """Every message, as it comes, until the subscriber is closed."""
        while self._sock is not None:
            yield self.recv()

    def close(self) -> None:
        """Close the socket (and the context, if this subscriber made it). Safe to call twice."""
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
        if self._own_context and self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Subscriber", "Message", "Gap", "SeqTracker", "SubscriberError"]
