"""What the MQTT sink publishes where: each message's topics and payloads, in a layout that Home
Assistant and Frigate users map. Pure: no network, no threads; `streamlens.sinks.mqtt` delivers.

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
frame. A `/`, `+` or `#` in a stream, rule or label becomes `_` in its topic level. With a
`discovery` (`streamlens.sinks.mqtt_discovery`), the first count of each rule of a stream comes
after the Home Assistant config messages of its sensors.

A message publishes at most one *queued* message (events, eos, frames: each goes out, in order),
and *latest* values (counts, states, snapshots, stats), one per topic, of which only the newest
matters.

Example:
    >>> topics = Topics("home/cams")
    >>> frame = {"type": "frame", "stream": "gate/north", "counts": {"bay": 2}}
    >>> topics.of(None, frame, b"{}")
    (None, [('home/cams/gate_north/state', b'streaming', True), ('home/cams/gate_north/bay/count', b'2', True)])
    >>> topics.of(None, frame, b"{}") is None   # nothing changed
    True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .mqtt_discovery import Discovery

_LEVEL = re.compile(r"[/+#]")


def level(name: str) -> str:
    """`name` as one topic level: `/`, `+` and `#` become `_` (an empty name too).

    Example:
        >>> level("gate/north"), level("car")
        ('gate_north', 'car')
    """
    return _LEVEL.sub("_", name) or "_"


class Topics:
    """The topics and payloads of each message under `topic` (see the module docs). It keeps each
    stream's last counts, to publish only those that change."""

    def __init__(self, topic: str, *, retain: bool = True, frames: bool = False, snapshots: bool = True,
                 discovery: Discovery | None = None):
        self.topic, self.retain, self.frames, self.snapshots = topic, retain, frames, snapshots
        self.discovery = discovery  # Home Assistant's config messages, each rule's before its first count
        self.available = f"{topic}/available"
        self._bases: dict[str, str] = {}  # stream -> "<topic>/<stream>/"
        self._counts: dict[str, dict | None] = {}  # stream -> the counts of its last frame
        self._rule_topics: dict[tuple[str, str], str] = {}  # (stream's base, rule) -> "<base><rule>/"

    def of(self, item: Any, message: dict[str, Any], payload: bytes) -> tuple[str | None, Sequence] | None:
        """What `message` (`item`, what it was made from) publishes: (the topic its `payload` is
        queued for, or None; the latest values it sets, ((topic, payload, retain), ...)), or None
        for nothing."""
        kind, stream = message["type"], message["stream"]
        base = self._bases.get(stream)
        if base is None:
            base = self._bases[stream] = f"{self.topic}/{level(stream)}/"
        if kind == "frame":
            counts = message.get("counts")
            first = stream not in self._counts
            changed = None
            if counts is not None and (first or counts != self._counts[stream]):
                changed = self._changed_counts(self._counts.get(stream), stream, base, counts)
            self._counts[stream] = counts
            if not (first or changed or self.frames):
                return None
            latest = [(base + "state", b"streaming", self.retain)] if first else []
            if changed:
                latest += [(name, value, self.retain) for name, value in changed.items()]
            return base + "frame" if self.frames else None, latest
        if kind == "event":
            snapshot = getattr(item, "snapshot", None) if self.snapshots else None
            if snapshot is None:
                return base + "events", ()
            label = level(str(message.get("object", {}).get("label", "object")))
            return base + "events", ((f"{base}{label}/snapshot", snapshot.jpeg, self.retain),)
        if kind == "stats":
            return None, ((base + "stats", payload, False),)
        if kind == "eos":
            reason = str(message.get("reason", "end")).encode()
            return base + "eos", ((base + "state", reason, self.retain),)
        return None

    def _changed_counts(self, before: dict | None, stream: str, base: str, counts: dict) -> dict[str, bytes]:
        """The count topics whose values differ from those of `before` (the last frame's counts),
        with their new payloads (a rule's first, after its discovery configs). Only the rules whose
        counts changed are looked into."""
        changed: dict[str, bytes] = {}
        for rule, value in counts.items():
            old = before.get(rule) if before else None
            if value == old:
                continue
            at = self._rule_topics.get((base, rule))
            if at is None:
                at = self._rule_topics[(base, rule)] = f"{base}{level(rule)}/"
                if self.discovery is not None:
                    changed.update(self.discovery.configs(stream, rule, isinstance(value, dict), at))
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


__all__ = ["Topics", "level"]
