"""A real Mosquitto broker for tests and benchmarks (Debian's `mosquitto`), on 127.0.0.1 and a free
port, and paho subscribers that record what it delivers.

`Broker(folder).start()` writes a minimal mosquitto.conf (anonymous clients, persistence off unless
asked) and waits until the port accepts; `stop()` ends it, `restart()` starts it again on the same
port. Where mosquitto is not installed, `start()` raises `RuntimeError` saying so
(`mosquitto_missing()`); the tests' `Broker` (tests/mosquitto.py) skips instead, and holds the
`broker` fixture.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from .rtsp_server import free_port

MOSQUITTO = "/usr/sbin/mosquitto"
START_TIMEOUT_S = 20.0


def installed() -> bool:
    return Path(MOSQUITTO).is_file()


def mosquitto_missing() -> str | None:
    """Why a broker cannot run here, or None."""
    return None if installed() else f"mosquitto is not installed ({MOSQUITTO}; Debian package `mosquitto`)"


def wait_for(condition, timeout_s: float = 20.0, step_s: float = 0.02) -> bool:
    """Wait until `condition()` is true; False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step_s)
    return True


class Broker:
    """One mosquitto process on 127.0.0.1:`port`. `extra` is added to its config (a password file,
    TLS, persistence); `persistent=True` keeps sessions and queued messages across a restart."""

    def __init__(self, folder: Path, port: int | None = None, extra: str = "", persistent: bool = False):
        self.folder = Path(folder)
        self.port = port or free_port()
        self.extra = extra
        self.persistent = persistent
        self.conf = self.folder / f"mosquitto-{self.port}.conf"
        self.log = self.folder / f"mosquitto-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def write_conf(self) -> None:
        lines = [f"listener {self.port} 127.0.0.1"]
        if os.geteuid() == 0:  # run as root, mosquitto would become user `mosquitto`, who cannot read tmp_path
            lines.append("user root")
        if "password_file" not in self.extra:
            lines.append("allow_anonymous true")
        if self.persistent:
            data = self.folder / f"mosquitto-{self.port}-db"
            data.mkdir(exist_ok=True)
            lines += ["persistence true", f"persistence_location {data}/", "queue_qos0_messages true",
                      "autosave_interval 0"]
        else:
            lines.append("persistence false")
        lines += ["log_dest stderr", "log_type error", "log_type warning", "log_type notice", self.extra]
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self) -> Broker:
        missing = mosquitto_missing()
        if missing:
            raise RuntimeError(missing)
        self.write_conf()
        log = open(self.log, "ab")
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)], stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"mosquitto did not listen on {self.port}: {self.log.read_text()[-2000:]}")
                time.sleep(0.02)

    def stop(self) -> None:
        """End the broker (SIGTERM: a persistent one saves its sessions) and wait for it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> Broker:
        self.stop()
        return self.start()


class Subscriber:
    """A paho client subscribed to `topics` that records every message: `messages` holds
    (topic, payload, retained) in arrival order. It reconnects by itself; `session` makes it a
    persistent session (clean_session false, QoS 1), whose messages wait for it while it is away."""

    def __init__(self, port: int, topics: str | list[str] = "streamlens/#", *, session: str | None = None,
                 username: str | None = None, password: str | None = None, tls_ca: str | None = None):
        import paho.mqtt.client as mqtt

        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.messages: list[tuple[str, bytes, bool]] = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=session or "",
                                  clean_session=session is None)
        if username is not None:
            self.client.username_pw_set(username, password)
        if tls_ca is not None:
            self.client.tls_set(ca_certs=tls_ca)
        self.client.reconnect_delay_set(0.1, 0.5)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect_async("127.0.0.1", port, 30)
        self.client.loop_start()

    def _on_connect(self, client, userdata, flags, reason, properties):
        if not reason.is_failure:
            client.subscribe([(t, 1) for t in self.topics])

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.messages.append((msg.topic, msg.payload, bool(msg.retain)))

    def wait_subscribed(self, timeout_s: float = 20.0) -> None:
        assert self.subscribed.wait(timeout_s), "the subscriber did not get its subscription in time"

    def on(self, topic: str) -> list[bytes]:
        """The payloads received on `topic`, in order."""
        with self.lock:
            return [payload for t, payload, _ in self.messages if t == topic]

    def last(self) -> dict[str, bytes]:
        """Each topic's last payload."""
        with self.lock:
            return {t: payload for t, payload, _ in self.messages}

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def have(tool: str) -> bool:
    return shutil.which(tool) is not None
