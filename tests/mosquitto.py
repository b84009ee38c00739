"""The tests' Mosquitto broker and subscriber: they live in streamlens/testing/mosquitto.py, which
tools/bench_mqtt.py imports too. Here the broker skips the test, saying why, where mosquitto is not
installed (the package's raises), and `broker` is the pytest fixture."""

from __future__ import annotations

import pytest

from streamlens.testing import mosquitto as _support
from streamlens.testing.mosquitto import (MOSQUITTO, START_TIMEOUT_S, Subscriber, free_port,  # noqa: F401
                                          have, installed, mosquitto_missing, wait_for)


class Broker(_support.Broker):
    """The package's broker; `start()` skips the test where mosquitto is not installed."""

    def start(self) -> Broker:
        missing = mosquitto_missing()
        if missing:
            pytest.skip(missing)
        return super().start()


@pytest.fixture
def broker(tmp_path):
    """A running Mosquitto broker, stopped at teardown."""
    b = Broker(tmp_path).start()
    yield b
    b.stop()
