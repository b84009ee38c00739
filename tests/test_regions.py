"""Detection where things move (`detector.regions: motion`): what the detector sees of a keyframe,
and that boxes found on a region land in frame pixels where the whole-frame detector puts them.

The planner's rules on plain pictures; the boxes with the real YOLOX-Nano on real video (skipped
without ../shared/data); the pipeline end to end on a real clip.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from streamlens.bench.accuracy import match_frame
from streamlens.detect.onnx import OnnxDetector
from streamlens.detect.preprocess import InputSpec, place_region
from streamlens.frame import Frame
from streamlens.graph.schedule.regions import RegionPlanner
from streamlens.track.matching import box_iou

from .conftest import DATA, need_video

YOLOX = DATA / "models" / "yolox_nano" / "yolox_nano.onnx"
NONE_HELD = np.empty((0, 4), np.float32)


def need_yolox() -> Path:
    if not YOLOX.is_file():
        pytest.skip(f"{YOLOX} not found: the real YOLOX-Nano model lives in ../shared/data outside the repository")
    return YOLOX


@pytest.fixture(scope="module")
def bucket_yolox() -> OnnxDetector:
    return OnnxDetector(need_yolox(), conf=0.3, resize="bucket", classes=["car", "truck", "bus"])


def still(value: int = 80, size=(360, 640)) -> np.ndarray:
    return np.full((*size, 3), value, np.uint8)


def frame_at(index: int, image: np.ndarray, fps: float = 30.0) -> Frame:
    return Frame("cam", index, index / fps, 0.0, image)


# -- the planner ---------------------------------------------------------------------------------

def test_the_first_keyframe_is_whole_then_only_what_changed_goes():
    planner = RegionPlanner(full_s=10.0)
    assert planner.plan(frame_at(0, still()), NONE_HELD) is None and planner.reason == "first"
    moved = still()
    moved[200:240, 500:560] = 220  # something came in, lower right
    region = planner.plan(frame_at(5, moved), NONE_HELD)
    assert planner.reason == "motion"
    x1, y1, x2, y2 = region
    assert x1 <= 500 and y1 <= 200 and x2 >= 560 and y2 >= 240  # holds the change
    assert (x2 - x1) * (y2 - y1) < 0.2 * 640 * 360  # and not much more


def test_a_tracked_object_that_stopped_moving_stays_in_the_region():
    planner = RegionPlanner(full_s=10.0)
    planner.plan(frame_at(0, still()), NONE_HELD)
    moved = still()
    moved[150:180, 250:300] = 220  # motion in the middle; a parked car the tracker holds to its right
    parked = np.array([[400.0, 250.0, 470.0, 300.0]], np.float32)
    x1, y1, x2, y2 = planner.plan(frame_at(5, moved), parked)
    assert x1 <= 250 and y1 <= 150 and x2 >= 470 and y2 >= 300
    # nothing moves any more: the held box alone is looked at again
    x1, y1, x2, y2 = planner.plan(frame_at(10, moved), parked)
    assert x1 > 300 and y1 > 200 and x2 >= 470 and y2 >= 300 and planner.reason == "motion"


def test_nothing_changed_and_nothing_held_sends_nothing_until_the_periodic_whole_frame():
    planner = RegionPlanner(full_s=1.0)
    reasons = []
    for index in range(0, 45, 5):  # 30 fps, a keyframe every 5th frame
        region = planner.plan(frame_at(index, still()), NONE_HELD)
        reasons.append(planner.reason)
        assert (region is None) == (planner.reason in ("first", "full"))
        if planner.reason == "empty":
            assert region[2] <= region[0]  # of no area: the detector is not run
    assert reasons == ["first", "empty", "empty", "empty", "empty", "empty", "full", "empty", "empty"]


def test_a_wide_change_a_loop_and_a_new_size_send_the_whole_frame():
    planner = RegionPlanner(full_s=10.0)
    planner.plan(frame_at(0, still(80)), NONE_HELD)
    assert planner.plan(frame_at(5, still(200)), NONE_HELD) is None and planner.reason == "wide"  # a cut
    assert planner.plan(frame_at(2, still(200)), NONE_HELD) is None and planner.reason == "time"  # pts went back
    assert planner.plan(frame_at(7, still(200, (720, 1280))), NONE_HELD) is None and planner.reason == "size"


# -- the region in the model's input -------------------------------------------------------------

@pytest.mark.parametrize("size", [(1280, 720), (320, 240), (1920, 1080)])
def test_a_bucket_region_is_a_window_of_the_whole_frames_input(size):
    """The same pixels, on the same stride grid: a box maps back to the same frame pixels."""
    spec = InputSpec((416, 416), channels="bgr", mean=(0, 0, 0), std=(1, 1, 1), pad="corner", resize="bucket")
    rng = np.random.default_rng(1)
    image = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    whole = spec.geometry(size)
    region = (size[0] // 3, size[1] // 4, size[0] * 2 // 3, size[1] * 3 // 4)
    canvas, g = place_region(image, spec, region)
    x1, y1, x2, y2 = spec.region_window(whole, region)
    assert canvas.shape[:2] == (y2 - y1, x2 - x1) and x1 % 32 == 0 and y1 % 32 == 0
    assert canvas.shape[0] < whole.input_size[1] or canvas.shape[1] < whole.input_size[0]  # a smaller input
    from streamlens.detect.preprocess import place
    assert np.array_equal(canvas, place(image, whole)[y1:y2, x1:x2])  # the very pixels
    boxes = np.array([[x1 + 10.0, y1 + 5.0, x1 + 50.0, y1 + 40.0]])  # input pixels of the whole frame
    local = boxes - np.array([x1, y1, x1, y1])
    assert np.allclose(g.to_source(local), whole.to_source(boxes), atol=1e-3)
    inside = np.array([region], np.float32)  # the region holds itself after the round trip
    assert np.allclose(g.to_source(g.to_input(inside)), inside, atol=1e-3)


def highway_frames(every: int, limit: int):
    path = need_video("highway_720p30.mp4")
    with av.open(str(path)) as container:
        for index, picture in enumerate(container.decode(video=0)):
            if index >= limit:
                return
            if index % every == 0:
                yield Frame("highway", index, None, 0.0, picture.to_ndarray(format="bgr24"))


def test_boxes_from_a_region_land_where_the_whole_frame_detector_puts_them(bucket_yolox):
    """Real YOLOX-Nano on real highway frames: every car the whole-frame detector finds well inside
    a region (one stride of the input from its edges) comes back from the region alone, the same
    class, at IoU >= 0.9 (the same pixels on the same grid), in frame pixels; and the region's input
    is smaller."""
    region = (256, 96, 1024, 720)  # the road's middle and foreground
    inner = (region[0] + 100, region[1] + 100, region[2] - 100, region[3])
    checked = 0
    for frame in highway_frames(every=30, limit=900):
        frame.region = None
        whole = bucket_yolox.detect([frame])[0]
        frame.region = region
        prepared = bucket_yolox.prepare_input(frame)
        width, height = prepared.input_size
        assert width <= 416 and height <= 256 and width * height < 416 * 256
        part = bucket_yolox.detect([frame])[0]
        # within the window that holds the region (its edges on the stride), in frame pixels
        wx1, wy1, wx2, wy2 = prepared.geometry.to_source(np.array([[0, 0, *prepared.input_size]], np.float32))[0]
        assert wx1 <= region[0] and wx2 >= region[2] and wx2 - wx1 < 1280 * 0.7
        centres = (part.xyxy[:, :2] + part.xyxy[:, 2:]) / 2  # what it found lies in the window
        assert ((centres[:, 0] >= wx1) & (centres[:, 0] <= wx2) & (centres[:, 1] >= wy1)).all()
        keep = ((whole.xyxy[:, 0] >= inner[0]) & (whole.xyxy[:, 1] >= inner[1]) & (whole.xyxy[:, 2] <= inner[2])
                & (whole.xyxy[:, 3] <= inner[3]))
        for box, cls in zip(whole.xyxy[keep], whole.class_id[keep]):
            same = part.class_id == cls
            best = box_iou(box[None], part.xyxy[same]).max() if same.any() else 0.0
            assert best >= 0.9, (frame.index, box.tolist(), part.xyxy.tolist())
            checked += 1
    assert checked >= 20  # the test looked at enough cars to mean something


def test_a_still_object_nobody_holds_is_found_on_the_periodic_whole_frame(bucket_yolox, tmp_path):
    """A real highway picture, still for 1.5 s (encoded and decoded through PyAV): with nothing held
    (a tracker that lost the parked cars), the keyframes in between look at nothing, and the whole
    frame after `full_s` finds every car the first one found, at the same place."""
    first = next(highway_frames(every=1, limit=1)).image
    clip = tmp_path / "still.mp4"
    with av.open(str(clip), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 1280, 720, "yuv420p"
        for _ in range(45):
            for packet in stream.encode(av.VideoFrame.from_ndarray(first, format="bgr24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    planner, found = RegionPlanner(full_s=1.0), {}
    with av.open(str(clip)) as container:
        for index, picture in enumerate(container.decode(video=0)):
            if index % 5:
                continue
            frame = Frame("still", index, index / 30, 0.0, picture.to_ndarray(format="bgr24"))
            frame.region = planner.plan(frame, NONE_HELD)
            found[index] = (planner.reason, bucket_yolox.detect([frame])[0])
    assert [found[i][0] for i in (0, 30)] == ["first", "full"]
    assert all(len(found[i][1]) == 0 and found[i][0] == "empty" for i in (5, 10, 15, 20, 25))
    cars, again = found[0][1], found[30][1]
    assert len(cars) >= 3
    pairs = match_frame(again.xyxy, again.class_id, cars.xyxy, cars.class_id)
    assert len(pairs) == len(cars)


def test_a_pipeline_with_regions_publishes_boxes_in_frame_pixels_that_agree_with_whole_frames(tmp_path):
    """File mode on the real indoor clip (its first 150 frames, re-encoded): some keyframes go as
    regions, and the boxes published on them agree with the same detector on those whole frames."""
    import streamlens

    need_yolox()
    source = need_video("person_indoor_768x432.mp4")
    clip = tmp_path / "indoor.mp4"
    with av.open(str(source)) as src, av.open(str(clip), "w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 768, 432, "yuv420p"
        for index, picture in enumerate(src.decode(video=0)):
            if index >= 150:
                break
            for packet in stream.encode(av.VideoFrame.from_ndarray(picture.to_ndarray(format="bgr24"),
                                                                   format="bgr24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    names = DATA / "models" / "yolox_nano" / "coco_classes.txt"
    (tmp_path / "p.yaml").write_text(f"""
