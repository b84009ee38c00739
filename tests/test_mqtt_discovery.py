"""Home Assistant MQTT discovery (`discovery: true` on the mqtt sink) against a real Mosquitto broker
(tests/mosquitto.py): a real run of the shipped sample, one camera from the file and one added while it
runs, read as Home Assistant reads it: the retained configs under `homeassistant/#`, then each
sensor's state topic and availability topic."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from streamlens import Pipeline
from streamlens.sinks.mqtt import MqttSink
from streamlens.sinks.mqtt_discovery import Discovery, safe_id
from streamlens.sinks.mqtt_topics import Topics

from .conftest import LINE_AND_ZONE, REPO
from .mosquitto import Broker, Subscriber, wait_for

SAMPLE = REPO / "samples" / "traffic.mp4"
#: Home Assistant's discovery topic, and its alphabet for node and object ids
CONFIG_TOPIC = re.compile(r"^homeassistant/(?P<component>[^/]+)/(?:(?P<node>[a-zA-Z0-9_-]+)/)?"
                          r"(?P<object>[a-zA-Z0-9_-]+)/config$")


def discovered(sub: Subscriber) -> dict[str, dict]:
    """What Home Assistant makes of the retained messages under `homeassistant/#`: each sensor's
    config by unique_id (each checked as it checks one)."""
    sensors = {}
    with sub.lock:
        messages = list(sub.messages)
    for topic, payload, retained in messages:
        if not topic.startswith("homeassistant/"):
            continue
        match = CONFIG_TOPIC.match(topic)
        assert match and match["component"] == "sensor", topic
        assert retained, f"{topic}: a config Home Assistant would lose at its restart"
        config = json.loads(payload)
        assert {"name", "unique_id", "state_topic", "availability_topic", "device"} <= config.keys(), config
        assert set(config["device"]) >= {"identifiers", "name", "manufacturer", "model"}
        sensors[config["unique_id"]] = {**config, "_node": match["node"], "_object": match["object"]}
    return sensors


def expected_states(counts: dict, stream: str) -> dict[str, str]:
    """The state topics of a stream's sensors and the count each must hold: lines' in and out, zones'."""
    out = {}
    for rule, value in counts.items():
        if isinstance(value, dict):
            out[f"streamlens/{stream}/{rule}/in"] = str(value["in"])
            out[f"streamlens/{stream}/{rule}/out"] = str(value["out"])
        else:
            out[f"streamlens/{stream}/{rule}/count"] = str(value)
    return out


def test_home_assistant_discovers_each_camera_its_counts_and_when_the_run_is_gone(tmp_path):
    b = Broker(tmp_path).start()
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true, loop: true}}]
detector: {{backend: motion}}
keyframes: {{interval: 3}}
analytics:
{LINE_AND_ZONE}
sinks:
  - {{type: mqtt, host: 127.0.0.1, port: {b.port}, discovery: true}}
  - {{type: jsonl, path: {tmp_path / 'out.jsonl'}}}
