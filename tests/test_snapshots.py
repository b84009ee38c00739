"""Snapshots (`analytics.snapshots`): a JPEG of the object for its object_start and object_end
events, written to a folder and carried beside the event (ZeroMQ's third part)."""

from __future__ import annotations

import json
import subprocess
import sys

import cv2
import numpy as np
import pytest

import streamlens
from streamlens.analytics.snapshots import Snapshots, crop
from streamlens.config.model import SnapshotConfig
from streamlens.frame import Frame

from .conftest import sample_pipeline


def frame_of(index: int, value: int, size=(120, 160)) -> Frame:
    return Frame("cam1", index, index / 30, 0.0, np.full((*size, 3), value, np.uint8))


def decoded(jpeg: bytes) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    return image


def end_of(track_id: int, label: str = "car") -> dict:
    return {"event": "object_end", "object": {"id": track_id, "label": label, "box": [0, 0, 1, 1]}}


def test_object_end_shows_the_best_view_kept_while_the_track_lived():
    shots = Snapshots(SnapshotConfig(padding=0.0), "cam1")
    shots.seen(7, frame_of(3, 40), [40, 30, 80, 90])  # its first view: dark
    shots.seen(7, frame_of(9, 220), [50, 30, 70, 50])  # a better score later: bright, smaller box
    shot = shots.take(end_of(7), 5, frame_of(30, 0))
    image = decoded(shot.jpeg)
    assert (shot.kind, shot.frame, shot.path) == ("crop", 9, None)
    assert image.shape[:2] == (20, 20) and abs(int(image.mean()) - 220) < 5
    assert shots.take(end_of(7), 6, frame_of(31, 0)) is None  # ended once: nothing kept


def test_object_start_crops_its_box_with_the_padding_inside_the_frame():
    shots = Snapshots(SnapshotConfig(padding=0.25), "cam1")
    body = {"event": "object_start", "object": {"id": 1, "label": "car", "box": [40, 40, 80, 60]}}
    shot = shots.take(body, 0, frame_of(0, 128))
    assert decoded(shot.jpeg).shape[:2] == (30, 60)  # 20 x 40 grown by a quarter on each side
    assert crop(np.zeros((100, 100, 3), np.uint8), [90, 90, 140, 140], 0.1).shape[:2] == (15, 15)  # from 85: 5 px of margin
    assert crop(np.zeros((100, 100, 3), np.uint8), [120, 120, 140, 140], 0.0) is None


def test_events_and_classes_choose_which_events_get_one():
    shots = Snapshots(SnapshotConfig(events=["object_end"], classes=["person"]), "cam1")
    start = {"event": "object_start", "object": {"id": 2, "label": "person", "box": [0, 0, 20, 20]}}
    assert shots.take(start, 0, frame_of(0, 9)) is None
    shots.seen(2, frame_of(0, 9), [0, 0, 20, 20])
    shots.seen(3, frame_of(0, 9), [0, 0, 20, 20])
    assert shots.take(end_of(2, "person"), 1, frame_of(5, 9)) is not None
    assert shots.take(end_of(3, "car"), 2, frame_of(5, 9)) is None


def test_a_folder_that_cannot_be_written_leaves_the_event_without_its_path(tmp_path, caplog):
    (tmp_path / "shots").write_text("a file where the folder should be")
    shots = Snapshots(SnapshotConfig(path=tmp_path / "shots"), "cam1")
    body = {"event": "object_start", "object": {"id": 1, "label": "car", "box": [10, 10, 50, 50]}}
    first, second = shots.take(body, 0, frame_of(0, 9)), shots.take(body, 1, frame_of(1, 9))
    assert first.jpeg and first.path is None and second.path is None and shots.failed == 2
    assert sum("cannot write" in r.getMessage() for r in caplog.records) == 1


def pipeline_file(tmp_path, snapshots: str, sinks: str):
    return sample_pipeline(tmp_path, "  - {type: jsonl, path: out.jsonl}\n" + sinks,
                           analytics="  lines: [{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}]\n"
                                     f"  snapshots: {snapshots}")


def events_in(tmp_path) -> list[dict]:
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    return [m for m in lines if m["type"] == "event"]


def test_a_pipeline_writes_a_snapshot_for_each_object_start_and_end_and_sends_it_beside_the_event(tmp_path):
    """The sample with snapshots to a folder and a zmq sink: every object_start and object_end event
    names its JPEG file, and `streamlens events --snapshots DIR` receives the same bytes as the
    event's third part; no other event has one."""
    from .test_workers import free_port

    port = free_port()
    path = pipeline_file(tmp_path, "{path: shots}", f"  - {{type: zmq, endpoint: 'tcp://127.0.0.1:{port}', "
                                                    "hwm: 100000, wait_subscribers: 1, wait_timeout_s: 60}")
    got = tmp_path / "got"
    listener = subprocess.Popen([sys.executable, "-m", "streamlens", "events", f"tcp://127.0.0.1:{port}",
                                 "--until-eos", "--snapshots", str(got)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        report = streamlens.Pipeline.from_yaml(path).run()
        out, _ = listener.communicate(timeout=120)
    finally:
        listener.kill()
    assert report.exit_code == 0, report.error
    events = events_in(tmp_path)
    with_shots = [e for e in events if e["event"] in ("object_start", "object_end")]
    assert with_shots and any(e["event"] == "object_end" for e in with_shots)
    assert all("snapshot" not in e for e in events if e not in with_shots)
    received = {(m["event"], m["seq"]): m for m in map(json.loads, out.splitlines()) if m["type"] == "event"}
    for e in with_shots:
        shot = e["snapshot"]
        saved = (tmp_path / "shots" / "cam1" / f"{e['event']}-{e['object']['id']}-{e['seq']}.jpg").read_bytes()
        assert shot["path"].endswith(f"{e['event']}-{e['object']['id']}-{e['seq']}.jpg") and shot["kind"] == "crop"
        assert len(saved) == shot["bytes"] and decoded(saved).size > 0
        sent = (got / f"cam1-{e['event']}-{e['object']['id']}-{e['seq']}.jpg").read_bytes()
        assert sent == saved and received[(e["event"], e["seq"])]["snapshot"] == shot
    starts = [e for e in with_shots if e["event"] == "object_start"]
    x1, y1, x2, y2 = starts[0]["object"]["box"]
    h, w = decoded((tmp_path / "shots" / "cam1" / f"object_start-{starts[0]['object']['id']}-{starts[0]['seq']}.jpg")
                   .read_bytes()).shape[:2]
    assert w <= (x2 - x1) * 1.3 + 2 and h <= (y2 - y1) * 1.3 + 2  # the box and its 15% margins, clipped


def test_kind_frame_snapshots_are_the_whole_annotated_frame(tmp_path):
    path = pipeline_file(tmp_path, "{kind: frame, events: [object_start]}", "")
    report = streamlens.Pipeline.from_yaml(path).run()
    assert report.exit_code == 0, report.error
    events = events_in(tmp_path)
    shots = [e["snapshot"] for e in events if "snapshot" in e]
    assert shots and all(s["kind"] == "frame" and s["path"] is None for s in shots)
    assert {e["event"] for e in events if "snapshot" in e} == {"object_start"}


def test_snapshot_keys_are_checked(tmp_path):
    from streamlens.errors import ConfigError

    path = pipeline_file(tmp_path, "{kind: thumbnail}", "")
    with pytest.raises(ConfigError, match=r"analytics\.snapshots\.kind"):
        streamlens.Pipeline.from_yaml(path)
