"""Secondary models on tracked objects (`secondary:`): when a track gets a look, the vote over its
looks, answers that never hold a frame back, the pixel-hash cache, and the results in the messages."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import supervision as sv

import streamlens
from streamlens.config.model import SecondaryConfig
from streamlens.frame import Frame, FrameResult
from streamlens.analytics.snapshots import crop
from streamlens.secondary.cache import MemoryCache, crop_key
from streamlens.secondary.stage import SecondaryStage, _Head, _Look

from .colour_model import build_colour_model
from .conftest import REPO

WAIT_S = 30.0


@pytest.fixture(scope="module")
def colour_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "colour.onnx"
    build_colour_model(path)
    return path


def entry(model, **keys) -> SecondaryConfig:
    return SecondaryConfig(**{"name": "colour", "kind": "classify", "model": model, **keys})


class _Model:  # what a head reads of its model
    outputs, names = ["colour"], {0: "red", 1: "green", 2: "blue"}

    def output_index(self, output, where=None):
        return 0


def head_with(**keys) -> _Head:
    base = dict(name="colour", kind="classify", output=None, labels=None, classes=None, min_size=24, imgsz=None,
                padding=0.1, regrow=0.2, every_s=None, max_attempts=3, max_batch=8, max_wait_ms=20.0, threads=None,
                cache=True)
    return _Head(SecondaryConfig.model_construct(**{**base, **keys}), 0, _Model())


# -- when a track gets a look ---------------------------------------------------------------------

def test_a_track_is_looked_at_on_its_first_good_view_then_when_it_grows_or_after_every_s():
    h, look = head_with(every_s=5.0), _Look()
    assert not h.wants(look, "car", [10, 10, 30, 30], 640, 360, 0.0)  # 20 px: smaller than min_size
    assert not h.wants(look, "car", [0, 10, 60, 60], 640, 360, 0.0)  # cut by the frame's left edge
    assert h.wants(look, "car", [10, 10, 60, 60], 640, 360, 0.0)  # its first good view
    look.attempts, look.area, look.at = 1, 50 * 50, 0.0
    assert not h.wants(look, "car", [10, 10, 60, 60], 640, 360, 1.0)  # its answer is still on its way
    look.answered = 1
    assert not h.wants(look, "car", [10, 10, 64, 64], 640, 360, 1.0)  # grown 17%: not enough
    assert h.wants(look, "car", [10, 10, 65, 65], 640, 360, 1.0)  # grown 21%
    assert h.wants(look, "car", [10, 10, 60, 60], 640, 360, 5.0)  # every_s later
    look.attempts = look.answered = 3
    assert not h.wants(look, "car", [10, 10, 200, 200], 640, 360, 60.0)  # max_attempts reached


def test_classes_choose_the_objects_an_entry_looks_at():
    h = head_with(classes=["car", "truck"])
    assert h.wants(_Look(), "truck", [10, 10, 60, 60], 640, 360, 0.0)
    assert not h.wants(_Look(), "person", [10, 10, 60, 60], 640, 360, 0.0)


def test_the_answer_is_the_score_weighted_vote_over_the_looks():
    h, look = head_with(), _Look()
    h.learn(look, np.array([0.6, 0.1, 0.3]))
    assert look.answer == {"label": "red", "score": 0.6}
    h.learn(look, np.array([0.05, 0.05, 0.9]))  # blue, 0.9 against red's 0.6
    assert look.answer == {"label": "blue", "score": 0.9}
    h.learn(look, np.array([0.7, 0.2, 0.1]))  # red again: 1.3 against 0.9
    assert look.answer == {"label": "red", "score": 0.65}
    logits = head_with()
    other = _Look()
    logits.learn(other, np.array([2.0, -1.0, 0.5]))  # not probabilities: softmax first
    assert other.answer["label"] == "red" and 0 < other.answer["score"] < 1


# -- the stage on crafted frames ------------------------------------------------------------------

def scene(index: int, boxes: list, colours: list, size=(240, 320)) -> tuple[Frame, sv.Detections]:
    image = np.full((*size, 3), 90, np.uint8)
    for (x1, y1, x2, y2), bgr in zip(boxes, colours):
        image[y1:y2, x1:x2] = bgr
    det = sv.Detections(xyxy=np.array(boxes, np.float32), confidence=np.full(len(boxes), 0.9, np.float32),
                        class_id=np.zeros(len(boxes), int), tracker_id=np.arange(1, len(boxes) + 1))
    det.data["class_name"] = np.array(["car"] * len(boxes))
    return Frame("cam1", index, index / 30, 0.0, image), det


def offer(stage: SecondaryStage, frame: Frame, det: sv.Detections, found: sv.Detections | None = None) -> None:
    """Offer `frame` as a keyframe whose detector boxes were `found` (default: the tracked boxes)."""
    stage.offer(frame, det if found is None else found, det)


def answered(stage: SecondaryStage, frames) -> FrameResult:
    """Publish frames until every tracked object of the last one has its attributes."""
    deadline = time.monotonic() + WAIT_S
    k = 0
    while True:
        frame, det = frames(k)
        result, _ = stage.process(FrameResult(frame, k, True, det), [])
        if result.attributes is not None and all(a for a in result.attributes):
            return result
        assert time.monotonic() < deadline, stage.stats()
        k += 1
        time.sleep(0.01)


def test_crops_are_classified_off_the_engines_thread_and_apply_to_their_tracks(colour_model):
    stage = SecondaryStage([entry(colour_model)], MemoryCache(100))
    stage.start()
    try:
        boxes, colours = [[20, 20, 80, 80], [150, 40, 230, 120]], [(0, 0, 230), (230, 0, 0)]  # red, blue (BGR)
        frame, det = scene(0, boxes, colours)
        stage.process(FrameResult(frame, 0, True, det), [])
        offer(stage, frame, det)  # a track's first keyframe: no look yet
        assert stage.stats()["colour"]["tracks"] == 0
        offer(stage, frame, det)
        result = answered(stage, lambda k: scene(k + 1, boxes, colours))
        assert [a["colour"]["label"] for a in result.attributes] == ["red", "blue"]
        assert stage.stats()["colour"]["calls"] == 2 and stage.stats()["colour"]["tracks"] == 2
    finally:
        stage.close()


def test_same_pixels_on_another_frame_hit_the_cache_and_one_changed_pixel_misses(colour_model):
    stage = SecondaryStage([entry(colour_model, max_attempts=10, every_s=0.001)], MemoryCache(100))
    stage.start()
    try:
        boxes, colours = [[20, 20, 80, 80]], [(0, 200, 0)]
        for k in range(4):  # the same crop three times (computed once), then with one pixel changed
            frame, det = scene(k, boxes, colours)
            if k == 3:
                frame.image[50, 50, 0] += 1  # inside the crop
            stage.process(FrameResult(frame, k, True, det), [])
            if k == 0:
                offer(stage, frame, det)  # its first keyframe
            offer(stage, frame, det)
            deadline = time.monotonic() + WAIT_S
            while stage.stats()["colour"]["calls"] < k + 1:  # its answer is back
                assert time.monotonic() < deadline, stage.stats()
                stage.process(FrameResult(frame, k, True, det), [])
                time.sleep(0.01)
        stats = stage.stats()["colour"]
        assert (stats["computed"], stats["cached"]) == (2, 2)
    finally:
        stage.close()


def test_the_crop_is_the_detectors_box_not_the_tracked_one(colour_model):
    """The tracked box (moved by the tracker's filter) half covers the red square; the detector's
    box is the square: the crop is cut there, and the answer is red. A tracked object the detector
    did not see on that keyframe is not looked at."""
    stage = SecondaryStage([entry(colour_model)], MemoryCache(100))
    stage.start()
    try:
        frame, found = scene(0, [[20, 20, 80, 80]], [(0, 0, 230)])
        tracked = sv.Detections(xyxy=np.array([[34, 20, 94, 80], [200, 150, 260, 210]], np.float32),
                                confidence=np.full(2, 0.9, np.float32), class_id=np.zeros(2, int),
                                tracker_id=np.array([1, 2]))
        tracked.data["class_name"] = np.array(["car", "car"])
        stage.process(FrameResult(frame, 0, True, tracked), [])
        offer(stage, frame, tracked, found)
        offer(stage, frame, tracked, found)
        deadline = time.monotonic() + WAIT_S
        result = FrameResult(frame, 1, True, tracked)
        while not (result.attributes and result.attributes[0]):
            assert time.monotonic() < deadline, stage.stats()
            time.sleep(0.01)
            result, _ = stage.process(FrameResult(frame, 1, True, tracked), [])
        assert result.attributes[0]["colour"]["label"] == "red" and result.attributes[1] is None

        def cached(box) -> bool:
            key = crop_key(stage.groups[0].model.id, np.ascontiguousarray(crop(frame.image, box, 0.1)))
            return stage.cache.get_many([key]) != [None]

        assert cached([20, 20, 80, 80]) and not cached([34, 20, 94, 80])  # the detector's box was cut
    finally:
        stage.close()
    assert stage.stats()["colour"]["tracks"] == 1  # track 2: nothing the detector saw


def test_two_heads_of_one_model_share_one_run_per_crop(colour_model):
    stage = SecondaryStage([entry(colour_model), entry(colour_model, name="light", output="brightness", labels=["bright", "dark"])], MemoryCache(100))
    stage.start()
    try:
        boxes, colours = [[20, 20, 80, 80]], [(250, 250, 250)]
        frame, det = scene(0, boxes, colours)
        stage.process(FrameResult(frame, 0, True, det), [])
        offer(stage, frame, det)
        offer(stage, frame, det)
        result = answered(stage, lambda k: scene(k + 1, boxes, colours))
        deadline = time.monotonic() + WAIT_S
        while len(result.attributes[0]) < 2:
            assert time.monotonic() < deadline
            result = answered(stage, lambda k: scene(k + 1, boxes, colours))
        assert result.attributes[0]["light"]["label"] == "bright"
        assert len(stage.groups) == 1 and stage.groups[0].computed == 1
    finally:
        stage.close()


# -- in a pipeline ------------------------------------------------------------------------------

def pipeline(tmp_path, secondary: str, more: str = "", loops: str = "") -> object:
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}{loops}}}]
detector: {{backend: motion}}
keyframes: {{interval: 3}}
secondary: {secondary}
analytics: {{end_after_s: 1.0}}
sinks: [{{type: jsonl, path: out.jsonl}}]
{more}
""")
    return path


