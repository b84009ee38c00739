"""The JSON every subscriber reads (wire/codec.py): written by orjson for speed, byte for byte what the
standard library's compact encoder writes for the engine's messages, null for NaN and infinities,
and read back whoever wrote it."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import supervision as sv

from streamlens.frame import TRACK_CLASS_ID, TRACK_CLASS_NAME, Frame, FrameResult
from streamlens.wire.codec import PayloadError, decode, json_bytes
from streamlens.wire.schema import frame_message

STDLIB = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _tracked_result() -> FrameResult:
    det = sv.Detections(xyxy=np.array([[10.5, 20.25, 300.0, 400.125], [0.0, 1.0, 2.0, 3.0]], np.float32),
                        confidence=np.array([0.91234, 0.3], np.float32), class_id=np.array([2, 7]),
                        tracker_id=np.array([17, 3]))
    det.data["class_name"] = np.array(["car", "truck"], object)
    det.data[TRACK_CLASS_ID], det.data[TRACK_CLASS_NAME] = np.array([2, 2]), np.array(["car", "car"], object)
    frame = Frame("gate-2", 1234, 41.1333333, time.time(), np.zeros((720, 1280, 3), np.uint8),
                  timings={"decode": 2.3456, "queue": 0.1, "track": 0.4567})
    return FrameResult(frame, 1234, False, det, detected_frame=1230)


def test_a_frame_message_is_written_as_the_standard_library_writes_it():
    message = frame_message(_tracked_result())
    payload = json_bytes(message)
    assert payload == STDLIB(message).encode()
    assert decode(payload) == message
    assert [o["label"] for o in decode(payload)["objects"]] == ["car", "truck"]


@pytest.mark.parametrize("value, written", [
    ({"fps": float("nan"), "p95": float("inf"), "low": -float("inf")}, b'{"fps":null,"p95":null,"low":null}'),
    ({"zones": {3: "door"}}, b'{"zones":{"3":"door"}}'),  # keys that are not strings, as json.dumps writes them
    ({"n": np.int64(3), "x": np.float64(0.5)}, b'{"n":3,"x":0.5}'),
    ({"name": "caf\u00e9"}, '{"name":"caf\u00e9"}'.encode()),  # UTF-8 as it is, no \\u escapes
    ({"seq": 2 ** 70}, b'{"seq":1180591620717411303424}'),  # past 64 bits: the standard library writes it
])
def test_values_json_lacks_or_orjson_refuses_are_written_as_before(value, written):
    assert json_bytes(value) == written


def test_a_payload_from_a_peer_that_writes_nan_is_read_and_broken_json_is_refused():
    assert np.isnan(decode(b'{"fps": NaN, "seq": 1}')["fps"])
    with pytest.raises(PayloadError, match="invalid JSON"):
        decode(b'{"seq": 1')
