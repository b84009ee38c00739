"""The MQTT sink: events, counts, stream states, stats and snapshots to an MQTT broker (paho-mqtt, MQTT
3.1.1), in a topic layout that Home Assistant and Frigate users map.

Topics, under `topic` (default `streamlens`); `<stream>` is a source's name, `<rule>` a line's or
a zone's name, `<label>` an object's label:

| topic | payload | retained |
|---|---|---|
| `<topic>/available` | `online` once connected; `offline` on a clean close, and as the last will | `retain` |
| `<topic>/<stream>/state` | `streaming` from the stream's first frame; at its end the eos `reason`: `end`, `truncated`, `stopped` or `error` | `retain` |
| `<topic>/<stream>/events` | every event message (schema-v1 JSON, as on every sink) | no |
| `<topic>/<stream>/<label>/snapshot` | an event's snapshot (JPEG bytes), when `snapshots` and the event has one | `retain` |
| `<topic>/<stream>/<rule>/in`, `<topic>/<stream>/<rule>/out` | a line's totals by direction (a plain number) | `retain` |
| `<topic>/<stream>/<rule>/<label>/in`, `.../<label>/out` | the same for one class | `retain` |
| `<topic>/<stream>/<rule>/count` | how many objects a zone holds now | `retain` |
| `<topic>/<stream>/stats` | the stream's stats message about once a second (`stats`), with `publisher` added | no |
| `<topic>/<stream>/eos` | the stream's eos message | no |
| `<topic>/<stream>/frame` | every frame message, when `frames` | no |

Counts are published when they change (a stream's first frame publishes them all), never every
frame. A `/`, `+` or `#` in a stream, rule or label becomes `_` in its topic level.

It never holds up the pipeline. The sink is `inline`: `write()` runs on the engine's thread and
only puts what a message publishes into the sink's own memory; a thread of the sink connects,
publishes and reconnects. Events, eos and frame messages wait in a queue of `queue_size`; when it is
full the oldest is dropped and counted (`drops()` per stream, `dropped_total`, the stats'
`publisher.dropped`, and a line at close). Counts, states, availability, snapshots and stats are
latest values, one per topic: a long outage keeps the newest of each (a value replaced by a newer
one before it went out is not a drop), and after every (re)connection the retained ones are
published again, so a broker that restarted without persistence has them back. At most
`MAX_INFLIGHT` messages are in paho's hands and not yet written to the socket (QoS 0), or
`MAX_INFLIGHT_ACKED` not yet acknowledged (QoS 1, 2: Mosquitto's own default limit, beyond which it
loses QoS 2 messages of an MQTT 3.1.1 client), so a slow broker fills the sink's bounded queue,
never an unbounded one.

Events, eos and frame messages reach the broker in the order written. While messages flow, the
thread sends them in batches at most every `BATCH_S` (50 ms; the first after a quiet spell at
once), each corked into full TCP segments, so a busy stream costs a wake-up of that thread per
batch, not per message; latest values go out at most every `LATEST_S` (0.1 s), each topic's newest
value then, so a count that changes on every frame is published ten times a second at most. A
count or a `state` may thus reach the broker up to `LATEST_S` after the event or eos written with it.

The broker away: `open()` neither waits for the broker nor fails when it is down, refuses, or its
host name cannot be resolved (a camera box boots before its broker, or before its DNS): one warning
line says why, and the thread retries (`streamlens.sources.backoff`: every 0.5 s for the first
minute of an outage, then doubling up to 30 s), with one line when it is connected again (and how
many messages were dropped meanwhile). A broker that accepts the connection but does not answer it
within `CONNACK_TIMEOUT_S` is retried the same way. QoS 0 messages that paho had not written when
the connection died are queued again (none goes out twice); QoS 1 and 2 ones are resent by paho
(QoS 1 may then arrive twice, as MQTT allows).

`close()` lets what is queued go out for at most `FLUSH_S` seconds while connected (not at all
while the broker is away, or after `interrupt()`), publishes `offline`, disconnects, and returns
within about `FLUSH_S + CLOSE_S`; what never went out is counted in `drops()` and logged in one line.

TLS (`tls: true`) checks the broker's certificate against the system's CAs, or `ca_file`, and its
host name. The user name and password come from the environment variables that `username_env` and
`password_env` name, read by `open()` and never logged; a password without a user name is an error.

Example:
    >>> sink = MqttSink("127.0.0.1", 1883, topic="home/cams")
    >>> (sink.topic, sink.inline, sink.wants_stats)
    ('home/cams', True, True)
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import socket
import ssl
import threading
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

from ..errors import SinkError
from ..frame import FrameResult, StatsReport, StreamEnd
from ..sources.backoff import Backoff
from ..wire.schema import dumps
from .base import Sink, os_reason

log = logging.getLogger("streamlens.sinks.mqtt")

#: how long `close()` lets queued messages go out while connected (seconds)
FLUSH_S = 2.0
#: how long `close()` then gives `offline` and the disconnection (seconds)
CLOSE_S = 0.5
#: messages handed to paho and not yet written (QoS 0) or acknowledged (QoS 1, 2)
MAX_INFLIGHT = 100
#: QoS 1 and 2: messages sent and not yet acknowledged (paho's default, Mosquitto's max_inflight_messages)
MAX_INFLIGHT_ACKED = 20
#: while messages flow, they go out in batches at most this often (seconds)
BATCH_S = 0.05
#: latest values (counts, states, snapshots, stats) go out at most this often, each topic's newest (seconds)
LATEST_S = 0.1
#: how long a broker that accepted the connection may take to answer it (seconds)
CONNACK_TIMEOUT_S = 10.0
#: the reconnection backoff: first wait and longest wait (seconds)
RETRY_S = (0.5, 30.0)
_POLL_S = 0.05  # a network step while waiting for the broker (acknowledgements, CONNACK)
_AWAKE, _AWAITING_LATEST, _IDLE = 0, 1, 2  # what the thread is waiting for
_IDLE_S = 1.0  # connected with nothing to do: how often paho's keepalive is served

_LEVEL = re.compile(r"[/+#]")


def level(name: str) -> str:
    """`name` as one topic level: `/`, `+` and `#` become `_` (an empty name too).

    Example:
        >>> level("gate/north"), level("car")
        ('gate_north', 'car')
    """
    return _LEVEL.sub("_", name) or "_"


class MqttSink(Sink):
    """Publishes events, counts, states, stats and snapshots to an MQTT broker (see the module docs)."""

    name = "mqtt"
    inline = True

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 1883,
        *,
        topic: str = "streamlens",
        qos: int = 0,
        client_id: str | None = None,
        keepalive_s: int = 30,
        tls: bool = False,
        ca_file: str | Path | None = None,
        username_env: str = "STREAMLENS_MQTT_USERNAME",
        password_env: str = "STREAMLENS_MQTT_PASSWORD",
        queue_size: int = 10_000,
        retain: bool = True,
        frames: bool = False,
        stats: bool = True,
        snapshots: bool = True,
    ):
        if not host:
            raise ValueError("mqtt sink: host is empty")
        if not 1 <= int(port) <= 65535:
            raise ValueError(f"mqtt sink: port must be 1..65535, got {port!r}")
        if qos not in (0, 1, 2):
            raise ValueError(f"mqtt sink: qos must be 0, 1 or 2, got {qos!r}")
        if not topic or re.search(r"[#+\s]", topic):
            raise ValueError(f"mqtt sink: topic must be non-empty, without #, + or spaces, got {topic!r}")
        if queue_size < 1 or keepalive_s < 1:
            raise ValueError("mqtt sink: queue_size and keepalive_s must be at least 1")
        self.host, self.port, self.topic, self.qos = host, int(port), topic.rstrip("/"), qos
        self.client_id = client_id
        self.keepalive_s = keepalive_s
        self.tls, self.ca_file = tls, ca_file
        self.username_env, self.password_env = username_env, password_env
        self.queue_size = queue_size
        self.retain, self.frames, self.snapshots = retain, frames, snapshots
        self.wants_stats = stats
        self._window = MAX_INFLIGHT if qos == 0 else MAX_INFLIGHT_ACKED  # messages in paho's hands
        self.available_topic = f"{self.topic}/available"
        #: messages that went out (written, or acknowledged above QoS 0) and dropped, per stream
        self.sent: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        #: whether the broker has accepted the connection (and it has not been lost since)
        self.connected = False
        #: connection attempts so far
        self.attempts = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: deque[tuple] = deque()  # (topic, payload, retain, stream): events, eos, frames
        self._latest: dict[str, tuple[bytes, bool]] = {}  # topic -> (payload, retain), not yet out
        self._retained: dict[str, bytes] = {}  # every retained latest value: published again on connect
        self._inflight: deque[tuple] = deque()  # (paho's MQTTMessageInfo, the message), the thread's own
        self._bases: dict[str, str] = {}  # stream -> "<topic>/<stream>/"
        self._counts: dict[str, dict | None] = {}  # stream -> the counts of its last frame
        self._closing = self._aborted = self._abandoned = False
        self._refused: str | None = None  # why the broker refused the connection being made
        self._sleeping = _AWAKE  # _IDLE: any write() wakes the thread; _AWAITING_LATEST: a queued message
        self._in_hand = 0  # messages the thread has taken from the queue and is handing to paho
        self._latest_at = 0.0  # when latest values last went out (time.monotonic())
        self._rule_topics: dict[tuple[str, str], str] = {}  # (stream's base, rule) -> "<base><rule>/"
        self._flush_until = 0.0
        self._client: Any = None
        self._thread: threading.Thread | None = None
        self._label = f"mqtt sink {host}:{port}"

    # -- life cycle ---------------------------------------------------------------------------

    def open(self) -> None:
        """Make the client (will, TLS, credentials) and start the thread that connects; never waits
        for the broker. Raises `SinkError` for a password without a user name, or a CA file that
        cannot be read."""
        import paho.mqtt.client as mqtt

        user = os.environ.get(self.username_env) or None
        password = os.environ.get(self.password_env) or None
        if password is not None and user is None:
            raise SinkError(f"{self.key('password_env')}: {self.password_env} is set but {self.username_env} "
                            "is not: MQTT sends a password only with a user name")
        client_id = self.client_id or f"streamlens-{socket.gethostname()}-{os.getpid()}"
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True,
                             protocol=mqtt.MQTTv311)
        client.will_set(self.available_topic, b"offline", self.qos, self.retain)
        client.max_inflight_messages_set(self._window)
        client.max_queued_messages_set(self._window)
        if user is not None:
            client.username_pw_set(user, password)
        if self.tls:
            try:
                client.tls_set(ca_certs=str(self.ca_file) if self.ca_file else None)
            except (OSError, ValueError) as e:
                what = (f"{self.key('ca_file')}: cannot read {self.ca_file}" if self.ca_file
                        else f"{self.key('tls')}: cannot set up TLS")
                raise SinkError(f"{what}: {_ssl_text(e)}") from None
        client.on_connect = self._on_connect
        self._client = client
        self._label = f"mqtt sink {self.host}:{self.port}" + (f" ({self.where})" if self.where else "")
        self._thread = threading.Thread(target=self._run, name=f"mqtt-{self.host}:{self.port}", daemon=True)
        self._thread.start()

    def interrupt(self) -> None:
        """From any thread (a second Ctrl-C): `close()` gives queued messages no time."""
        with self._wake:
            self._aborted = True
            self._flush_until = 0.0
            self._wake.notify_all()

    def drops(self) -> dict[str, int]:
        """Messages dropped per stream: pushed out of a full queue, or never delivered by `close()`."""
        with self._lock:
            return dict(self.dropped)

    @property
    def dropped_total(self) -> int:
        """Messages dropped so far, every stream's."""
        with self._lock:
            return sum(self.dropped.values())

    def pending(self) -> int:
        """Messages not yet out: queued, latest values waiting, being handed to paho, and in its hands."""
        with self._lock:
            return len(self._queue) + len(self._latest) + self._in_hand + len(self._inflight)

    def write(self, item: FrameResult | StreamEnd | StatsReport, message: dict[str, Any], payload: bytes) -> None:
        """Put what `message` publishes into the sink's queue and latest values; never waits."""
        if self._thread is None:
            raise SinkError(f"{self._label}: not open")
        kind, stream = message["type"], message["stream"]
        base = self._bases.get(stream)
        if base is None:
            base = self._bases[stream] = f"{self.topic}/{level(stream)}/"
        if kind == "frame":
            counts = message.get("counts")
            first = stream not in self._counts
            changed = None
            if counts is not None and (first or counts != self._counts[stream]):
                changed = self._changed_counts(self._counts.get(stream), base, counts)
            self._counts[stream] = counts
            if not (first or changed or self.frames):
                return
            with self._wake:
                if first:
                    self._set(base + "state", b"streaming", self.retain)
                if changed:
                    for name, value in changed.items():
                        self._set(name, value, self.retain)
                if self.frames:
                    self._put(base + "frame", payload, stream)
                if self._sleeping == _IDLE or (self.frames and self._sleeping):
                    self._wake.notify()
        elif kind == "event":
            snapshot = getattr(item, "snapshot", None) if self.snapshots else None
            with self._wake:
                self._put(base + "events", payload, stream)
                if snapshot is not None:
                    label = level(str(message.get("object", {}).get("label", "object")))
                    self._set(f"{base}{label}/snapshot", snapshot.jpeg, self.retain)
                if self._sleeping:
                    self._wake.notify()
        elif kind == "stats":
            publisher = {"connected": self.connected, "sent": self.sent[stream], "dropped": self.dropped[stream],
                         "queued": len(self._queue)}
            stats = dumps({**message, "publisher": publisher})
            with self._wake:
                self._set(base + "stats", stats, False)
                if self._sleeping == _IDLE:
                    self._wake.notify()
        elif kind == "eos":
            with self._wake:
                self._set(base + "state", str(message.get("reason", "end")).encode(), self.retain)
                self._put(base + "eos", payload, stream)
                if self._sleeping:
                    self._wake.notify()

    def close(self) -> None:
        """Let queued messages go out for up to `FLUSH_S` while connected, publish `offline`,
        disconnect; log what was dropped. Returns within about `FLUSH_S + CLOSE_S`; safe to call twice."""
        thread = self._thread
        if thread is None:
            return
        with self._wake:
            if not self._closing:
                self._closing = True
                self._flush_until = 0.0 if self._aborted else time.monotonic() + FLUSH_S
            self._wake.notify_all()
        thread.join((0.0 if self._aborted else FLUSH_S) + CLOSE_S + 0.5)
        with self._lock:
            if thread.is_alive():  # inside a connection attempt (DNS, TCP, TLS): left to end by itself
                self._abandoned = True
                self._count_undelivered()
            self._thread = None
            dropped = dict(self.dropped)
        if dropped:
            each = ", ".join(f"{stream}: {n}" for stream, n in sorted(dropped.items()))
            log.warning("%s: %d message(s) dropped (%s)", self._label, sum(dropped.values()), each)

    # -- what write() keeps (under the lock) ---------------------------------------------------

    def _put(self, name: str, payload: bytes, stream: str) -> None:
        if len(self._queue) >= self.queue_size:
            self.dropped[self._queue.popleft()[3]] += 1
        self._queue.append((name, payload, False, stream))

    def _set(self, name: str, payload: bytes, retain: bool) -> None:
        self._latest[name] = (payload, retain)
        if retain:
            self._retained[name] = payload

    def _changed_counts(self, before: dict | None, base: str, counts: dict) -> dict[str, bytes]:
        """The count topics whose values differ from those of `before` (the last frame's counts),
        with their new payloads. Only the rules whose counts changed are looked into."""
        changed: dict[str, bytes] = {}
        for rule, value in counts.items():
            old = before.get(rule) if before else None
            if value == old:
                continue
            at = self._rule_topics.get((base, rule))
            if at is None:
                at = self._rule_topics[(base, rule)] = f"{base}{level(rule)}/"
            if not isinstance(value, dict):  # a zone: the objects in it now
                changed[at + "count"] = str(value).encode()
                continue
            old = old if isinstance(old, dict) else {}
            for way in ("in", "out"):  # a line: totals, and per class
                if value.get(way) != old.get(way):
                    changed[at + way] = str(value.get(way, 0)).encode()
            was = old.get("classes") or {}
            for label, per in (value.get("classes") or {}).items():
                if per != was.get(label):
                    for way in ("in", "out"):
                        if per.get(way) != (was.get(label) or {}).get(way):
                            changed[f"{at}{level(label)}/{way}"] = str(per.get(way, 0)).encode()
        return changed

    def _count_undelivered(self) -> None:
        """Count what never went out as dropped (under the lock)."""
        for msg in list(self._queue) + [msg for _, msg in list(self._inflight)]:
            if msg[3] is not None:
                self.dropped[msg[3]] += 1
        self._queue.clear()
        self._inflight.clear()
        self._latest.clear()

    # -- the sink's thread ----------------------------------------------------------------------

    def _run(self) -> None:
        """Connect, publish while connected, reconnect with backoff, until closed."""
        backoff = Backoff(*RETRY_S)
        away: tuple[float, int] | None = None  # the current outage: since when, and the drops then
        try:
            while not self._closing:
                self.attempts += 1
                reason, accepted = self._session(away)
                if self._closing:
                    break
                if accepted:  # the outage before (if any) ended in that session; a new one begins
                    backoff.reset()
                    log.warning("%s: lost the broker (%s); reconnecting in the background, holding up to %d "
                                "messages", self._label, reason, self.queue_size)
                elif away is None:
                    log.warning("%s: cannot connect (%s); retrying in the background, holding up to %d messages",
                                self._label, reason, self.queue_size)
                else:
                    log.debug("%s: attempt %d: %s", self._label, self.attempts, reason)
                if accepted or away is None:
                    away = (time.monotonic(), self.dropped_total)
                with self._wake:
                    self._wake.wait_for(lambda: self._closing, backoff.next())
        except Exception:  # noqa: BLE001 - a bug must not end in silence
            log.warning("%s: stopped publishing after an unexpected error", self._label, exc_info=True)
        finally:
            self._teardown()
            with self._lock:
                if not self._abandoned:
                    self._count_undelivered()

    def _session(self, away: tuple[float, int] | None) -> tuple[str, bool]:
        """One connection: connect, publish until it ends or the sink closes. Returns why it ended
        and whether the broker had accepted it.

        While messages flow, a batch starts at most once every `BATCH_S` (the first after a quiet
        spell at once), so that a busy stream costs one wake-up of this thread per batch, not per
        message; a batch larger than paho may hold goes on as acknowledgements (or the socket) free room."""
        import paho.mqtt.client as mqtt

        client = self._client
        self._refused = None
        try:
            client.connect(self.host, self.port, self.keepalive_s)
        except (OSError, ValueError) as e:
            return _connect_error(e), False
        _no_delay(client.socket())
        started, accepted, sent_at, behind = time.monotonic(), False, 0.0, False
        try:
            while True:
                now = time.monotonic()
                if self.connected and not accepted:
                    accepted = True
                    self._announce(away)
                latest_due = self._latest_at + LATEST_S
                if self.connected and (behind or self._closing or now >= sent_at + BATCH_S):
                    if self._send(latest=self._closing or now >= latest_due):
                        sent_at = now
                    behind = len(self._inflight) >= self._window  # paho's hands full: go on as they empty
                with self._wake:
                    if self._closing and (not self.connected or self._aborted or now >= self._flush_until
                                          or not (self._queue or self._latest or self._inflight)):
                        break
                    busy = not self.connected or client.want_write() or len(self._inflight) >= self._window
                    timeout = 0.0
                    if busy or self._inflight:
                        timeout = _POLL_S  # for the socket, or for acknowledgements
                    elif self._queue or now < sent_at + BATCH_S:  # the next batch is due then
                        timeout = max(0.0, sent_at + BATCH_S - now)
                    elif self._latest:  # until they are due, or a message comes (write() wakes it)
                        self._sleeping = _AWAITING_LATEST
                        self._wake.wait(max(0.0, latest_due - now))
                        self._sleeping = _AWAKE
                    else:  # nothing to do: until write() or close() wakes it, or the keepalive is due
                        self._sleeping = _IDLE
                        self._wake.wait(_IDLE_S)
                        self._sleeping = _AWAKE
                rc = self._step(timeout)
                self._prune()
                if rc != mqtt.MQTT_ERR_SUCCESS:
                    return self._refused or mqtt.error_string(rc), accepted
                if not accepted and time.monotonic() - started > CONNACK_TIMEOUT_S:
                    return f"no answer to the connection in {CONNACK_TIMEOUT_S:g} s", False
            if self.connected:
                self._say_offline()
            return "closed", accepted
        finally:
            self._lost()

    def _step(self, timeout: float) -> int:
        """One turn of paho's network loop (its external-loop calls): wait up to `timeout` for the
        socket, read what came, write what waits, keep the connection alive."""
        import paho.mqtt.client as mqtt

        client = self._client
        sock = client.socket()
        if sock is None:
            return mqtt.MQTT_ERR_CONN_LOST
        try:
            readable, writable, _ = select.select([sock], [sock] if client.want_write() else [], [], timeout)
        except (OSError, ValueError):
            return mqtt.MQTT_ERR_CONN_LOST
        if readable or getattr(sock, "pending", lambda: 0)():
            rc = client.loop_read()
            if rc != mqtt.MQTT_ERR_SUCCESS or client.socket() is None:
                return rc or mqtt.MQTT_ERR_CONN_LOST
        if writable:
            rc = client.loop_write()
            if rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_AGAIN):
                return rc
        return client.loop_misc()

    def _announce(self, away: tuple[float, int] | None) -> None:
        """Just connected: `online` goes out first, then every retained value again."""
        with self._wake:
            again = {self.available_topic: (b"online", self.retain)}
            again.update((name, (payload, True)) for name, payload in self._retained.items())
            again.update(self._latest)
            self._latest = again
            self._latest_at = 0.0  # out at once
            dropped = sum(self.dropped.values())
        if away is None:
            log.info("%s: connected", self._label)
        else:
            log.warning("%s: connected after %.1f s (%d message(s) dropped meanwhile)", self._label,
                        time.monotonic() - away[0], dropped - away[1])

    def _send(self, latest: bool) -> bool:
        """Hand paho what is waiting, latest values first (if `latest`), while fewer than `_window`
        are in its hands; whether anything was handed."""
        if not (self._queue or (latest and self._latest)) or len(self._inflight) >= self._window:
            return False
        with _corked(self._client.socket()):
            return self._hand(latest)

    def _hand(self, latest: bool) -> bool:
        import paho.mqtt.client as mqtt

        client, qos, inflight = self._client, self.qos, self._inflight
        handed = False
        while True:
            with self._lock:
                room = self._window - len(inflight)
                batch = []
                if latest and self._latest:
                    self._latest_at = time.monotonic()
                while latest and self._latest and len(batch) < room:
                    name = next(iter(self._latest))
                    payload, retain = self._latest.pop(name)
                    batch.append((name, payload, retain, None))
                while self._queue and len(batch) < room:
                    batch.append(self._queue.popleft())
                self._in_hand = len(batch)
            if not batch:
                return handed
            handed = True
            for i, msg in enumerate(batch):
                info = client.publish(msg[0], msg[1], qos, msg[2])
                if info.rc != mqtt.MQTT_ERR_SUCCESS:
                    # the connection just went: at QoS 0 (or paho's queue full) paho did not take the
                    # message; above QoS 0 it keeps it and sends it once connected again
                    kept = qos > 0 and info.rc != mqtt.MQTT_ERR_QUEUE_SIZE
                    self._requeue(batch[i + 1:] if kept else batch[i:])
                    self._in_hand = 0
                    return handed
                if info.is_published():  # QoS 0: written at once
                    if msg[3] is not None:
                        self.sent[msg[3]] += 1
                else:
                    inflight.append((info, msg))
            self._in_hand = 0

    def _prune(self) -> None:
        """Drop from `_inflight` what paho has written (QoS 0) or had acknowledged (QoS 1, 2), in order."""
        inflight = self._inflight
        while inflight:
            info, msg = inflight[0]
            try:
                if not info.is_published():
                    return
            except (RuntimeError, ValueError):  # it failed: a lost connection, dealt with by _lost()
                return
            inflight.popleft()
            if msg[3] is not None:
                self.sent[msg[3]] += 1

    def _on_connect(self, client, userdata, flags, reason, properties) -> None:
        if reason.is_failure:
            self._refused = f"the broker refused the connection: {reason}"
            if str(reason) in ("Not authorized", "Bad user name or password"):
                self._refused += f" (user name and password from ${self.username_env}, ${self.password_env})"
        else:
            self.connected = True

    def _requeue(self, batch: list[tuple]) -> None:
        """Put messages paho did not send back: queued ones at the front, latest values where no newer one waits."""
        with self._lock:
            queued = [msg for msg in batch if msg[3] is not None]
            self._queue.extendleft(reversed(queued))
            while len(self._queue) > self.queue_size:
                self.dropped[self._queue.popleft()[3]] += 1
            for name, payload, retain, stream in batch:
                if stream is None and retain:
                    self._latest.setdefault(name, (payload, retain))

    def _lost(self) -> None:
        """The connection ended: QoS 0 messages paho had not written go back into the queue."""
        self.connected = False
        self._prune()
        if self.qos == 0:
            lost = [msg for _, msg in self._inflight]
            self._inflight.clear()
            self._requeue(lost)

    def _say_offline(self) -> None:
        """Closing while connected: `offline`, then a clean disconnection, for at most `CLOSE_S`."""
        client = self._client
        client.publish(self.available_topic, b"offline", self.qos, self.retain)
        client.disconnect()
        deadline = time.monotonic() + CLOSE_S
        while client.socket() is not None and time.monotonic() < deadline:
            if self._step(_POLL_S) != 0:
                break

    def _teardown(self) -> None:
        """Close the socket, whatever state the connection is in."""
        client = self._client
        sock = client.socket() if client is not None else None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