def read(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]


def test_a_pipeline_writes_attributes_on_every_frame_of_a_track_once_known(tmp_path, colour_model):
    """The sample through the motion detector: the colour entry looks at each track at most
    max_attempts times; once a track's answer is known, each of its frames carries it, and an
    object_update event says it changed; frames before the answer went out without waiting."""
    path = pipeline(tmp_path, f"[{{name: colour, kind: classify, model: {colour_model}, min_size: 8}}]")
    with streamlens.Pipeline.from_yaml(path) as pipe:
        report = pipe.run()
        stats = pipe.secondary_stats()
    assert report.exit_code == 0, report.error
    lines = read(tmp_path)
    frames = [m for m in lines if m["type"] == "frame"]
    assert len(frames) == 300
    first_known: dict[int, int] = {}
    for m in frames:
        for obj in m["objects"]:
            if "attributes" in obj:
                assert set(obj["attributes"]["colour"]) == {"label", "score"}
                assert obj["attributes"]["colour"]["label"] in ("red", "green", "blue")
                first_known.setdefault(obj["id"], m["frame"])
            elif obj["id"] in first_known:
                pytest.fail(f"track {obj['id']} lost its attributes on frame {m['frame']}")
    assert first_known
    first_seen = {}
    for m in frames:
        for obj in m["objects"]:
            first_seen.setdefault(obj["id"], m["frame"])
    assert all(first_known[t] > first_seen[t] for t in first_known)  # answers come later: no frame waited
    assert stats["colour"]["attempts_per_track"] <= 3
    from streamlens.progress import summary

    assert f"secondary colour: {stats['colour']['calls']} looks on {stats['colour']['tracks']} tracks" in summary(report)
    updates = [m for m in lines if m["type"] == "event" and m["event"] == "object_update"]
    assert any("attributes" in m["object"] for m in updates)


