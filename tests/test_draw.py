"""What the annotated video and the JPEG frames draw of the analytics: lines, zones, their counts, the
`in` side of a line, objects' speeds; the original image left alone; and end to end, a pipeline's
annotated mp4 and the JPEG frames a zmq subscriber receives show the configured line."""

from __future__ import annotations

import threading

import av
import cv2
import numpy as np
import supervision as sv

from streamlens.analytics import LineRule, StreamAnalytics
from streamlens.analytics.stream import FrameAnalytics, Geometry
from streamlens.sinks.draw import LINE_COLORS, ZONE_COLORS, FrameAnnotator, labels_for

W, H = 640, 360
LINE = ((100.0, 300.0), (540.0, 300.0))  # a horizontal line low in the frame
ZONE = np.array([[60, 40], [260, 40], [260, 200], [60, 200]], np.float64)  # a rectangle up left


def analytics(line_counts=(0, 0), zone_count=0, speeds=(), lines=(("gate", LINE),), zones=(("bay", ZONE),)):
    """A frame's analytics made by hand: the rules' geometry and their counts."""
    counts = {name: {"in": line_counts[0], "out": line_counts[1], "classes": {}} for name, _ in lines}
    counts.update({name: zone_count for name, _ in zones})
    return FrameAnalytics([], counts, [], speeds=list(speeds), geometry=Geometry(tuple(lines), tuple(zones)))


def blank() -> np.ndarray:
    return np.full((H, W, 3), 40, np.uint8)


def changed(drawn: np.ndarray, before: np.ndarray, x: float, y: float, r: int = 1) -> bool:
    """Whether any pixel within `r` of (x, y) differs from `before`."""
    x, y = int(round(x)), int(round(y))
    return bool((drawn[y - r:y + r + 1, x - r:x + r + 1] != before[y - r:y + r + 1, x - r:x + r + 1]).any())


def a_car(x1=300, y1=100, x2=380, y2=160) -> sv.Detections:
    det = sv.Detections(xyxy=np.array([[x1, y1, x2, y2]], np.float32), confidence=np.array([0.83], np.float32),
                        class_id=np.array([2]), tracker_id=np.array([7]))
    det.data["class_name"] = np.array(["car"], dtype=object)
    return det


def test_lines_and_zone_outlines_are_drawn_where_they_are_and_nothing_far_from_them():
    image = blank()
    drawn = FrameAnnotator((W, H)).annotate(image, sv.Detections.empty(), analytics())
    (ax, ay), (bx, by) = LINE
    for t in np.linspace(0.3, 0.95, 30):  # along the line, past its label at the first point
        assert changed(drawn, image, ax + t * (bx - ax), ay + t * (by - ay), r=0)
    corners = np.vstack([ZONE, ZONE[:1]])
    for (x0, y0), (x1, y1) in zip(corners[:-1], corners[1:]):  # each edge, in the zone's own colour
        for t in np.linspace(0.05, 0.95, 20):
            x, y = int(x0 + t * (x1 - x0)), int(y0 + t * (y1 - y0))
            assert drawn[y, x].tolist() == list(ZONE_COLORS.by_idx(0).as_bgr()), (x, y)
    assert drawn[70, 90].tolist() != image[70, 90].tolist()  # the light fill inside the zone
    assert np.abs(drawn[70, 90].astype(int) - image[70, 90]).max() <= 64  # light: a quarter of its colour at most
    brighter = FrameAnnotator((W, H)).annotate(np.full((H, W, 3), 120, np.uint8), sv.Detections.empty(), analytics())
    assert brighter[70, 90].tolist() != drawn[70, 90].tolist()  # the frame shows through the fill
    for x, y in [(600, 20), (450, 150), (300, 40), (30, 120), (160, 230), (320, 260), (320, 340), (580, 300)]:
        assert not changed(drawn, image, x, y, r=3), (x, y)  # beside the zone, above, below and beyond the line


