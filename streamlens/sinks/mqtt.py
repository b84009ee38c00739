"""The MQTT sink: events, counts, stream states, stats and snapshots to an MQTT broker (paho-mqtt, MQTT
3.1.1), in a topic layout that Home Assistant and Frigate users map.

Which topics carry what: `streamlens.sinks.mqtt_topics` (a table). The thread that delivers:
`streamlens.sinks.mqtt_client`.

It never holds up the pipeline. The sink is `inline`: `write()` runs on the engine's thread and
only puts what a message publishes into the sink's own memory; a thread of the sink connects,
publishes and reconnects. Events, eos and frame messages wait in a queue of `queue_size` (a
`streamlens.sinks.background.Publisher`); when it is full the oldest is dropped and counted
(`drops()` per stream, `dropped_total`, the stats' `publisher.dropped`, and a line at close).
Counts, states, availability, snapshots and stats are latest values, one per topic: a long outage
keeps the newest of each (a value replaced by a newer one before it went out is not a drop), and
after every (re)connection the retained ones are published again, so a broker that restarted
without persistence has them back. At most `MAX_INFLIGHT` messages are in paho's hands and not yet
written to the socket (QoS 0), or `MAX_INFLIGHT_ACKED` not yet acknowledged (QoS 1, 2: Mosquitto's
own default limit, beyond which it loses QoS 2 messages of an MQTT 3.1.1 client), so a slow broker
fills the sink's bounded queue, never an unbounded one.

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

Home Assistant MQTT discovery (`discovery: true`): each stream is a device whose sensors are its
lines' totals and its zones' counts, announced by retained config messages under `discovery_prefix`
when the stream's first counts go out (`streamlens.sinks.mqtt_discovery`).

TLS (`tls: true`) checks the broker's certificate against the system's CAs, or `ca_file`, and its
host name. The user name and password come from the environment variables that `username_env` and
`password_env` name, read by `open()` and never logged; a password without a user name is an error,
and one sent without TLS to a broker on another machine is warned of once, at `open()`.

Example:
    >>> sink = MqttSink("127.0.0.1", 1883, topic="home/cams")
    >>> (sink.topic, sink.inline, sink.wants_stats)
    ('home/cams', True, True)
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from ..config.common import section
from ..config.sinks import MqttSinkConfig
from ..errors import SinkError
from ..frame import FrameResult, StatsReport, StreamEnd
from ..urls import is_loopback
from ..wire.schema import dumps
from .base import Sink
from .mqtt_client import (BATCH_S, CLOSE_S, CONNACK_TIMEOUT_S, LATEST_S, MAX_INFLIGHT, MAX_INFLIGHT_ACKED, RETRY_S,
                          MqttClientLoop, _ssl_text)
from .mqtt_discovery import Discovery
from .mqtt_topics import Topics, level

log = logging.getLogger("streamlens.sinks.mqtt")

#: how long `close()` lets queued messages go out while connected (seconds)
FLUSH_S = 2.0


class MqttSink(MqttClientLoop, Sink):
    """Publishes events, counts, states, stats and snapshots to an MQTT broker (see the module docs)."""

    name = "mqtt"
    inline = True

    def __init__(self, host: str | MqttSinkConfig | None = None, port: int | None = None, **keys: Any):
        """`MqttSink(cfg)` with the sink's typed section, or `MqttSink(host, port, **keys)` with its
        keys, checked as the pipeline file's are (`ValueError`)."""
        if isinstance(host, MqttSinkConfig):
            cfg = host
        else:
            given = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
            cfg = section(MqttSinkConfig, "mqtt sink", type="mqtt", **given, **keys)
        self.host, self.port, self.topic, self.qos = cfg.host, cfg.port, cfg.topic.rstrip("/"), cfg.qos
        self.client_id = cfg.client_id
        self.keepalive_s = cfg.keepalive_s
        self.tls, self.ca_file = cfg.tls, cfg.ca_file
        self.username_env, self.password_env = cfg.username_env, cfg.password_env
        self.queue_size = cfg.queue_size
        self.retain, self.frames, self.snapshots = cfg.retain, cfg.frames, cfg.snapshots
        self.wants_stats = cfg.stats
        super().__init__(cfg.queue_size, MAX_INFLIGHT if cfg.qos == 0 else MAX_INFLIGHT_ACKED)
        self.discovery = Discovery(self.topic, cfg.discovery_prefix) if cfg.discovery else None
        self._topics = Topics(self.topic, retain=cfg.retain, frames=cfg.frames, snapshots=cfg.snapshots,
                              discovery=self.discovery)
        self.available_topic = self._topics.available
        self._label = f"mqtt sink {cfg.host}:{cfg.port}"

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
            if password is not None and not self.tls and not is_loopback(self.host, resolve=False):
                log.warning("%s: the MQTT password in $%s goes to %s:%d without TLS, readable by anyone on the "
                            "way; set tls: true", self.key("password_env"), self.password_env, self.host, self.port)
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
        self._pub.start(self._run, f"mqtt-{self.host}:{self.port}")

    def interrupt(self) -> None:
        """From any thread (a second Ctrl-C): `close()` gives queued messages no time."""
        self._pub.interrupt()

    def drops(self) -> dict[str, int]:
        """Messages dropped per stream: pushed out of a full queue, or never delivered by `close()`."""
        with self._wake:
            return dict(self.dropped)

    @property
    def dropped_total(self) -> int:
        """Messages dropped so far, every stream's."""
        with self._wake:
            return sum(self.dropped.values())

    def pending(self) -> int:
        """Messages not yet out: queued, latest values waiting, being handed to paho, and in its hands."""
        with self._wake:
            return len(self._queue) + len(self._latest) + self._handing + len(self._inflight)

    def write(self, item: FrameResult | StreamEnd | StatsReport, message: dict[str, Any], payload: bytes) -> None:
        """Put what `message` publishes into the sink's queue and latest values; never waits."""
        if self._pub.thread is None:
            raise SinkError(f"{self._label}: not open")
        if message["type"] == "stats":
            stream = message["stream"]
            publisher = {"connected": self.connected, "sent": self.sent[stream], "dropped": self.dropped[stream],
                         "queued": len(self._queue)}
            payload = dumps({**message, "publisher": publisher})
        out = self._topics.of(item, message, payload)
        if out is not None:
            self._keep(message["stream"], out[0], payload, out[1])

    def close(self) -> None:
        """Let queued messages go out for up to `FLUSH_S` while connected, publish `offline`,
        disconnect; log what was dropped. Returns within about `FLUSH_S + CLOSE_S`; safe to call twice."""
        if self._pub.thread is None:
            return
        self._pub.close(FLUSH_S, wait_s=CLOSE_S + 0.5)  # the thread itself stops flushing while away
        with self._wake:
            self._latest.clear()
            dropped = dict(self.dropped)
        if dropped:
            each = ", ".join(f"{stream}: {n}" for stream, n in sorted(dropped.items()))
            log.warning("%s: %d message(s) dropped (%s)", self._label, sum(dropped.values()), each)


__all__ = ["MqttSink", "FLUSH_S", "CLOSE_S", "MAX_INFLIGHT", "MAX_INFLIGHT_ACKED", "BATCH_S", "LATEST_S",
           "CONNACK_TIMEOUT_S", "RETRY_S", "level"]