def test_a_looping_clip_is_answered_from_the_cache(tmp_path, colour_model):
    """The second lap of a looping file shows the same pixels: its crops are found in the cache."""
    path = pipeline(tmp_path, f"[{{name: colour, kind: classify, model: {colour_model}, min_size: 8, "
                              "every_s: 0.5, max_attempts: 100}]", loops=", loop: true")
    with streamlens.Pipeline.from_yaml(path) as pipe:
        published = 0
        for item in pipe.results():
            published += isinstance(item, FrameResult)
            if published == 600:  # two laps of the 300-frame sample
                break
        stats = pipe.secondary_stats()["colour"]
    assert stats["cached"] > 0 and stats["computed"] > 0


def test_embeddings_are_kept_with_the_track_and_published_on_their_own(tmp_path, colour_model):
    path = pipeline(tmp_path, f"[{{name: look, kind: embed, model: {colour_model}, min_size: 8}}]")
    with streamlens.Pipeline.from_yaml(path) as pipe:
        assert pipe.run().exit_code == 0
    lines = read(tmp_path)
    found = [m for m in lines if m["type"] == "embedding"]
    assert found and [m["seq"] for m in found] == list(range(len(found)))
    for m in found:
        assert m["name"] == "look" and abs(np.linalg.norm(m["vector"]) - 1) < 1e-3 and m["attempts"] >= 1
    assert not any("attributes" in o for m in lines if m["type"] == "frame" for o in m["objects"])