def _no_delay(sock) -> None:
    """Small messages go out when written, not when the broker has acknowledged the last segment
    (a batch is corked instead: see `_corked`)."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (AttributeError, OSError):
        pass


@contextlib.contextmanager
def _corked(sock):
    """A batch written into `sock` leaves in full segments (Linux's TCP_CORK), not one per message:
    on loopback that halves the CPU a message costs the sender."""
    cork = getattr(socket, "TCP_CORK", None)
    try:
        if cork is not None and sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, cork, 1)
    except OSError:
        cork = None
    try:
        yield
    finally:
        if cork is not None and sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, cork, 0)
            except OSError:
                pass


def _ssl_text(error: BaseException) -> str:
    """An OpenSSL error without the place in CPython's source it was raised from."""
    text = getattr(error, "strerror", None) or str(error)
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", text)


def _connect_error(error: BaseException) -> str:
    """Why a connection attempt failed, in words."""
    if isinstance(error, socket.gaierror):
        return f"cannot resolve the host name: {error.strerror or error}"
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"TLS: certificate verify failed: {error.verify_message or error}"
    if isinstance(error, ssl.SSLError):
        return f"TLS: {_ssl_text(error)}"
    if isinstance(error, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(error, OSError):
        return os_reason(error)
    return str(error)


__all__ = ["MqttSink", "FLUSH_S", "CLOSE_S", "MAX_INFLIGHT", "MAX_INFLIGHT_ACKED", "BATCH_S", "LATEST_S", "CONNACK_TIMEOUT_S",
           "RETRY_S", "level"]
