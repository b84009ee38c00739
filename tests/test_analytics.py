"""Analytics rules on crafted tracks: a line counts a crossing once however the box jitters on it, a
U-turn, a track lost and found across the line; zones with inertia, dwell and loitering on a clock
of our own; objects that stand still fire nothing more; the life of an object as events."""

from __future__ import annotations

import numpy as np
import pytest

from streamlens.analytics import LineRule, StreamAnalytics, ZoneRule

GATE = ((0.0, 100.0), (200.0, 100.0))  # a horizontal line, y = 100, from x 0 to 200: down across it is `out`


def box_at(x: float, y: float, w: float = 20, h: float = 20) -> list[float]:
    """A box whose bottom centre (the anchor) is at x, y."""
    return [x - w / 2, y - h, x + w / 2, y]


def run(analytics: StreamAnalytics, frames: list[list[tuple[int, float, float]]], label="car", dt=0.1,
        t0: float = 0.0) -> list[list[dict]]:
    """Feed frames of (track id, anchor x, anchor y); the events of each frame."""
    out = []
    for i, objects in enumerate(frames):
        xyxy = np.array([box_at(x, y) for _, x, y in objects], np.float64).reshape(-1, 4)
        ids = np.array([k for k, _, _ in objects], np.int64)
        result = analytics.update(t0 + i * dt, xyxy, ids, [label] * len(objects), np.full(len(objects), 0.8))
        out.append(result.events)
    return out


def crossings(events: list[list[dict]]) -> list[tuple[int, str]]:
    return [(e["object"]["id"], e["direction"]) for frame in events for e in frame if e["event"] == "line_cross"]


def test_a_box_jittering_on_the_line_crosses_once():
    line = LineRule("gate", GATE, margin_px=4)
    a = StreamAnalytics(lines=[(line, None)])
    ys = [80, 90, 97, 103, 98, 102, 99, 101, 97, 103, 99, 110, 104, 96, 105, 120]  # wobbles inside the band
    events = run(a, [[(1, 100, y)] for y in ys])
    assert crossings(events) == [(1, "out")]
    assert a.counts()["gate"]["in"] == 0 and a.counts()["gate"]["out"] == 1
    assert a.counts()["gate"]["classes"] == {"car": {"in": 0, "out": 1}}


def test_directions_are_named_as_supervision_line_zone_names_them():
    """`in` and `out` mean what they mean in supervision's LineZone, for lines drawn every way."""
    import supervision as sv

    for start, end in (((0, 100), (200, 100)), ((200, 100), (0, 100)), ((100, 0), (100, 200)), ((0, 0), (200, 200))):
        for path in ([(60, 40), (80, 60), (120, 160), (140, 170)], [(140, 170), (120, 160), (80, 60), (60, 40)]):
            zone = sv.LineZone(sv.Point(*start), sv.Point(*end), triggering_anchors=[sv.Position.BOTTOM_CENTER])
            theirs = []
            for x, y in path:
                crossed_in, crossed_out = zone.trigger(sv.Detections(xyxy=np.array([box_at(x, y)], np.float64),
                                                                     tracker_id=np.array([1])))
                theirs += ["in"] * int(crossed_in.sum()) + ["out"] * int(crossed_out.sum())
            ours = crossings(run(StreamAnalytics(lines=[(LineRule("gate", (start, end)), None)]),
                                 [[(1, x, y)] for x, y in path]))
            assert theirs and [d for _, d in ours] == theirs, (start, end, path)


def test_a_u_turn_before_the_line_counts_nothing_and_one_past_it_counts_both_ways():
    before = StreamAnalytics(lines=[(LineRule("gate", GATE), None)])
    assert crossings(run(before, [[(1, 50, y)] for y in (60, 80, 95, 80, 60)])) == []
    past = StreamAnalytics(lines=[(LineRule("gate", GATE), None)])
    assert crossings(run(past, [[(1, 50, y)] for y in (60, 90, 110, 130, 110, 90, 60)])) == [(1, "out"), (1, "in")]