def test_redis_is_shared_between_two_pipeline_processes(tmp_path, colour_model):
    """Two pipeline processes read the same file with a Redis cache: the second finds in Redis what
    the first computed."""
    from .redis_server import RedisServer, redis_missing

    if redis_missing():
        pytest.skip(redis_missing())
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        path = pipeline(tmp_path, f"[{{name: colour, kind: classify, model: {colour_model}, min_size: 8}}]",
                        more=f"runtime: {{cache: {{items: 0, redis: 'redis://127.0.0.1:{server.port}/0'}}}}")
        script = textwrap.dedent(f"""
            import json, streamlens
            with streamlens.Pipeline.from_yaml({str(path)!r}) as pipe:
                assert pipe.run().exit_code == 0
                stats = pipe.secondary_stats()
                print(json.dumps({{**stats["colour"], "redis_errors": stats["cache"]["errors"]}}))
            """)

        def one_run() -> dict:
            done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                                  timeout=300)
            return json.loads(done.stdout.splitlines()[-1])

        first = one_run()
        second, errors = one_run(), first["redis_errors"]
        # a round trip slower than the cache's 50 ms socket timeout (a loaded machine) is a miss or a
        # dropped put, counted as an error: only then is another process run, up to twice
        for _ in range(2):
            errors += second["redis_errors"]
            if second["cached"] or not errors:
                break
            second = one_run()
    finally:
        server.stop()
    assert first["computed"] > 0 and first["cached"] == 0
    assert second["cached"] > 0 and second["computed"] < first["computed"]


