"""The supervisor's forwarders: each sink of the file (but video sinks) fed by every engine.

A zmq sink's endpoint is bound here, and its forwarder joins the engines' shares into it (pub:
XSUB to XPUB; push: PULL to PUSH, each message waiting for a consumer at most the sink's
`send_timeout_s`). The bound socket's peers are held to the sink's `peers` bounds
(streamlens/wire/peers.py). Upstream, pub passes the engines subscriptions and nothing else, each
distinct topic once (when its first subscriber takes it; its unsubscription when its last one
leaves), only topics that can match the contract, at most `peers.topics` of them (more are
refused, counted as `topics`), none over `MAX_UPSTREAM_BYTES`: what the engines keep stays small
whatever the subscribers do. a jsonl, mqtt or webhook sink is written here from
what the engines push to it (`WRITTEN_HERE`).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time

import zmq

from ..config import SinkConfig
from ..frame import Snapshot as EventSnapshot
from ..frame import StreamEnd
from ..wire.codec import MAX_DOWNSTREAM_BYTES, MAX_UPSTREAM_BYTES, encode, is_subscription
from ..wire.peers import TopicTable
from ..wire.schema import eos_message, topic
from ..wire.keys import RunKeys
from .engine_config import WRITTEN_HERE

log = logging.getLogger("streamlens.scale")

#: once every engine has ended, how long a forwarder goes on until nothing more comes
DRAIN_IDLE_S = 0.3
_POLL_MS = 100


class _Relayed:
    """A message an engine pushed, as the `item` a sink written here is given: the snapshot an
    event carried as its third part, if any (the message itself is the sink's `message`)."""

    __slots__ = ("snapshot",)

    def __init__(self, parts: list[bytes], message: dict):
        self.snapshot = None
        shot = message.get("snapshot")
        if len(parts) > 2 and message.get("type") == "event" and isinstance(shot, dict):
            self.snapshot = EventSnapshot(parts[2], shot.get("kind", "crop"), shot.get("frame", -1), shot.get("path"))


class Forwarder:
    """One sink of the file, fed by every engine: a zmq endpoint bound here, or a sink written here
    (jsonl, mqtt, webhook) from what the engines push."""

    def __init__(self, sink: SinkConfig, where: str, keys: RunKeys | None = None):
        self.sink, self.where = sink, where
        self.ctx = zmq.Context()
        self.dropped = 0
        pub = sink.type == "zmq" and sink.mode == "pub"
        #: the line that says why the sink written here failed (then what comes is dropped), or None
        self.error: str | None = None
        #: the last time (time.monotonic()) nothing was left to forward: whatever a dead engine had
        #: sent before then has been forwarded, and its restart may publish without its messages
        #: coming out interleaved with the old ones
        self.caught_up_at = 0.0
        self._guard = None  # the bound socket's PeerGuard
        self._topics = TopicTable(sink.peers.topics) if pub else None
        self._sink = None  # a sink written here
        self._joined: dict[int, str] = {}  # engine -> the endpoint its share comes from
        self._joins: queue.SimpleQueue = queue.SimpleQueue()
        self._ends: queue.SimpleQueue = queue.SimpleQueue()  # stream ends no engine will send (`end`)
        self._finishing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"forward-{where}", daemon=True)
        self.front = self.ctx.socket(zmq.XSUB if pub else zmq.PULL)
        self.front.setsockopt(zmq.MAXMSGSIZE, MAX_DOWNSTREAM_BYTES)
        if keys is not None:  # the engines are Ray actors: their sockets admit this key only (ray.py)
            keys.make_client(self.front)
        self.back = None

    def join(self, engine: int, endpoint: str) -> None:
        """Take `engine`'s share from `endpoint` from now on (any thread; a new endpoint replaces its old one)."""
        self._joins.put((engine, endpoint))

    def end(self, end: StreamEnd) -> None:
        """Send a stream's `eos` from here (any thread, before `finish`): its engine will not, having
        been stopped before it could start again, or killed at the end of the run. Encoded as the
        engines encode theirs for this sink."""
        self._ends.put(end)

    def start(self) -> None:
        from ..errors import SinkError, StreamlensError

        sink = self.sink
        if sink.type in WRITTEN_HERE:
            from ..sinks import build_sink

            self._sink = build_sink(sink, {}, where=self.where)
            self._sink.open()
        else:
            from ..sinks.zmq import DEFAULT_LINGER_MS, DEFAULT_SEND_TIMEOUT_S, guard

            self.back = self.ctx.socket(zmq.XPUB if sink.mode == "pub" else zmq.PUSH)
            self.back.sndhwm = sink.hwm
            self.back.linger = sink.linger_ms if sink.linger_ms is not None else DEFAULT_LINGER_MS[sink.mode]
            if sink.mode == "pub":  # not verbose: each topic comes once (see the module)
                self.back.setsockopt(zmq.MAXMSGSIZE, MAX_UPSTREAM_BYTES)  # more: the peer is dropped
            else:
                self.back.sndtimeo = int(1000 * (sink.send_timeout_s or DEFAULT_SEND_TIMEOUT_S))
            try:
                curve = sink.curve.model_dump() if sink.curve is not None else None
                self._guard = guard(self.ctx, self.back, self.where, sink.peers, curve)
                self.back.bind(sink.endpoint)
            except zmq.ZMQError as e:
                raise SinkError(f"{self.where}.endpoint: cannot bind {sink.endpoint}: {zmq.strerror(e.errno)}") from None
            except StreamlensError as e:
                raise SinkError(f"{self.where}.curve: {e}") from None
        self._thread.start()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.front, zmq.POLLIN)
        if self.back is not None and self.sink.mode == "pub":
            poller.register(self.back, zmq.POLLIN)  # subscriptions, passed upstream
        idle_since = None
        while True:
            self._take_joins()
            self._take_ends()
            events = dict(poller.poll(_POLL_MS))
            if self.back is not None and self.back in events:
                upstream = self.back.recv_multipart()
                if is_subscription(upstream):  # a peer that speaks XSUB may send anything else
                    self._subscription(upstream[0])
            if self.front in events:
                idle_since = None
                parts = self.front.recv_multipart()
                if self.error is None:
                    try:
                        self._forward(parts)
                    except Exception as error:  # noqa: BLE001 - told to the supervisor, which ends the run
                        self._failed(error)
                else:
                    self.dropped += 1  # the sink has failed: taken, so that no engine waits on it
                if not self.front.poll(0):
                    self.caught_up_at = time.monotonic()
            else:
                self.caught_up_at = time.monotonic()
            if self.front not in events and self._finishing.is_set():
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= DRAIN_IDLE_S:
                    self._take_ends()
                    return

    def _subscription(self, message: bytes) -> None:
        """Pass a (un)subscription to the engines if the table of topics says so."""
        topic = message[1:]
        passed = self._topics.subscribe(topic) if message[:1] == b"\x01" else self._topics.unsubscribe(topic)
        if passed:
            self.front.send(message)

    def refusals(self) -> dict[str, int]:
        """Peers refused or disconnected, and topics not passed on, by reason (wire/peers.py)."""
        refused = dict(self._guard.refused) if self._guard is not None else {}
        if self._topics is not None and self._topics.refused:
            refused["topics"] = self._topics.refused
        return refused

    def _failed(self, error: BaseException) -> None:
        from ..errors import StreamlensError

        if isinstance(error, StreamlensError):
            self.error = str(error)
        else:
            log.debug("%s failed", self.where, exc_info=error)
            self.error = f"{self.where} ({self.sink.type}): {type(error).__name__}: {error}"

    def _take_joins(self) -> None:
        while not self._joins.empty():
            engine, endpoint = self._joins.get()
            old = self._joined.get(engine)
            if old == endpoint:
                continue
            if old is not None:
                self.front.disconnect(old)
            self.front.connect(endpoint)
            self._joined[engine] = endpoint

    def _take_ends(self) -> None:
        while not self._ends.empty():
            message = eos_message(self._ends.get())
            fmt = self.sink.format if self._sink is None else "json"  # what the engines push here is JSON
            if self.error is None:
                try:
                    self._forward([topic(message), encode(message, fmt)])
                except Exception as error:  # noqa: BLE001 - told to the supervisor, which ends the run
                    self._failed(error)

    def _forward(self, parts: list[bytes]) -> None:
        if self._sink is not None:
            if parts[0].startswith(b"stats.") and not self._sink.wants_stats:
                return  # a jsonl file holds results, events and stream ends
            if self.sink.type == "jsonl":  # a line as it came: nothing to decode
                self._sink.write(None, None, parts[1])
                return
            message = json.loads(parts[1])
            self._sink.write(_Relayed(parts, message), message, parts[1])
            return
        try:
            self.back.send_multipart(parts, flags=zmq.NOBLOCK if self.sink.mode == "pub" else 0)
        except zmq.Again:  # pub: no subscriber's queue has room; push: no consumer took it in time
            self.dropped += 1

    def finish(self) -> None:
        """Forward what is still coming, then close (once every engine has ended)."""
        self._finishing.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            if self._sink is not None:
                try:
                    self._sink.close()
                except Exception as error:  # noqa: BLE001 - a flush that fails: the run fails, saying so
                    self._failed(error)
        finally:
            self.front.close(linger=0)
            if self.back is not None:
                self.back.close()
            if self._guard is not None:
                self._guard.close()
            self.ctx.term()


__all__ = ["Forwarder", "DRAIN_IDLE_S"]