def test_a_track_lost_and_found_across_the_line_crosses_once():
    a = StreamAnalytics(lines=[(LineRule("gate", GATE), None)], end_after_s=2.0)
    frames = [[(5, 100, 70)], [(5, 100, 80)], [], [], [], [(5, 100, 130)], [(5, 100, 140)]]  # 0.3 s unseen
    assert crossings(run(a, frames)) == [(5, "out")]


def test_a_path_beyond_the_ends_of_the_line_crosses_nothing():
    a = StreamAnalytics(lines=[(LineRule("gate", GATE), None)])
    assert crossings(run(a, [[(1, 300, y)] for y in (60, 90, 110, 140)])) == []


def test_rules_watch_only_their_classes():
    a = StreamAnalytics(lines=[(LineRule("gate", GATE), {"truck"})])
    assert crossings(run(a, [[(1, 50, y)] for y in (60, 140, 150)], label="car")) == []
    assert crossings(run(a, [[(2, 60, y)] for y in (60, 140, 150)], label="truck")) == [(2, "out")]


def test_a_box_carried_past_the_line_and_put_back_by_a_keyframe_crosses_once():
    """Motion between keyframes carries a box over the line, the next keyframe's detection puts it
    back behind the band, then it really crosses: one crossing, not in, out, in."""
    a = StreamAnalytics(lines=[(LineRule("gate", GATE), None)])
    assert crossings(run(a, [[(1, 50, y)] for y in (80, 110, 92, 108, 115, 125)])) == [(1, "out")]
    one = StreamAnalytics(lines=[(LineRule("gate", GATE, min_frames=1), None)])  # every change of side counts
    assert crossings(run(one, [[(1, 50, y)] for y in (80, 110, 92, 108, 115, 125)])) == [(1, "out"), (1, "in"), (1, "out")]


BAY = [(0, 0), (100, 0), (100, 100), (0, 100)]


def zone_events(events: list[list[dict]]) -> list[tuple[int, str, object]]:
    return [(i, e["event"], e.get("dwell_s")) for i, frame in enumerate(events) for e in frame
            if e["event"] in ("zone_enter", "zone_exit", "loiter")]


def test_a_zone_is_entered_and_left_after_inertia_frames_and_says_the_dwell():
    a = StreamAnalytics(zones=[(ZoneRule("bay", BAY, inertia=3), None)])
    xs = [150, 90, 80, 70, 110, 60, 50, 130, 140, 150]  # in from frame 1; one frame out (110): no exit
    events = run(a, [[(1, x, 50)] for x in xs], dt=1.0)
    assert zone_events(events) == [(3, "zone_enter", None), (9, "zone_exit", 6.0)]
    again = StreamAnalytics(zones=[(ZoneRule("bay", BAY, inertia=3), None)])
    flicker = [150, 90, 80, 110, 70, 60, 50]  # out again before the third frame in: the count starts over
    assert zone_events(run(again, [[(1, x, 50)] for x in flicker], dt=1.0)) == [(6, "zone_enter", None)]


def test_loitering_fires_once_and_a_standing_object_fires_nothing_more():
    a = StreamAnalytics(zones=[(ZoneRule("bay", BAY, inertia=2, loiter_s=30.0), None)])
    events = run(a, [[(3, 50, 50)]] * 200, dt=1.0)  # a parked car, 200 s
    assert zone_events(events) == [(1, "zone_enter", None), (31, "loiter", 30.0)]
    assert sum(len(frame) for frame in events[32:]) == 0
    assert a.counts()["bay"] == 1