def test_foreign_values_in_a_shared_redis_are_counted_and_computed_again(tmp_path, colour_model):
    """Another program (or a hostile one) wrote under the stage's keys in a shared Redis: values that
    are not this model's outputs for one crop are counted as foreign and computed again, never raised,
    and the answer is the model's own."""
    import redis

    from streamlens.secondary.cache import KEY_PREFIX, MAX_VALUE_BYTES, RedisCache, pack
    from .redis_server import RedisServer, redis_missing

    if redis_missing():
        pytest.skip(redis_missing())
    boxes, colours = [[20, 20, 80, 80]], [(0, 0, 230)]  # red

    def classify() -> tuple[str, dict]:
        stage = SecondaryStage([entry(colour_model)], RedisCache(server.url, timeout_s=2.0))
        stage.start()
        try:
            frame, det = scene(0, boxes, colours)
            offer(stage, frame, det)  # the track's first keyframe
            offer(stage, frame, det)
            result = answered(stage, lambda k: scene(k + 1, boxes, colours))
            return result.attributes[0]["colour"]["label"], stage.stats()["colour"]
        finally:
            stage.close()

    header = b"SLSC" + bytes([1]) + (1).to_bytes(2, "little")
    forged = {
        "absurd sides": header + bytes([0, 3]) + b"".join(n.to_bytes(4, "little") for n in (0, 2**32 - 1, 2**32 - 1)),
        "an empty array": pack([np.zeros((0,), np.float32)]),
        "another shape": pack([np.zeros((7,), np.float32)]),
        "another dtype": pack([np.zeros((3,), np.int64)]),
        "not a number": pack([np.array([np.nan, 0.0, 1.0], np.float32)]),
        "too large": pack([np.zeros((MAX_VALUE_BYTES // 4 + 1,), np.float32)]),
        "random bytes": bytes(range(24)),
    }
    with RedisServer(tmp_path / "redis") as server:
        assert classify()[0] == "red"  # computes, and stores its outputs under the crop's key
        client = redis.Redis.from_url(server.url)
        (key,) = client.keys(KEY_PREFIX + "*")
        for what, value in forged.items():
            client.set(key, value)
            label, stats = classify()
            assert label == "red", what
            assert (stats["computed"], stats["cached"]) == (1, 0), what
        client.close()
        assert classify()[1]["cached"] == 1  # what the last run put back is read again


def test_secondary_keys_are_checked(tmp_path, colour_model):
    from streamlens.errors import ConfigError

    path = pipeline(tmp_path, f"[{{name: colour, kind: recolour, model: {colour_model}}}]")
    with pytest.raises(ConfigError, match=r"secondary\[0\]\.kind"):
        streamlens.Pipeline.from_yaml(path)
    path = pipeline(tmp_path, "[{name: colour, kind: classify, model: nope.onnx}]")
    with pytest.raises(ConfigError, match=r"secondary\[0\]\.model: file not found"):
        streamlens.Pipeline.from_yaml(path)


def build_slow_model(path, steps: int = 12, side: int = 1536):
    """A classifier of the colour model's answers that first spends seconds on matrix products
    (`steps` products of `side` x `side`, whatever the batch): a secondary model far slower than the
    frames."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = (rng.standard_normal((side, side)) / np.sqrt(side)).astype(np.float32)
    inits = [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(np.eye(3, dtype=np.float32) * 25, "cw"),
             numpy_helper.from_array(np.zeros((1,), np.float32), "zero")]
    nodes = [helper.make_node("ReduceMean", ["images"], ["level"], keepdims=0),  # the products depend on
             helper.make_node("Add", ["w", "level"], ["start"])]  # the input: nothing to fold at load
    last = "start"
    for i in range(steps):
        nodes.append(helper.make_node("MatMul", [last, "w"], [f"p{i}"]))
        last = f"p{i}"
    nodes += [helper.make_node("ReduceMean", [last], ["busy"], keepdims=0),
              helper.make_node("Mul", ["busy", "zero"], ["nothing"]),
              helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
              helper.make_node("Flatten", ["pooled"], ["means"], axis=1),
              helper.make_node("MatMul", ["means", "cw"], ["logits"]),
              helper.make_node("Add", ["logits", "nothing"], ["shifted"]),
              helper.make_node("Softmax", ["shifted"], ["colour"], axis=1)]
    graph = helper.make_graph(nodes, "slow", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                            ["batch", 3, 32, 32])],
                              [helper.make_tensor_value_info("colour", TensorProto.FLOAT, ["batch", 3])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_slow_secondary_model_holds_no_camera_frame_back(tmp_path):
    """A model that takes seconds per batch, on the sample played as a camera: every frame is
    published, in order, none held for the model (`waited_s` 0), and the run ends without waiting
    for looks still on their way. (What it costs live is measured by tools/bench_secondary.py, not
    timed here.) A camera a second behind its clock skips to catch up, and so does a file played as
    one: on a machine loaded by other work (CI once lost the sample's last three frames so), that is
    the source's doing, not the model's, and counted; so every frame is published or counted lost,
    and a frame the model held would show in `waited_s` or out of order."""
    model = build_slow_model(tmp_path / "slow.onnx")
    path = pipeline(tmp_path, f"[{{name: colour, kind: classify, model: {model}, min_size: 8}}]", loops=", live: true")
    with streamlens.Pipeline.from_yaml(path) as pipe:
        report = pipe.run()
        stats = pipe.secondary_stats()["colour"]
    assert report.exit_code == 0, report.error
    seqs = [m["seq"] for m in read(tmp_path) if m["type"] == "frame"]
    lost = sum(n for cause, n in report.streams[0].lost.items() if cause != "corrupt")
    assert seqs == sorted(set(seqs)) and seqs[0] == 0 and len(seqs) + lost == 300, (len(seqs), report.streams[0].lost)
    assert stats["waited_s"] == 0 and stats["tracks"] > 0


def test_a_file_waits_for_room_in_a_full_queue_and_loses_no_crop(tmp_path, colour_model, monkeypatch):
    """The worker's queue cut to one crop: a file's keyframe offers several, so each waits for room
    instead of being dropped, and every one is answered."""
    import streamlens.secondary.stage as stage_module

    monkeypatch.setattr(stage_module, "QUEUE_SIZE", 1)
    path = pipeline(tmp_path, f"[{{name: look, kind: embed, model: {colour_model}, min_size: 8, every_s: 0.2, "
                              "max_attempts: 20}]")
    with streamlens.Pipeline.from_yaml(path) as pipe:
        assert pipe.run().exit_code == 0
        stats = pipe.secondary_stats()["look"]
    assert stats["computed"] + stats["cached"] > 30
    assert stats["dropped"] == 0 and stats["calls"] == stats["computed"] + stats["cached"]


def test_a_file_gets_every_answer_on_its_keyframe_the_same_on_every_run(tmp_path, colour_model):
    """A file read as a file waits for its answers as for its detections: each embedding is published
    with the keyframe whose crop it answers (never a later frame), nothing is dropped, and two runs
    give the same embeddings on the same frames."""
    runs = []
    for name in ("first", "second"):
        folder = tmp_path / name
        folder.mkdir()
        path = pipeline(folder, f"[{{name: look, kind: embed, model: {colour_model}, min_size: 8, every_s: 0.5, "
                                "max_attempts: 20, max_wait_ms: 50}]")
        with streamlens.Pipeline.from_yaml(path) as pipe:
            assert pipe.run().exit_code == 0
            stats = pipe.secondary_stats()["look"]
        lines = read(folder)
        keyframes = {m["frame"] for m in lines if m["type"] == "frame" and m["keyframe"]}
        found = [(m["frame"], m["object"]["id"], m["attempts"], np.round(m["vector"], 5).tolist())
                 for m in lines if m["type"] == "embedding"]
        assert len(found) > 20 and {frame for frame, *_ in found} <= keyframes
        assert stats["dropped"] == 0 and stats["calls"] == stats["computed"] + stats["cached"]
        runs.append(found)
    assert runs[0] == runs[1]


def test_an_ultralytics_classification_model_runs_as_a_secondary_model(tmp_path):
    """A `.pt` classifier (Ultralytics' yolov8n-cls built from its yaml, random weights, no
    download): one row of class probabilities per crop, whatever the crops' sizes."""
    pytest.importorskip("ultralytics", reason="the ultralytics extra is not installed")
    from streamlens.detect.ultralytics_offline import import_ultralytics_offline
    from streamlens.secondary.model import CropModel

    import_ultralytics_offline().YOLO("yolov8n-cls.yaml").save(tmp_path / "cls.pt")
    model = CropModel(tmp_path / "cls.pt", imgsz=64)
    out = model.run([np.zeros((40, 30, 3), np.uint8), np.full((50, 80, 3), 200, np.uint8)])
    assert len(out) == 1 and out[0].shape == (2, 1000)
    assert np.allclose(out[0].sum(1), 1.0, atol=1e-3) and model.output_index(None) == 0


def test_an_output_the_model_lacks_is_one_line_naming_the_entry(colour_model):
    from streamlens.errors import DetectorError

    with pytest.raises(DetectorError, match=r"^secondary\[0\]\.output: colour\.onnx has no output 'hue'"):
        SecondaryStage([entry(colour_model, output="hue")])


def test_with_two_engines_the_page_and_metrics_show_both_engines_secondary_figures_as_one(tmp_path, colour_model):
    """`streamlens run` over two engines (the default on two cores or more; here asked for): the
    secondary models run in the engines, and /api/stats and /metrics show their figures summed, as
    one run's (streamlens/scale/figures.py)."""
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    from .test_web_page import wait_for
    from .test_workers import free_port

    port = free_port()
    sample = REPO / "samples" / "traffic.mp4"
    path = pipeline(tmp_path, f"[{{name: colour, kind: classify, model: {colour_model}, min_size: 8}}]",
                    more=f"runtime: {{workers: 2, http: {{port: {port}}}}}")
    path.write_text(path.read_text().replace(
        f"sources: [{{uri: {sample}}}]",
        f"sources: [{{uri: {sample}, live: true, loop: true}}, {{uri: {sample}, live: true, loop: true, name: two}}]"))
    run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)], cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def figures():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/stats", timeout=30) as r:
                colour = json.loads(r.read())["secondary"].get("colour")
        except (urllib.error.URLError, OSError):  # not listening yet
            return None if run.poll() is None else {"ended": run.stderr.read()}
        return colour if colour and colour["computed"] >= 20 else None

    try:
        colour = wait_for(figures, 120, "the colour model's figures from both engines")
        assert "ended" not in colour, colour
        assert colour["calls"] > 0 and colour["tracks"] > 0 and colour["ms_per_crop"] > 0
        assert colour["hit_rate"] == round(colour["cached"] / (colour["cached"] + colour["computed"]), 4)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            metrics = r.read().decode()
        assert 'streamlens_secondary_computed_total{model="colour"}' in metrics
    finally:
        run.terminate()
        run.wait(60)
