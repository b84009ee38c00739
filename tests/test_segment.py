"""Masks for tracked objects (`segment:`): where SAM's masks land, how they ride with their boxes, the
contract's COCO forms, the drawing, the embedding cache, and the bad input a user can give.

The correctness tests use a tiny SAM-format ONNX pair whose mask is the middle half of the prompted
box (tests/sam_models.py); the compute path runs Ultralytics' MobileSAM with random weights."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import supervision as sv

import streamlens
from streamlens.config.model import SegmentConfig
from streamlens.frame import Frame, FrameResult
from streamlens.secondary.cache import MemoryCache
from streamlens.segment.masks import BoxMask, rle_decode
from streamlens.segment.stage import SegmentStage
from streamlens.sinks.base import Sink
from streamlens.sinks.draw import MASK_COLORS, FrameAnnotator

from .conftest import REPO, streamlens as run_cli
from .sam_models import build_random_mobile_sam, build_tiny_sam, inner_box

WAIT_S = 30.0
#: the cell detector's `conf` on the sample: a cell is an object while its mean grey level is above it
CELL_CONF = 0.4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_sam(tmp_path_factory.mktemp("sam"))


def stage_with(tiny, cache=None, **keys) -> SegmentStage:
    encoder, decoder = tiny
    return SegmentStage(SegmentConfig(model=encoder, decoder=decoder, **keys), cache)


def tracked(boxes, ids, labels=None) -> sv.Detections:
    det = sv.Detections(xyxy=np.array(boxes, np.float32).reshape(-1, 4), confidence=np.full(len(boxes), 0.9, np.float32),
                        class_id=np.zeros(len(boxes), np.int64), tracker_id=np.array(ids, np.int64))
    det.data["class_name"] = np.array(labels or ["car"] * len(boxes), dtype=object)
    return det


def image(seed: int = 0, size=(480, 640)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (*size, 3), np.uint8)


def answered(stage: SegmentStage, make_result, want: int) -> FrameResult:
    """Results made by `make_result(k)` through the stage until `want` answers applied."""
    import time

    deadline = time.monotonic() + WAIT_S
    k = 0
    while True:
        result, _ = stage.process(make_result(k), [])
        if stage.applied >= want:
            return result
        assert time.monotonic() < deadline, "no answer from the segment worker"
        time.sleep(0.01)
        k += 1


def polygon_bounds(polygons) -> np.ndarray:
    points = np.concatenate([np.array(p).reshape(-1, 2) for p in polygons])
    return np.concatenate([points.min(0), points.max(0)])


# -- where masks land, and how they ride ------------------------------------------------------------

def test_masks_land_on_their_objects_and_move_and_scale_with_their_boxes(tiny):
    """Two objects on one keyframe: one encoder run, one decoder call for both; each mask is the
    decoder's known shape of its own box, and on later frames it follows its track's box."""
    stage = stage_with(tiny)
    stage.start()
    try:
        frame = Frame("cam1", 0, 0.0, 0.0, image())
        boxes = [[40, 60, 240, 300], [360, 80, 600, 400]]
        det = tracked(boxes, [1, 2])
        stage.offer(frame, det, det)
        later = [[140, 60, 340, 300], [360, 80, 480, 240]]  # one moved right, one half as big

        def result(k):
            return FrameResult(Frame("cam1", 1 + k, (1 + k) / 30, 0.0, image()), 1 + k, False, tracked(later, [1, 2]))

        out = answered(stage, result, 1)
    finally:
        stage.close()
    assert stage.encoded == 1 and stage.decoded == 2 and stage.decode_objects == [2]
    for shape, box in zip(out.detections.data["mask"], later):
        assert np.allclose(polygon_bounds(shape), inner_box(box), atol=1.5), (shape, box)


def asked(stage: SegmentStage, pts: float, found: sv.Detections, det: sv.Detections) -> list[int] | None:
    """The tracks of the job `stage` made for a keyframe at `pts` (None: none), taken from its
    inbox (the stage is not started: nothing else takes them)."""
    jobs = stage.jobs
    stage.offer(Frame("cam1", round(pts * 10), pts, 0.0, image()), found, det)
    return stage.slots.pop("cam1").tracks if stage.jobs > jobs else None


def test_fresh_masks_come_on_the_first_keyframe_of_each_every_s_step_of_the_sources_time(tiny):
    """`every_s: 2`, keyframes 0.7 s apart: the tracks are asked for together on the first keyframe
    of each 2 s step of `pts` (0.0, 2.1, 4.2, ...); a new track at once, the due ones with it; a
    keyframe without objects still takes its step; and `pts` going back (a loop) starts a step."""
    stage = stage_with(tiny, every_s=2.0)
    one, both = tracked([[40, 60, 240, 300]], [1]), tracked([[40, 60, 240, 300], [300, 60, 500, 300]], [1, 2])
    seen_one = tracked([[40, 60, 240, 300]], [9])  # the detector's boxes: only track 1's
    three = tracked([[40, 60, 240, 300], [300, 60, 500, 300], [300, 320, 500, 460]], [1, 2, 3])
    assert asked(stage, 0.0, one, one) == [1]  # the stream's first keyframe
    assert asked(stage, 0.7, one, one) is None and asked(stage, 1.4, one, one) is None
    assert asked(stage, 2.1, one, one) == [1]  # the first keyframe of step 1
    assert asked(stage, 2.8, both, both) == [2]  # a new track: at once, alone (1 was asked in this step)
    assert asked(stage, 3.5, both, both) is None
    assert asked(stage, 4.2, seen_one, both) == [1]  # step 2: the detector missed track 2
    assert asked(stage, 4.9, both, both) is None  # track 2 is due, but waits: no new track, no step
    assert asked(stage, 5.6, three, three) == [2, 3]  # a new track: the one due comes along
    assert asked(stage, 6.3, tracked([], []), tracked([], [])) is None  # step 3's keyframe, empty
    assert asked(stage, 7.0, three, three) is None  # step 3 was taken by that keyframe
    assert asked(stage, 8.4, three, three) == [1, 2, 3]  # step 4
    assert asked(stage, 0.0, both, both) == [1, 2]  # pts went back: a new step


def test_only_objects_the_detector_saw_of_the_classes_and_size_asked_for_get_masks(tiny):
    stage = stage_with(tiny, classes=["car"])
    det = tracked([[40, 60, 240, 300], [300, 60, 500, 300], [10, 10, 14, 14]], [1, 2, 3],
                  ["car", "person", "car"])
    assert asked(stage, 0.0, tracked([], []), det) is None  # the detector saw none: carried by motion
    assert asked(stage, 0.1, det, det) == [1]  # the person is not in classes; track 3 is under min_size


def test_a_newer_keyframe_takes_its_streams_slot_and_the_waiting_tracks_come_along(tiny):
    """A camera's job still waiting when its next keyframe has objects due is replaced by that
    keyframe's (the newest wins), and the tracks of the old job come along when the detector saw
    them there; one not seen there is due again on the next keyframe that shows it."""
    stage = stage_with(tiny, every_s=100)  # not started: the jobs wait
    one = tracked([[40, 60, 240, 300]], [1])
    stage.offer(Frame("cam1", 0, 0.0, 0.0, image()), one, one)
    both = tracked([[40, 60, 240, 300], [300, 60, 500, 300]], [1, 2])
    stage.offer(Frame("cam1", 3, 0.1, 0.0, image()), both, both)  # track 2 is new: a job, with track 1 in it
    assert stage.jobs == 2 and stage.replaced == 1 and len(stage.slots) == 1
    three = tracked([[40, 60, 240, 300], [300, 60, 500, 300], [300, 320, 500, 460]], [1, 2, 3])
    only_three = tracked([[300, 320, 500, 460]], [9])  # the detector saw only track 3's box
    stage.offer(Frame("cam1", 6, 0.2, 0.0, image()), only_three, three)
    assert stage.slots.pop("cam1").tracks == [3] and stage.replaced == 2
    assert asked(stage, 0.3, three, three) == [1, 2]  # they waited: due on the next keyframe that shows them


def test_the_worker_serves_the_job_whose_tracks_waited_longest_across_cameras(tiny):
    stage = stage_with(tiny, every_s=100)  # not started: the jobs wait
    for k, stream in enumerate(("cam1", "cam2", "cam3")):
        det = tracked([[40, 60, 240, 300]], [1])
        stage.offer(Frame(stream, 0, 0.0, 0.0, image(k)), det, det)
    det = tracked([[40, 60, 240, 300], [300, 60, 500, 300]], [1, 2])
    stage.offer(Frame("cam1", 3, 0.1, 0.0, image()), det, det)  # cam1's newer job: track 1 waits since first
    assert [stage.slots.take(0.0).stream for _ in range(3)] == ["cam1", "cam2", "cam3"]


def test_the_contracts_rle_and_polygons_are_the_masks_pixels(tiny):
    """RLE decodes (as pycocotools would) to the pixels the mask covers; the polygons enclose them."""
    cv2 = pytest.importorskip("cv2")
    mask = stage_with(tiny).sam.decode(stage_with(tiny).sam.encode(image()), np.array([[40, 60, 240, 300.]]),
                                       640, 480)[0]
    full = rle_decode(mask.rle(480, 640))
    x1, y1, x2, y2 = inner_box([40, 60, 240, 300])
    ys, xs = np.nonzero(full)
    assert abs(xs.min() - x1) <= 1.5 and abs(xs.max() + 1 - x2) <= 1.5
    assert abs(ys.min() - y1) <= 1.5 and abs(ys.max() + 1 - y2) <= 1.5
    drawn = np.zeros((480, 640), np.uint8)
    for part in mask.polygons():
        cv2.fillPoly(drawn, [np.round(np.array(part).reshape(-1, 2)).astype(np.int32)], 1)
    agree = (drawn.astype(bool) == full).mean()
    assert agree > 0.995


def test_rle_is_pycocotools_own_encoding():
    mask_util = pytest.importorskip("pycocotools.mask", reason="pycocotools is not installed")
    rng = np.random.default_rng(1)
    for _ in range(50):
        bits = rng.random((rng.integers(1, 40), rng.integers(1, 40))) > 0.5
        x1, y1 = rng.uniform(-20, 100, 2)
        mask = BoxMask(bits, (x1, y1, x1 + rng.uniform(1, 80), y1 + rng.uniform(1, 80)), (0, 0, 1, 1))
        rle = mask.rle(90, 120)
        ours = rle_decode(rle)
        assert mask_util.encode(np.asfortranarray(ours.astype(np.uint8)))["counts"].decode() == rle["counts"]
        assert (mask_util.decode({"size": rle["size"], "counts": rle["counts"].encode()}).astype(bool) == ours).all()


def test_masks_are_drawn_where_the_results_put_them(tiny):
    """The annotated frame: pixels inside an object's mask take its colour, pixels of its box
    outside the mask keep theirs."""
    sam = stage_with(tiny).sam
    grey = np.full((480, 640, 3), 90, np.uint8)
    box = [40, 60, 440, 420]
    det = tracked([box], [4])
    mask = sam.decode(sam.encode(grey), np.array([box], np.float64), 640, 480)[0]
    det.data["masks"] = np.array([mask], dtype=object)
    drawn = FrameAnnotator((640, 480)).annotate(grey, det)
    colour = np.array(MASK_COLORS.by_idx(4).as_bgr())
    x1, y1, x2, y2 = inner_box(box)
    inside = drawn[int(y1) + 5:int(y2) - 5, int(x1) + 5:int(x2) - 5].reshape(-1, 3).astype(int)
    assert np.abs(inside - (0.5 * 90 + 0.5 * colour)).max() <= 1
    ring = drawn[int(y2) + 5:int(y2) + 20, int(x1):int(x2)]  # in the box, under the mask
    assert (ring == 90).all()


def test_an_onnx_decoder_exported_with_batch_one_is_called_once_per_box(tmp_path):
    encoder, decoder = build_tiny_sam(tmp_path, batched=False)
    stage = SegmentStage(SegmentConfig(model=encoder, decoder=decoder))
    assert not stage.sam.batched
    boxes = np.array([[40, 60, 240, 300], [360, 80, 600, 400.]])
    made = stage.sam.decode(stage.sam.encode(image()), boxes, 640, 480)
    for mask, box in zip(made, boxes):
        assert np.allclose(polygon_bounds(mask.polygons()), inner_box(box), atol=1.5)


# -- the cache ------------------------------------------------------------------------------------

def test_the_same_pixels_never_encode_twice(tiny):
    stage = stage_with(tiny, MemoryCache(4))
    first = stage.embedding(image(0))
    again = stage.embedding(image(0).copy())
    other = stage.embedding(image(1))
    assert stage.encoded == 2 and stage.cached == 1
    assert all((a == b).all() for a, b in zip(first, again)) and not (first[0] == other[0]).all()


def pipeline(folder, segment: str, loops: str = "", sinks: str = "[{type: jsonl, path: out.jsonl}]",
             detector: str = "{backend: motion}"):
    path = folder / "p.yaml"
    path.write_text(f"""
sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}{loops}}}]
detector: {detector}
keyframes: {{interval: 3}}
segment: {segment}
sinks: {sinks}
""")
    return path


def test_the_second_pass_of_a_looping_clip_encodes_nothing(tmp_path, tiny):
    """Two laps of the 300-frame sample, keyframes every 3rd frame, `every_s: 1`, through a detector
    that sees the same boxes on the same pixels (tests/cell_detector.py: its boxes come and go as
    cars cross its cells, so tracks are born all through a lap): the frames the encoder is asked for
    depend only on the file, so the second lap asks for frames the first lap encoded, and the
    encoder runs on none of them. The file is read as a file: its results wait for their masks, so
    no keyframe is dropped however slow the machine."""
    from .cell_detector import build_cell_detector

    encoder, decoder = tiny
    cells = build_cell_detector(tmp_path)
    path = pipeline(tmp_path, f"{{model: {encoder}, decoder: {decoder}, every_s: 1, cache_items: 400}}",
                    loops=", loop: true", sinks="[]",
                    detector=f"{{backend: onnx, model: {cells}, resize: resize, conf: {CELL_CONF}}}")
    with streamlens.Pipeline.from_yaml(path) as pipe:
        published = 0
        for item in pipe.results():  # until the worker (in order) answered a job of the third lap
            published += isinstance(item, FrameResult)
            answered = pipe._stages.segment.segmented_frames
            if published >= 600 and answered and answered[-1][1] >= 600:
                break
            assert published < 1200, "no job of the third lap was answered"
        stage = pipe._stages.segment
        jobs = list(stage.segmented_frames)
        dropped = stage.dropped
    assert dropped == 0
    first = {frame: encoded for _, frame, encoded in jobs if frame < 300}
    second = {frame - 300: encoded for _, frame, encoded in jobs if 300 <= frame < 600}
    assert sum(first.values()) >= 10, first  # the first lap encoded: tracks are born all through it
    assert len(second) >= 10 and not any(second.values()), (sorted(first), sorted(second))


# -- in a pipeline --------------------------------------------------------------------------------

class MaskSeen(Sink):
    """Tells (`masked`) once a published frame has an object with a mask."""

    name = "mask-seen"

    def __init__(self):
        self.masked = threading.Event()

    def write(self, item, message, payload) -> None:
        if message.get("type") == "frame" and any("mask" in o for o in message.get("objects", ())):
            self.masked.set()


class StatsKept(Sink):
    """Keeps the `stats` messages a run publishes."""

    name = "stats-kept"
    wants_stats = True

    def __init__(self):
        self.messages: list[dict] = []

    def write(self, item, message, payload) -> None:
        if message.get("type") == "stats":
            self.messages.append(message)


def test_a_pipeline_publishes_masks_that_follow_their_boxes(tmp_path, tiny):
    """The sample through the motion detector: objects carry `mask` once their first answer is in
    (never before their first frame: nothing waited); every mask lies about its box. Paced at the
    file's rate (`live: true`), so answers come while it plays however fast the machine decodes."""
    encoder, decoder = tiny
    path = pipeline(tmp_path, f"{{model: {encoder}, decoder: {decoder}, output: polygon}}", loops=", live: true",
                    sinks="[{type: jsonl, path: out.jsonl}, {type: video, path: out.mp4}]")
    told = StatsKept()
    with streamlens.Pipeline.from_yaml(path, sinks=[told]) as pipe:
        report = pipe.run()
        stats = pipe.segment_stats()
    assert report.exit_code == 0, report.error
    messages = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    frames = [m for m in messages if m["type"] == "frame"]
    lost = sum(n for cause, n in next(m for m in messages if m["type"] == "eos")["lost"].items()
               if cause != "corrupt")  # frames: paced, a busy machine may drop some, each counted
    assert len(frames) + lost == 300 and (tmp_path / "out.mp4").stat().st_size > 0
    # every stats message says what the masks did (the last, just before the eos, all of it)
    assert told.messages and all("segment" in m for m in told.messages)
    # the worker may still answer a job after the last message, before it is closed
    assert told.messages[-1]["segment"]["encoded"] <= stats["encoded"]
    masked = [o for m in frames for o in m["objects"] if "mask" in o]
    assert masked and stats["encoded"] >= 1 and stats["encoded"] + stats["cached"] == stats["segmented"]
    outlined = [o for o in masked if o["mask"]]  # a mask of a pixel or two has no outline: `[]`
    assert outlined
    for obj in outlined:
        x1, y1, x2, y2 = obj["box"]
        bx1, by1, bx2, by2 = polygon_bounds(obj["mask"])
        pad = 0.15 * max(x2 - x1, y2 - y1) + 2
        assert x1 - pad <= bx1 and bx2 <= x2 + pad and y1 - pad <= by1 and by2 <= y2 + pad, obj