sources: [{{name: indoor, uri: {clip}}}]
detector: {{backend: onnx, model: {YOLOX}, names: {names}, conf: 0.3, resize: bucket, classes: [person],
           regions: motion, region_full_s: 2}}
keyframes: {{interval: 3}}
tracker: {{motion: mv}}
sinks: []
""")
    keyframes = {}
    for result in streamlens.Pipeline.from_yaml(tmp_path / "p.yaml").results():
        if isinstance(result, streamlens.FrameResult) and result.keyframe:
            keyframes[result.frame.index] = (result.frame.region, result.detections)
    regions = {i: k for i, k in keyframes.items() if k[0] is not None and k[0][2] > k[0][0]}
    assert len(regions) >= 10 and keyframes[0][0] is None
    whole = OnnxDetector(YOLOX, conf=0.3, resize="bucket", classes=["person"], names=names)
    tp = shown = wanted = 0
    with av.open(str(clip)) as container:
        for index, picture in enumerate(container.decode(video=0)):
            if index in regions:
                reference = whole.detect([Frame("x", index, None, 0.0, picture.to_ndarray(format="bgr24"))])[0]
                published = regions[index][1]
                tp += len(match_frame(published.xyxy, published.class_id, reference.xyxy, reference.class_id))
                shown, wanted = shown + len(published), wanted + len(reference)
    assert wanted >= 10 and 2 * tp / (shown + wanted) >= 0.9
