"""The result contract, schema version 1: what subscribers and the JSONL sink receive.

One JSON object per frame per stream, then one `eos` object per stream. Fields may be added;
none is renamed or removed without bumping `SCHEMA_VERSION`.

Example:
    >>> import numpy as np
    >>> from streamlens.frame import Frame, FrameResult, empty_detections
    >>> f = Frame("cam1", 0, 0.0, 1.0, np.zeros((720, 1280, 3), np.uint8))
    >>> msg = frame_message(FrameResult(f, 0, True, empty_detections()))
    >>> (msg["v"], msg["type"], msg["stream"], msg["width"], msg["objects"])
    (1, 'frame', 'cam1', 1280, [])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..frame import TRACK_CLASS_ID, TRACK_CLASS_NAME, Embedding, Event, FrameResult, StatsReport, StreamEnd
from .codec import json_bytes

SCHEMA_VERSION = 1


def frame_message(result: FrameResult) -> dict[str, Any]:
    """The schema-v1 `frame` message for one result."""
    frame, det = result.frame, result.detections
    n = len(det)
    # rounded by numpy in one go, then plain Python numbers: cheaper than a round() per value
    boxes = np.round(det.xyxy.astype(np.float64), 2).tolist() if n else []
    scores = np.round(det.confidence.astype(np.float64), 4).tolist() if n and det.confidence is not None else [1.0] * n
    cls = det.class_id.tolist() if n and det.class_id is not None else [-1] * n
    ids = det.tracker_id.tolist() if n and det.tracker_id is not None else [-1] * n
    labels = det.data.get("class_name") if n else None
    labels = [str(v) for v in labels] if labels is not None else [str(c) for c in cls]
    objects = [{"id": int(ids[i]), "cls": int(cls[i]), "label": labels[i], "score": scores[i], "box": boxes[i]}
               for i in range(n)]
    if n and det.data.get(TRACK_CLASS_NAME) is not None:  # a tracker ran: each object's label by vote
        for obj, track_cls, track_label in zip(objects, det.data[TRACK_CLASS_ID].tolist(),
                                               det.data[TRACK_CLASS_NAME].tolist()):
            obj["track_cls"], obj["track_label"] = int(track_cls), str(track_label)
    global_ids = det.data.get("global_id") if n else None
    if global_ids is not None:  # the object's identity across the cameras of `reid.across`
        for obj, gid in zip(objects, global_ids.tolist()):
            if gid >= 0:
                obj["global_id"] = int(gid)
    attributes = result.attributes
    if attributes is not None:  # what the secondary classifiers know of each object's track
        for obj, known in zip(objects, attributes):
            if known:
                obj["attributes"] = known
    shapes = det.data.get("mask") if n else None
    if shapes is not None:  # each object's mask (segment.output: COCO polygons or COCO RLE)
        for obj, shape in zip(objects, shapes):
            if shape is not None:
                obj["mask"] = shape
    found = result.analytics
    if found is not None:  # the zones each tracked object is in, its speed where measured
        for obj, zones, speed in zip(objects, found.zones, found.speeds or [None] * n):
            if zones is not None:
                obj["zones"] = zones
            if speed is not None:
                obj["speed_kmh"] = speed
    latency = {k: round(v, 3) for k, v in frame.timings.items()}
    message = {
        "v": SCHEMA_VERSION,
        "type": "frame",
        "stream": frame.stream,
        "seq": result.seq,
        "frame": frame.index,
        "pts": None if frame.pts is None else round(frame.pts, 6),
        "ts": round(frame.ts, 6),
        "keyframe": result.keyframe,
        "detected_frame": result.detected_frame,
        "width": frame.width,
        "height": frame.height,
        "objects": objects,
        "latency_ms": latency,
    }
    if found is not None:
        message["counts"] = found.counts
    return message


def event_message(event: Event) -> dict[str, Any]:
    """The schema-v1 `event` message: what happened (`event`: line_cross, zone_enter, zone_exit,
    loiter, object_start, object_update, object_end; clip_lost: a clip that could not be kept,
    graph/publish/clips.py), on which frame, to which object. An event with
    a snapshot says so (`snapshot`: its `kind`, the `frame` it shows, its size in `bytes`, and the
    `path` it was written to or null); the JPEG itself travels beside the message where a sink can
    carry it (ZeroMQ's third part, an MQTT topic)."""
    frame = event.result.frame
    message = {"v": SCHEMA_VERSION, "type": "event", "stream": event.stream, "seq": event.seq, **event.body,
               "frame": frame.index, "pts": None if frame.pts is None else round(frame.pts, 6),
               "ts": round(frame.ts, 6)}
    shot = event.snapshot
    if shot is not None:
        message["snapshot"] = {"kind": shot.kind, "frame": shot.frame, "bytes": len(shot.jpeg), "path": shot.path}
    return message


def embedding_message(item: Embedding) -> dict[str, Any]:
    """The schema-v1 `embedding` message: a track's vector by a `secondary` entry of kind `embed`
    (`name`), sent each time it is made anew (topic `embedding.<stream>.`), never in frames."""
    frame = item.result.frame
    return {"v": SCHEMA_VERSION, "type": "embedding", "stream": item.stream, "seq": item.seq, "name": item.name,
            "object": {"id": item.track}, "attempts": item.attempts,
            "vector": np.round(item.vector.astype(np.float64), 6).tolist(),
            "frame": frame.index, "pts": None if frame.pts is None else round(frame.pts, 6), "ts": round(frame.ts, 6)}


def eos_message(end: StreamEnd) -> dict[str, Any]:
    """The schema-v1 `eos` message that closes a stream. `reason` is end, truncated, stopped or
    error; `lost` counts what never became a result, by cause; `expected` is the frame count the
    input declared (null when it declared none); `detail` says what went wrong (null when nothing)."""
    return {
        "v": SCHEMA_VERSION,
        "type": "eos",
        "stream": end.stream,
        "seq": end.seq,
        "frames": end.frames,
        "reason": end.reason,
        "lost": dict(end.lost),
        "expected": end.expected,
        "detail": end.detail,
    }


def stats_message(report: StatsReport) -> dict[str, Any]:
    """The schema-v1 `stats` message: how one stream is doing (fps, latency, drops, state)."""
    return {"v": SCHEMA_VERSION, "type": "stats", "stream": report.stream, **report.values}


def message_for(item: FrameResult | StreamEnd | StatsReport | Event | Embedding) -> dict[str, Any]:
    """The message for a result, a stream end, a stats report, an event or an embedding."""
    if isinstance(item, FrameResult):
        return frame_message(item)
    if isinstance(item, Event):
        return event_message(item)
    if isinstance(item, Embedding):
        return embedding_message(item)
    return eos_message(item) if isinstance(item, StreamEnd) else stats_message(item)


def dumps(message: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON, one object, no newline: always valid JSON, NaN and infinities as null.

    Example:
        >>> dumps({"type": "stats", "stream": "cam1", "fps": float("nan")})
        b'{"type":"stats","stream":"cam1","fps":null}'
    """
    return json_bytes(message)


def topic(message: dict[str, Any]) -> bytes:
    """The ZeroMQ topic of a message: `<type>.<stream>.`, ending in a dot so that a prefix filter
    is exact (`frame.cam1.` never matches `frame.cam10.`; see `streamlens.wire.codec`).

    Example:
        >>> topic({"type": "frame", "stream": "cam1"})
        b'frame.cam1.'
    """
    return f"{message['type']}.{message['stream']}.".encode()