""")
    pipeline = Pipeline.from_yaml(path)
    reports = []
    runner = threading.Thread(target=lambda: reports.append(pipeline.run()), daemon=True)
    runner.start()
    subs = []

    def until(ready, what: str) -> None:
        deadline = time.monotonic() + 60
        while not ready():
            assert time.monotonic() < deadline, what
            assert runner.is_alive(), reports
            time.sleep(0.05)

    try:
        until(lambda: pipeline.stats["cam1"].frames >= 5, "cam1's frames")
        assert pipeline.add_stream({"uri": str(SAMPLE), "name": "cam2"}) == ("cam2", [])  # a camera added
        until(lambda: pipeline.stats["cam2"].reason == "end", "the added camera read to its end")

        # Home Assistant connects while the run goes on: both cameras, their sensors, available
        ha = Subscriber(b.port, "homeassistant/#")
        subs.append(ha)
        ha.wait_subscribed()
        assert wait_for(lambda: len(discovered(ha)) == 6), sorted(discovered(ha))  # per camera: in, out, count
        sensors = discovered(ha)
        states = Subscriber(b.port, sorted({s["state_topic"] for s in sensors.values()} | {"streamlens/available"}))
        subs.append(states)
        states.wait_subscribed()
        assert wait_for(lambda: states.last().get("streamlens/available") == b"online"), states.last()
        assert wait_for(lambda: len(states.last()) == 7), states.last()  # every sensor has a value at once

        pipeline.stop()
        runner.join(60)
        assert not runner.is_alive()
    finally:
        pipeline.close()
        for sub in subs:
            sub.close()
    assert (reports[0].status, reports[0].error) == ("interrupted", None)  # stopped, as Ctrl-C stops a run

    # after the run: the configs and the last counts stay, the sensors are unavailable
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    last = {m["stream"]: m["counts"] for m in lines if m["type"] == "frame"}
    assert set(last) == {"cam1", "cam2"}
    want = {**expected_states(last["cam1"], "cam1"), **expected_states(last["cam2"], "cam2")}
    assert len(want) == 6
    ha = Subscriber(b.port, ["homeassistant/#", "streamlens/#"])
    try:
        ha.wait_subscribed()
        assert wait_for(lambda: len(discovered(ha)) == 6 and "streamlens/available" in ha.last())
        sensors = discovered(ha)
        assert sensors == discovered(ha) and sensors.keys() == {  # unique ids from names alone: stable
            "streamlens_cam1_across_in", "streamlens_cam1_across_out", "streamlens_cam1_left_count",
            "streamlens_cam2_across_in", "streamlens_cam2_across_out", "streamlens_cam2_left_count"}
        assert {s["state_topic"] for s in sensors.values()} == want.keys()
        assert wait_for(lambda: all(t in ha.last() for t in want))
        retained = ha.last()
        assert {t: retained[t].decode() for t in want} == want  # each sensor's value is the run's last count
        assert retained["streamlens/available"] == b"offline"
        assert int(want["streamlens/cam2/across/in"]) + int(want["streamlens/cam2/across/out"]) > 0  # counted
        for s in sensors.values():
            stream, rule_way = s["state_topic"].split("/", 2)[1:]
            assert s["_node"] == f"streamlens_{stream}" and s["device"]["identifiers"] == [s["_node"]]
            assert s["device"]["name"] == stream  # one device per camera
            assert (s["availability_topic"], s["payload_available"], s["payload_not_available"]) == (
                "streamlens/available", "online", "offline")
            line = not rule_way.endswith("/count")
            assert s["state_class"] == ("total_increasing" if line else "measurement")
            assert s["unit_of_measurement"] == "objects"
            assert s["name"] == ("across " + rule_way.rsplit("/", 1)[1] if line else "left occupancy")
    finally:
        ha.close()
        b.stop()


def test_configs_are_the_same_every_run_and_their_ids_safe():
    frame = {"type": "frame", "stream": "cam1", "counts": {"Gate 2/north": {"in": 1, "out": 0}, "bay": 3}}

    def published(prefix: str = "homeassistant") -> dict[str, bytes]:
        topics = Topics("home/cams", discovery=Discovery("home/cams", prefix))
        return {t: p for t, p, _ in topics.of(None, frame, b"{}")[1]}

    first = published()
    assert first == published()  # a restart publishes the same configs: Home Assistant keeps its entities
    configs = {t: json.loads(p) for t, p in first.items() if t.endswith("/config")}
    node = f"{safe_id('home/cams')}_cam1"
    assert re.fullmatch(r"home_cams_[0-9a-f]{8}_cam1", node)  # "home/cams" made safe, told apart from "home_cams"
    gate = safe_id("Gate 2/north")
    assert re.fullmatch(r"Gate_2_north_[0-9a-f]{8}", gate)
    assert set(configs) == {f"homeassistant/sensor/{node}/{gate}_in/config",
                            f"homeassistant/sensor/{node}/{gate}_out/config",
                            f"homeassistant/sensor/{node}/bay_count/config"}
    bay = configs[f"homeassistant/sensor/{node}/bay_count/config"]
    assert bay["state_topic"] == "home/cams/cam1/bay/count" and first[bay["state_topic"]] == b"3"
    assert bay["availability_topic"] == "home/cams/available"
    gate_in = configs[f"homeassistant/sensor/{node}/{gate}_in/config"]
    assert gate_in["state_topic"] == "home/cams/cam1/Gate 2_north/in" and gate_in["name"] == "Gate 2/north in"
    # each config before its rule's first count, so a listening Home Assistant has the sensor first
    order = list(first)
    assert order.index(f"homeassistant/sensor/{node}/bay_count/config") < order.index("home/cams/cam1/bay/count")
    assert all(t.startswith("ha/") for t in published("ha") if t.endswith("/config"))


def test_discovery_needs_retained_messages():
    with pytest.raises(ValueError, match="retain"):
        MqttSink("127.0.0.1", 1883, discovery=True, retain=False)
    assert MqttSink("127.0.0.1", 1883, discovery=True).discovery.prefix == "homeassistant"
    assert MqttSink("127.0.0.1", 1883).discovery is None
