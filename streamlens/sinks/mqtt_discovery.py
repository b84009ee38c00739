"""Home Assistant MQTT discovery for the MQTT sink (`discovery: true`): a retained config message per
sensor, so that Home Assistant lists each camera as a device with its counts, with no YAML on its side.
Pure: no network; `streamlens.sinks.mqtt_topics` calls it when a stream's counts first name a rule
(a stream's first frame, a stream added at run time included), and the sink publishes what it returns
with the counts, retained, and again after every reconnection.

Each line of a stream is two sensors (its totals `in` and `out`, `state_class: total_increasing`: a new
run starts again from 0, which Home Assistant reads as a new cycle), each zone one (how many objects
it holds now, `measurement`). Their state topics are the count topics the sink publishes anyway
(retained plain numbers), their availability the sink's `<topic>/available` (`online`, then `offline`
when the run ends, and as the last will). Config topics follow Home Assistant's
`<discovery_prefix>/<component>/<node_id>/<object_id>/config`, both ids in its alphabet
`[a-zA-Z0-9_-]`: the node is the sink's `topic` and the stream (one device per camera, named by the
stream), the object the rule and its count. The ids depend on nothing but those names, so a restart
publishes the same configs and Home Assistant keeps its entities (their history, names given in its UI).

Example:
    >>> discovery = Discovery("streamlens")
    >>> [topic for topic, _ in discovery.configs("cam1", "gate", True, "streamlens/cam1/gate/")]
    ['homeassistant/sensor/streamlens_cam1/gate_in/config', 'homeassistant/sensor/streamlens_cam1/gate_out/config']
    >>> safe_id("gate"), safe_id("Gate 2/north")
    ('gate', 'Gate_2_north_a42f3080')
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib.metadata import PackageNotFoundError, version

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_ICONS = {"in": "mdi:arrow-right-bold", "out": "mdi:arrow-left-bold", "count": "mdi:account-group"}


def safe_id(name: str) -> str:
    """`name` in Home Assistant's alphabet for node and object ids (`[a-zA-Z0-9_-]`): other characters
    become `_`, and a name that had to change gets 8 hex digits of its SHA-1, so that `gate/1` and
    `gate_1` stay apart. The same name always gives the same id."""
    clean = _UNSAFE.sub("_", name)
    if clean == name and name:
        return name
    return f"{clean}_{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def _version() -> str:
    try:
        return version("streamlens")
    except PackageNotFoundError:
        return "unknown"


class Discovery:
    """The config messages of every sensor, under `prefix` (Home Assistant's `discovery_prefix`) for
    the sink whose topics are under `topic`."""

    def __init__(self, topic: str, prefix: str = "homeassistant"):
        self.topic, self.prefix = topic, prefix.rstrip("/")
        self.available = f"{topic}/available"
        self._node = safe_id(topic)
        self._origin = {"name": "streamlens", "sw_version": _version()}

    def node(self, stream: str) -> str:
        """The node id of `stream`'s sensors, also its device's identifier."""
        return f"{self._node}_{safe_id(stream)}"

    def configs(self, stream: str, rule: str, line: bool, at: str) -> list[tuple[str, bytes]]:
        """(config topic, JSON payload) of each sensor of the rule `rule` of `stream`: a line's (`line`)
        `in` and `out`, a zone's `count`; `at` is the start of the rule's count topics (`<topic>/<stream>/<rule>/`)."""
        node = self.node(stream)
        device = {"identifiers": [node], "name": stream, "manufacturer": "streamlens",
                  "model": "video analytics stream", "sw_version": self._origin["sw_version"]}
        out = []
        for way in ("in", "out") if line else ("count",):
            object_id = f"{safe_id(rule)}_{way}"
            config = {
                "name": f"{rule} {way}" if line else f"{rule} occupancy",
                "unique_id": f"{node}_{object_id}",
                "state_topic": at + way,
                "availability_topic": self.available,
                "payload_available": "online",
                "payload_not_available": "offline",
                "state_class": "total_increasing" if line else "measurement",
                "unit_of_measurement": "objects",
                "icon": _ICONS[way],
                "device": device,
                "origin": self._origin,
            }
            payload = json.dumps(config, separators=(",", ":")).encode()
            out.append((f"{self.prefix}/sensor/{node}/{object_id}/config", payload))
        return out


__all__ = ["Discovery", "safe_id"]