def test_the_life_of_an_object_start_update_end():
    a = StreamAnalytics(zones=[(ZoneRule("bay", BAY, inertia=1), None)], end_after_s=1.0)
    frames = [[(9, 150, 50)], [(9, 50, 50)], [(9, 40, 50)], [], [], [], []]
    events = run(a, frames, dt=0.5)
    kinds = [(i, e["event"]) for i, frame in enumerate(events) for e in frame]
    assert kinds == [(0, "object_start"), (1, "zone_enter"), (1, "object_update"), (4, "zone_exit"), (4, "object_end")]
    end = events[4][-1]
    assert (end["first_ts"], end["last_ts"], end["zones"], end["best_score"]) == (0.0, 1.0, ["bay"], 0.8)
    assert end["object"]["id"] == 9 and end["object"]["label"] == "car" and len(end["object"]["box"]) == 4
    assert events[4][0]["dwell_s"] == 0.5  # entered at 0.5 s, last seen at 1.0 s


def test_untracked_objects_are_left_out_and_frames_carry_zones_and_speed():
    a = StreamAnalytics(zones=[(ZoneRule("bay", BAY, inertia=1), None)], pixels_per_metre=10.0)
    xyxy = np.array([box_at(50, 50), box_at(300, 50)], np.float64)
    first = a.update(0.0, xyxy, np.array([1, -1]), ["car", "car"], np.array([0.9, 0.9]))
    moved = np.array([box_at(60, 50), box_at(300, 50)], np.float64)
    second = a.update(0.5, moved, np.array([1, -1]), ["car", "car"], np.array([0.9, 0.9]))
    assert first.zones == [["bay"], None] and second.zones == [["bay"], None]
    assert second.speeds == [7.2, None]  # 10 px = 1 m in 0.5 s: 2 m/s


def test_zone_containment_agrees_with_opencv_on_a_concave_polygon():
    import cv2

    shape = [(0, 0), (100, 0), (100, 40), (40, 40), (40, 100), (0, 100)]  # an L
    zone = ZoneRule("l", shape)
    points = np.random.default_rng(1).uniform(-10, 110, (2000, 2))
    ours = zone.contains(points)
    theirs = np.array([cv2.pointPolygonTest(np.float32(shape), (float(x), float(y)), True) for x, y in points])
    away = np.abs(theirs) > 1e-6  # points on an edge may go either way
    assert np.array_equal(ours[away], theirs[away] > 0) and ours.sum() > 100


# -- in a pipeline -------------------------------------------------------------------------------

def test_a_pipeline_counts_what_crosses_a_line_and_publishes_events(tmp_path):
    """The sample through the motion detector and tracker with a line across the road and a zone:
    frames carry each object's zones and the running counts, events are messages of their own with a
    gapless seq, every line_cross event is counted once, and a subscriber's gap check keeps the two
    seq series apart."""
    import json

    import streamlens
    from streamlens.wire.subscriber import SeqTracker

    from .conftest import sample_pipeline

    path = sample_pipeline(tmp_path, "  - {type: jsonl, path: out.jsonl}")
    report = streamlens.Pipeline.from_yaml(path).run()
    assert report.exit_code == 0, report.error
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    frames = [m for m in lines if m["type"] == "frame"]
    events = [m for m in lines if m["type"] == "event"]
    assert len(frames) == 300 and events
    assert [e["seq"] for e in events] == list(range(len(events)))
    crossed = [e for e in events if e["event"] == "line_cross"]
    last = frames[-1]["counts"]["across"]
    assert crossed and last["in"] + last["out"] == len(crossed)
    assert {e["event"] for e in events} >= {"object_start", "line_cross", "zone_enter"}
    for e in events:
        assert e["stream"] == "cam1" and isinstance(e["frame"], int) and {"id", "label", "score", "box"} <= set(e["object"])
    tracked = [o for m in frames for o in m["objects"] if o["id"] >= 0]
    assert any(o.get("zones") == ["left"] for o in tracked)
    checker = SeqTracker()
    gaps = [checker.check(m["stream"], m["seq"], last=m["type"] == "eos", kind="event" if m["type"] == "event" else "frame")
            for m in lines]
    assert gaps == [None] * len(lines)