def test_the_counts_are_drawn_and_change_with_them():
    annotator = FrameAnnotator((W, H))
    none = annotator.annotate(blank(), sv.Detections.empty(), analytics((0, 0), 0))
    some = annotator.annotate(blank(), sv.Detections.empty(), analytics((12, 3), 12))
    differ = np.argwhere((none != some).any(axis=2))  # (y, x) of every pixel that differs
    near_line_label = (np.abs(differ[:, 0] - LINE[0][1]) < 40) & (differ[:, 1] >= LINE[0][0]) & (differ[:, 1] < 300)
    near_zone_label = (np.abs(differ[:, 0] - ZONE[:, 1].mean()) < 20) & (np.abs(differ[:, 1] - ZONE[:, 0].mean()) < 60)
    assert near_line_label.any() and near_zone_label.any()
    assert (near_line_label | near_zone_label).all()  # the counts' text and nothing else


def test_the_in_arrow_points_to_the_side_a_line_rule_counts_as_in():
    for ends in [((150.0, 80.0), (500.0, 280.0)), ((500.0, 280.0), (150.0, 80.0)), ((320.0, 330.0), (320.0, 30.0))]:
        found = StreamAnalytics(lines=[(LineRule("gate", ends), None)]).update(
            0.0, np.zeros((0, 4)), np.zeros(0, np.int64), [], np.zeros(0))
        image = blank()
        drawn = FrameAnnotator((W, H)).annotate(image, sv.Detections.empty(), found)
        (ax, ay), (bx, by) = ends
        mid = np.array([(ax + bx) / 2, (ay + by) / 2])
        across = np.array([ay - by, bx - ax]) / np.hypot(bx - ax, by - ay)  # one of the two normals
        one, other = mid + 10 * across, mid - 10 * across
        assert changed(drawn, image, *one) != changed(drawn, image, *other), ends  # a mark on one side only
        marked, unmarked = (one, other) if changed(drawn, image, *one) else (other, one)
        rule = StreamAnalytics(lines=[(LineRule("gate", ends), None)])
        crossing = [unmarked + 20 * (unmarked - mid) / 10, marked + 20 * (marked - mid) / 10,
                    marked + 24 * (marked - mid) / 10]  # kept on the marked side for min_frames (2)
        events = [e for i, p in enumerate(crossing) for e in rule.update(
            i * 0.1, np.array([[p[0] - 5, p[1] - 10, p[0] + 5, p[1]]]), np.array([1]), ["car"], np.array([0.9])).events]
        assert [e["direction"] for e in events if e["event"] == "line_cross"] == ["in"], ends


def test_the_image_given_is_never_changed_and_returned_only_when_there_is_nothing_to_draw():
    image = np.random.default_rng(3).integers(0, 255, (H, W, 3), dtype=np.uint8)
    before = image.copy()
    annotator = FrameAnnotator((W, H))
    drawn = annotator.annotate(image, a_car(), analytics((2, 1), 1, speeds=[50.0]))
    assert np.array_equal(image, before) and not np.array_equal(drawn, image)
    rules_only = annotator.annotate(image, sv.Detections.empty(), analytics())
    assert rules_only is not image and not np.array_equal(rules_only, image) and np.array_equal(image, before)
    assert annotator.annotate(image, sv.Detections.empty()) is image
    assert annotator.annotate(image, sv.Detections.empty(), analytics(lines=(), zones=())) is image
    no_geometry = FrameAnalytics([], {}, [], [])
    assert annotator.annotate(image, sv.Detections.empty(), no_geometry) is image


def test_an_objects_speed_is_in_its_label_where_known():
    det = a_car()
    assert labels_for(det) == ["#7 car 0.83"]
    assert labels_for(det, [54.4]) == ["#7 car 0.83 54 km/h"] and labels_for(det, [None]) == ["#7 car 0.83"]
    annotator = FrameAnnotator((W, H))
    slow = annotator.annotate(blank(), det, analytics(speeds=[None], lines=(), zones=()))
    fast = annotator.annotate(blank(), det, analytics(speeds=[54.4], lines=(), zones=()))
    assert np.array_equal(slow, annotator.annotate(blank(), det))  # no speed: the label as before
    differ = np.argwhere((slow != fast).any(axis=2))
    assert len(differ) and differ[:, 0].max() <= 101 and differ[:, 1].min() >= 300  # the label on the box grew


