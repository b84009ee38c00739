"""The MQTT sink's client loop: the one thread that connects, hands paho what is queued, runs
paho's network loop and reconnects; what `streamlens.sinks.mqtt` describes, and `MqttSink` inherits.

Messages wait in a `streamlens.sinks.background.Publisher`: events, eos and frames in its bounded
queue as (stream, topic, payload, retain); latest values (the stream None) in `_latest`, one per
topic. The thread drives paho's client through its external-loop calls (`loop_read`, `loop_write`,
`loop_misc`) rather than paho's own thread (`loop_start`), whose `publish()` wakes that thread and
writes each message apart (the batches here wake this one once per `BATCH_S`, corked into full
segments; tools/results/mqtt.md: 120 µs of the thread's CPU a message when it woke for each, 52-64
µs in batches), and whose reconnection waits neither follow `streamlens.sources.backoff`, nor time
out a missing CONNACK, nor say why a connection failed.
"""

from __future__ import annotations

import contextlib
import logging
import re
import select
import socket
import ssl
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..sources.backoff import Backoff
from .background import Publisher
from .base import os_reason

log = logging.getLogger("streamlens.sinks.mqtt")

#: how long `close()` gives `offline` and the disconnection, after the flush (seconds)
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


class MqttClientLoop:
    """The sink's thread and what it delivers. `MqttSink` sets the settings it reads (`host`, `port`,
    `keepalive_s`, `qos`, `retain`, `queue_size`, `username_env`, `password_env`, `available_topic`,
    `_label`) and paho's `_client` (in `open()`), which calls `_on_connect`; then `_run` is the thread."""

    def __init__(self, queue_size: int, window: int):
        self._window = window  # messages in paho's hands
        # (stream, topic, payload, retain): events, eos, frames; `taken`: (..., paho's MQTTMessageInfo)
        # handed to paho and not yet out, the thread's own; latest values have the stream None
        self._pub = Publisher(queue_size)
        #: messages that went out (written, or acknowledged above QoS 0) and dropped, per stream
        self.sent: Counter[str] = Counter()
        self.dropped = self._pub.dropped
        #: whether the broker has accepted the connection (and it has not been lost since)
        self.connected = False
        #: connection attempts so far
        self.attempts = 0
        self._wake = self._pub.cond
        self._queue, self._inflight = self._pub.queue, self._pub.taken
        self._latest: dict[str, tuple[bytes, bool]] = {}  # topic -> (payload, retain), not yet out
        self._retained: dict[str, bytes] = {}  # every retained latest value: published again on connect
        self._refused: str | None = None  # why the broker refused the connection being made
        self._sleeping = _AWAKE  # _IDLE: any write() wakes the thread; _AWAITING_LATEST: a queued message
        self._handing = 0  # messages the thread has taken from the queue and is handing to paho
        self._latest_at = 0.0  # when latest values last went out (time.monotonic())
        self._client: Any = None

    def _keep(self, stream: str, queued: str | None, payload: bytes,
              latest: Sequence[tuple[str, bytes, bool]]) -> None:
        """What write() publishes: `payload` queued for the topic `queued` (unless None), `latest`
        (topic, payload, retain) into the latest values; wake the thread if it waits for them. Never waits."""
        with self._wake:
            for name, value, retain in latest:
                self._latest[name] = (value, retain)
                if retain:
                    self._retained[name] = value
            if queued is not None:
                self._pub.put((stream, queued, payload, False))
            # a queued message wakes a sleeping thread; latest values only an idle one (they wait for LATEST_S)
            if self._sleeping == _IDLE or (queued is not None and self._sleeping):
                self._wake.notify()

    def _count_undelivered(self) -> None:
        """Count what never went out as dropped (under the lock)."""
        self._pub.give_up()
        self._latest.clear()

    # -- the sink's thread ----------------------------------------------------------------------

    def _run(self) -> None:
        """Connect, publish while connected, reconnect with backoff, until closed."""
        pub = self._pub
        backoff = Backoff(*RETRY_S)
        away: tuple[float, int] | None = None  # the current outage: since when, and the drops then
        try:
            while not pub.closing:
                self.attempts += 1
                reason, accepted = self._session(away)
                if pub.closing:
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
                    self._wake.wait_for(lambda: pub.closing, backoff.next())
        except Exception:  # noqa: BLE001 - a bug must not end in silence
            log.warning("%s: stopped publishing after an unexpected error", self._label, exc_info=True)
        finally:
            self._teardown()
            with self._wake:
                self._count_undelivered()  # unless close() gave up on this thread, and counted

    def _session(self, away: tuple[float, int] | None) -> tuple[str, bool]:
        """One connection: connect, publish until it ends or the sink closes. Returns why it ended
        and whether the broker had accepted it.

        While messages flow, a batch starts at most once every `BATCH_S` (the first after a quiet
        spell at once), so that a busy stream costs one wake-up of this thread per batch, not per
        message; a batch larger than paho may hold goes on as acknowledgements (or the socket) free room."""
        import paho.mqtt.client as mqtt

        client, pub = self._client, self._pub
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
                if self.connected and (behind or pub.closing or now >= sent_at + BATCH_S):
                    if self._send(latest=pub.closing or now >= latest_due):
                        sent_at = now
                    behind = len(self._inflight) >= self._window  # paho's hands full: go on as they empty
                with self._wake:
                    if pub.closing and (not self.connected or pub.aborted or now >= pub.deadline
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
            with self._wake:
                room = self._window - len(inflight)
                batch = []
                if latest and self._latest:
                    self._latest_at = time.monotonic()
                while latest and self._latest and len(batch) < room:
                    name = next(iter(self._latest))
                    payload, retain = self._latest.pop(name)
                    batch.append((None, name, payload, retain))
                while self._queue and len(batch) < room:
                    batch.append(self._queue.popleft())
                self._handing = len(batch)
            if not batch:
                return handed
            handed = True
            for i, msg in enumerate(batch):
                info = client.publish(msg[1], msg[2], qos, msg[3])
                if info.rc != mqtt.MQTT_ERR_SUCCESS:
                    # the connection just went: at QoS 0 (or paho's queue full) paho did not take the
                    # message; above QoS 0 it keeps it and sends it once connected again
                    kept = qos > 0 and info.rc != mqtt.MQTT_ERR_QUEUE_SIZE
                    self._requeue(batch[i + 1:] if kept else batch[i:])
                    self._handing = 0
                    return handed
                if info.is_published():  # QoS 0: written at once
                    if msg[0] is not None:
                        self.sent[msg[0]] += 1
                else:
                    inflight.append((*msg, info))
            self._handing = 0

    def _prune(self) -> None:
        """Drop from `_inflight` what paho has written (QoS 0) or had acknowledged (QoS 1, 2), in order."""
        inflight = self._inflight
        while inflight:
            stream, *_, info = inflight[0]
            try:
                if not info.is_published():
                    return
            except (RuntimeError, ValueError):  # it failed: a lost connection, dealt with by _lost()
                return
            inflight.popleft()
            if stream is not None:
                self.sent[stream] += 1

    def _on_connect(self, client, userdata, flags, reason, properties) -> None:
        if reason.is_failure:
            self._refused = f"the broker refused the connection: {reason}"
            if str(reason) in ("Not authorized", "Bad user name or password"):
                self._refused += f" (user name and password from ${self.username_env}, ${self.password_env})"
        else:
            self.connected = True

    def _requeue(self, batch: list[tuple]) -> None:
        """Put messages paho did not send back: queued ones at the front, latest values where no newer one waits."""
        with self._wake:
            self._pub.put_back(msg for msg in batch if msg[0] is not None)
            for stream, name, payload, retain in batch:
                if stream is None and retain:
                    self._latest.setdefault(name, (payload, retain))

    def _lost(self) -> None:
        """The connection ended: QoS 0 messages paho had not written go back into the queue."""
        self.connected = False
        self._prune()
        if self.qos == 0:
            lost = [msg[:4] for msg in self._inflight]
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