def test_mobile_sam_with_random_weights_masks_a_run(tmp_path_factory):
    """The compute path: Ultralytics' MobileSAM (random weights, built offline): a run completes,
    objects carry masks in RLE, and the encoder ran once per keyframe that had objects due. The
    file is paced at its own rate and loops (`live: true, loop: true`) until masks have come (the
    encoder takes seconds a frame on a small CPU), then the run is stopped."""
    folder = tmp_path_factory.mktemp("mobile")
    model = build_random_mobile_sam(folder)
    path = folder / "p.yaml"
    path.write_text(f"""
sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}, live: true, loop: true}}]
detector: {{backend: motion}}
keyframes: {{interval: 3}}
segment: {{model: {model}, every_s: 30, output: rle}}
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    seen = MaskSeen()
    with streamlens.Pipeline.from_yaml(path, sinks=[seen]) as pipe:
        reports = []
        runner = threading.Thread(target=lambda: reports.append(pipe.run()))
        runner.start()
        deadline = time.monotonic() + 600  # a bound for a machine that hangs, not a speed test
        while runner.is_alive() and not seen.masked.wait(0.2) and time.monotonic() < deadline:
            pass
        pipe.stop()
        runner.join(120)
        stats = pipe.segment_stats()
    report = reports[0]
    assert report.exit_code in (0, 130), report.error  # stopped
    assert stats["encoded"] >= 1 and stats["encoded"] + stats["cached"] == stats["segmented"]
    frames = [json.loads(line) for line in (folder / "out.jsonl").read_text().splitlines()]
    rles = [o["mask"] for m in frames if m["type"] == "frame" for o in m["objects"] if "mask" in o]
    assert rles and all(r["size"] == [frames[0]["height"], frames[0]["width"]] for r in rles)


# -- bad input ------------------------------------------------------------------------------------

def test_a_missing_model_file_is_one_line_naming_it(tmp_path):
    path = pipeline(tmp_path, "{model: nowhere/mobile_sam.pt}")
    done = run_cli("run", str(path))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "segment.model" in lines[0] and "mobile_sam.pt" in lines[0], done.stderr


def test_an_onnx_encoder_without_its_decoder_names_the_key(tmp_path, tiny):
    encoder, _ = tiny
    done = run_cli("run", str(pipeline(tmp_path, f"{{model: {encoder}}}")))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "segment.decoder" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_checkpoint_ultralytics_cannot_tell_is_one_clear_line(tmp_path):
    bad = tmp_path / "weights.pt"
    bad.write_bytes(b"not a checkpoint")
    done = run_cli("run", str(pipeline(tmp_path, f"{{model: {bad}}}")))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "segment.model" in done.stderr and "mobile_sam.pt" in done.stderr, done.stderr


def test_zones_may_use_the_masks_area_instead_of_the_anchor_point():
    """`analytics.zone_anchor: mask`: an object whose box's bottom centre is outside a zone but
    most of whose mask is inside is in it; without a mask the anchor point decides."""
    from streamlens.analytics.rules import ZoneRule
    from streamlens.analytics.stream import StreamAnalytics

    zone = ZoneRule("bay", np.array([[0, 0], [100, 0], [100, 60], [0, 60.]]), inertia=1)
    bits = np.zeros((10, 10), bool)
    bits[:6] = True  # the mask's top 60%: inside the zone
    mask = BoxMask(bits, (10, 10, 60, 110), (10, 10, 60, 110))
    for anchor, want in (("mask", [["bay"], []]), ("point", [[], []])):
        rules = StreamAnalytics(zones=[(zone, None)], zone_anchor=anchor)
        boxes = np.array([[10, 10, 60, 110], [10, 10, 60, 110.]])
        found = rules.update(0.0, boxes, np.array([1, 2]), ["person"] * 2, np.ones(2), None, [mask, None])
        assert found.zones == want, anchor