def test_streamlens_events_prints_the_events_a_pipeline_publishes(tmp_path):
    """`streamlens events ENDPOINT --until-eos` against a zmq sink: every event the jsonl file holds,
    in order, and nothing but events (and the stream's eos)."""
    import json
    import subprocess
    import sys

    import streamlens

    from .conftest import sample_pipeline
    from .test_workers import free_port

    port = free_port()
    path = sample_pipeline(tmp_path, "  - {type: jsonl, path: out.jsonl}\n"
                           f"  - {{type: zmq, endpoint: 'tcp://127.0.0.1:{port}', hwm: 100000, wait_subscribers: 2, "
                           "wait_timeout_s: 60}", analytics="  lines: [{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}]")
    listener = subprocess.Popen([sys.executable, "-m", "streamlens", "events", f"tcp://127.0.0.1:{port}", "--until-eos"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        report = streamlens.Pipeline.from_yaml(path).run()  # starts once the listener's two topics arrived
        out, err = listener.communicate(timeout=120)
    finally:
        listener.kill()
    assert report.exit_code == 0 and listener.returncode == 0, err
    printed = [json.loads(line) for line in out.splitlines()]
    written = [m for m in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines()) if m["type"] == "event"]
    assert written and [m for m in printed if m["type"] == "event"] == written
    assert [m["type"] for m in printed if m["type"] != "event"] == ["eos"]
    assert "0 lost" in err


def test_speed_on_the_ground_plane_is_the_same_near_and_far():
    """`analytics.ground`: a car at 10 m/s along a road seen in perspective reads 36 km/h both where
    the road is near (wide in the image) and far (narrow), where pixels over a fixed scale differ."""
    from streamlens.analytics.build import ground_homography

    corners = [(400.0, 700.0), (880.0, 700.0), (700.0, 300.0), (580.0, 300.0)]  # 7 m wide, 60 m long
    to_ground = ground_homography(corners, 7.0, 60.0)
    to_image = np.linalg.inv(to_ground)

    def image_point(x_m: float, y_m: float) -> tuple[float, float]:
        x, y, w = to_image @ (x_m, y_m, 1.0)
        return x / w, y / w

    def speed_at(y0_m: float) -> float:
        a = StreamAnalytics(ground=to_ground)
        out = None
        for k in range(6):  # 10 m/s for half a second, anchors at the box's bottom centre
            x, y = image_point(3.5, y0_m + k * 1.0)
            out = a.update(k * 0.1, np.array([[x - 20, y - 30, x + 20, y]], np.float64), np.array([4]), ["car"],
                           np.array([0.9]))
        return out.speeds[0]

    assert speed_at(2.0) == pytest.approx(36.0, abs=0.5)
    assert speed_at(45.0) == pytest.approx(36.0, abs=0.5)
    near, far = image_point(3.5, 2.0), image_point(3.5, 45.0)
    step_near = np.hypot(*np.subtract(image_point(3.5, 3.0), near))
    step_far = np.hypot(*np.subtract(image_point(3.5, 46.0), far))
    assert step_near > 3 * step_far  # what one pixels_per_metre would get wrong


def test_ground_points_scale_as_fractions_of_the_frame():
    from streamlens.analytics.build import build_stream_analytics
    from streamlens.config.model import AnalyticsConfig

    cfg = AnalyticsConfig(ground={"points": [[0.25, 1.0], [0.75, 1.0], [0.75, 0.0], [0.25, 0.0]], "width_m": 10.0,
                                  "length_m": 20.0})
    a = build_stream_analytics(cfg, "cam1", 800, 400)
    x, y, w = a.ground @ (600.0, 200.0, 1.0)  # three quarters across, half way up
    assert (round(x / w, 6), round(y / w, 6)) == (10.0, 10.0)