def test_a_stream_of_another_geometry_or_size_is_drawn_anew():
    annotator = FrameAnnotator((W, H))
    first = annotator.annotate(blank(), sv.Detections.empty(), analytics())
    moved = ((("gate", ((100.0, 100.0), (540.0, 100.0))),))
    second = annotator.annotate(blank(), sv.Detections.empty(), analytics(lines=moved, zones=()))
    assert changed(second, blank(), 400, 100, r=0) and not changed(second, blank(), 400, 300, r=0)
    assert changed(first, blank(), 400, 300, r=0)
    small = annotator.annotate(np.full((120, 160, 3), 40, np.uint8), sv.Detections.empty(), analytics())
    assert small.shape == (120, 160, 3)  # a zone and a line beyond the frame are cut, not an error


# -- in a pipeline -------------------------------------------------------------------------------

def test_a_pipelines_annotated_video_and_jpeg_frames_show_the_line(tmp_path):
    """The sample through the motion detector with a line down the middle and a zone: the line is
    drawn on every frame of the annotated mp4 and of the JPEG frames a zmq subscriber receives."""
    import streamlens
    from streamlens import Subscriber

    from .conftest import REPO
    from .test_workers import free_port

    sample = REPO / "samples" / "traffic.mp4"
    port = free_port()
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources: [{{uri: {sample}}}]
detector: {{backend: motion}}
keyframes: {{interval: 3}}
analytics:
  lines: [{{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}}]
  zones: [{{name: low, polygon: [[0.05, 0.6], [0.35, 0.6], [0.35, 0.95], [0.05, 0.95]]}}]
sinks:
  - {{type: video, path: out.mp4}}
  - {{type: zmq, endpoint: 'tcp://127.0.0.1:{port}', hwm: 100000, wait_subscribers: 1, wait_timeout_s: 60,
      frames: jpeg, annotate: true}}
""")
    jpegs: dict[int, np.ndarray] = {}

    def listen(sub: Subscriber) -> None:
        while (msg := sub.recv(timeout=60)) is not None and msg.type != "eos":
            if msg.type == "frame":
                jpegs[msg.data["frame"]] = cv2.imdecode(np.frombuffer(msg.jpeg, np.uint8), cv2.IMREAD_COLOR)

    with Subscriber(f"tcp://127.0.0.1:{port}", hwm=100000) as sub:
        listener = threading.Thread(target=listen, args=(sub,))
        listener.start()
        report = streamlens.Pipeline.from_yaml(path).run()  # starts once the subscriber is in
        listener.join(timeout=120)
    assert report.exit_code == 0, report.error
    with av.open(str(sample)) as c:
        source = [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]
    with av.open(str(tmp_path / "out.mp4")) as c:
        annotated = [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]
    assert len(annotated) == len(source) == len(jpegs) == 300
    ys = np.arange(40, 340, 4)  # down the line, below its label at the top
    colour = np.array(LINE_COLORS.by_idx(0).as_bgr())

    def shows_the_line(image: np.ndarray, plain: np.ndarray, x: int = W // 2) -> bool:
        on = image[ys, x].astype(int)
        return bool(np.median(np.abs(on - plain[ys, x]).max(axis=1)) > 60
                    and np.median(np.abs(on - colour).max(axis=1)) < 60)  # the line's colour, give or take the codec

    assert all(shows_the_line(annotated[i], source[i]) for i in range(300))
    assert all(shows_the_line(jpegs[i], source[i]) for i in range(300))
    assert not any(shows_the_line(annotated[i], source[i], x=W // 2 + 80) for i in range(300))  # only there
