"""Motion between keyframes on a real encoded clip: `flow` and `mv` move a box with a moving object.

The test encodes a small H.264 clip with PyAV (libx264): a textured square drifts right and down
over a still textured background. The tracker sees one detection, on the first frame, and nothing
after; flow and mv must carry the box with the square, while the Kalman prediction alone (which has
no velocity from a single detection) stays behind. The mv model reads the decoder's own motion
vectors (`FileSource(export_mvs=True)`), with and without B-frames.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
import supervision as sv

from streamlens.sources.file import FileSource
from streamlens.track import KeyframeTracker
from streamlens.track.matching import box_iou
from streamlens.track.motion import MotionVectors, SparseFlow

WIDTH, HEIGHT, FRAMES, SIZE = 320, 240, 30, 56
STEP = (3.0, 1.0)  # pixels per frame


def square_at(index: int) -> list[float]:
    x, y = 40 + STEP[0] * index, 60 + STEP[1] * index
    return [x, y, x + SIZE, y + SIZE]


def encode_clip(path: Path, b_frames: int, codec: str = "libx264") -> Path:
    rng = np.random.default_rng(7)
    background = _smooth(rng.random((HEIGHT, WIDTH)) * 255, 3)
    pattern = _smooth(rng.random((SIZE, SIZE)) * 255, 2)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=30)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"bf": str(b_frames), "g": "60", **({"preset": "veryfast", "crf": "20"}
                                                            if codec == "libx264" else {"qscale": "4"})}
        for index in range(FRAMES):
            image = background.copy()
            x1, y1 = (int(v) for v in square_at(index)[:2])
            image[y1:y1 + SIZE, x1:x1 + SIZE] = pattern
            grey = np.clip(image, 0, 255).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(np.dstack([grey] * 3), format="bgr24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _smooth(noise: np.ndarray, passes: int) -> np.ndarray:
    """A texture Lucas-Kanade and the encoder can both follow: noise blurred a little."""
    for _ in range(passes):
        neighbours = np.roll(noise, 1, 0) + np.roll(noise, 1, 1) + np.roll(noise, -1, 0) + np.roll(noise, -1, 1)
        noise = (noise + neighbours) / 5
    return (noise - noise.mean()) * 3 + 128


def first_detection() -> sv.Detections:
    detections = sv.Detections(xyxy=np.array([square_at(0)], np.float32), confidence=np.array([0.9], np.float32),
                               class_id=np.array([0]))
    detections.data["class_name"] = np.array(["square"], dtype=object)
    return detections


def follow(path: Path, motion) -> tuple[list[np.ndarray], list]:
    """Boxes of the one track per frame, detection on frame 0 only; and the frames' motion vectors."""
    tracker = KeyframeTracker(motion, 30)
    boxes, vectors = [], []
    with FileSource("clip", path, export_mvs=True) as source:
        for frame in source.frames(threading.Event()):
            out = tracker.update(frame, first_detection()) if frame.index == 0 else tracker.propagate(frame)
            boxes.append(out.xyxy[0] if len(out) else None)
            vectors.append(frame.motion_vectors)
    return boxes, vectors


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[int, Path]:
    folder = tmp_path_factory.mktemp("clips")
    found = {b: encode_clip(folder / f"square_bf{b}.mp4", b) for b in (0, 2)}
    found["mpeg4"] = encode_clip(folder / "square_mpeg4_bf2.avi", 2, "mpeg4")  # MPEG-4 Part 2, B-frames
    return found


@pytest.mark.parametrize("motion, b_frames", [("flow", 0), ("mv", 0), ("mv", 2)])
def test_motion_carries_the_box_with_the_object(clips, motion, b_frames):
    model = SparseFlow() if motion == "flow" else MotionVectors()
    boxes, _ = follow(clips[b_frames], model)
    assert len(boxes) == FRAMES
    overlaps = [box_iou(np.array([square_at(i)]), box[None])[0, 0] for i, box in enumerate(boxes)]
    assert min(overlaps) > 0.7, [round(float(o), 2) for o in overlaps]
    moved = boxes[-1][:2] - boxes[0][:2]
    assert moved == pytest.approx(np.array(STEP) * (FRAMES - 1), abs=6)


def test_mpeg4_b_frames_whose_vectors_are_all_zero_come_without_vectors(clips):
    """FFmpeg's MPEG-4 Part 2 decoder exports a zero vector for every block of a B-frame, whatever
    moved: taken as measured, every box would stop on two frames in three. Such a frame comes
    without vectors (the tracker carries its boxes by their velocity); P-frames keep theirs."""
    from streamlens.sources.motion_vectors import frame_motion_vectors

    kinds = {2: [], 3: []}
    with av.open(str(clips["mpeg4"])) as container:
        stream = container.streams.video[0]
        stream.codec_context.options = {"flags2": "+export_mvs"}
        for frame in container.decode(stream):
            raw = frame.side_data.get("MOTION_VECTORS")
            exported = None if raw is None else raw.to_ndarray()
            kind = int(frame.pict_type)
            if kind in kinds:
                kinds[kind].append((exported, frame_motion_vectors(frame)))
    assert len(kinds[3]) >= FRAMES // 2 and len(kinds[2]) >= FRAMES // 4  # B-frames, and P-frames between
    assert all(exported is not None and not exported["motion_x"].any() and vectors is None
               for exported, vectors in kinds[3])
    assert all(vectors is not None for exported, vectors in kinds[2] if exported is not None)
    assert any(np.abs(vectors[:, 2:]).max() > 0 for _, vectors in kinds[2] if vectors is not None)


def test_kalman_alone_stays_behind(clips):
    """Without pixels the box has no velocity to go on: by the end it no longer covers the square."""
    boxes, _ = follow(clips[0], "kalman")
    assert box_iou(np.array([square_at(FRAMES - 1)]), boxes[-1][None])[0, 0] < 0.3


def test_the_source_exports_motion_vectors_only_when_asked(clips):
    _, vectors = follow(clips[2], "kalman")
    assert vectors[0] is None                       # the I-frame has none
    later = [v for v in vectors[1:] if v is not None]
    assert len(later) >= FRAMES - 3
    assert all(v.dtype == np.float32 and v.shape[1] == 4 for v in later)
    moving = np.concatenate(later)
    moving = moving[np.abs(moving[:, 2]) > 0.5]
    assert np.median(moving[:, 2]) == pytest.approx(STEP[0], abs=0.5)   # rightwards, B-frames turned around
    with FileSource("clip", clips[0]) as plain:
        assert all(f.motion_vectors is None for f in plain.frames(threading.Event()))


def test_a_file_gives_the_same_motion_vectors_on_every_run(clips):
    """FFmpeg's frame threads made the exported vectors of a clip with B-frames differ between runs
    (16 different results in 30, on a busy machine); a file with vectors is decoded by slices."""
    def vectors_of(path: Path) -> bytes:
        with FileSource("clip", path, export_mvs=True) as source:
            return b"".join(f.motion_vectors.tobytes() for f in source.frames(threading.Event())
                            if f.motion_vectors is not None)

    def busy(until: float) -> None:  # the race shows when the decoder's threads are kept waiting
        while time.monotonic() < until:
            pass

    until = time.monotonic() + 3.0
    burners = [threading.Thread(target=busy, args=(until,)) for _ in range(2)]
    for t in burners:
        t.start()
    runs = {vectors_of(clips[2]) for _ in range(8)}
    for t in burners:
        t.join()
    assert len(runs) == 1


def test_each_box_moves_by_the_median_of_exactly_the_vectors_inside_it():
    """The compiled search (vectors ordered by whole-pixel column, bisected) finds the same vectors
    as testing every vector against every box, also for starts off the frame and boxes over its edge."""
    from streamlens.track.kernels import box_motion, moving_outside
    from streamlens.track.motion.vectors import VectorField

    rng = np.random.default_rng(2)
    vectors = np.column_stack([rng.uniform(-20, 660, 3000), rng.uniform(-20, 380, 3000),
                               rng.normal(0, 4, (3000, 2))]).astype(np.float32)
    field = VectorField(1, vectors[:, :2], vectors[:, 2:])
    field.sort()
    boxes = rng.uniform([-30, -30, 0, 0], [600, 340, 0, 0], (40, 4))
    boxes[:, 2:] = boxes[:, :2] + rng.uniform(0.5, 120, (40, 2))
    shift, quality, _ = box_motion(field.start, field.motion, field.column, boxes, 1.0, 1, 1.0)
    for box, got, share in zip(boxes, shift, quality):
        inside = ((vectors[:, 0] >= box[0]) & (vectors[:, 0] < box[2])
                  & (vectors[:, 1] >= box[1]) & (vectors[:, 1] < box[3]))
        n = inside.sum()
        assert share == pytest.approx(min(1.0, n / max(1.0, (box[2] - box[0]) * (box[3] - box[1]))))
        if n:
            np.testing.assert_allclose(got, np.median(vectors[inside, 2:], axis=0), rtol=1e-6)
        else:
            assert np.isnan(got).all()
    # the share of the vectors outside every box (not grown) moving 2 px or more from a camera at (1, 0)
    outside = ~np.any([(vectors[:, 0] >= b[0]) & (vectors[:, 0] < b[2]) & (vectors[:, 1] >= b[1])
                       & (vectors[:, 1] < b[3]) for b in boxes], axis=0)
    moving = np.hypot(*(vectors[:, 2:] - [1.0, 0.0]).T) >= 2.0
    share = moving_outside(field.start, field.motion, 1, boxes, 0.0, np.array([1.0, 0.0]), 2.0)
    assert share == pytest.approx(moving[outside].mean(), abs=1e-6)


def test_a_frame_observed_keeps_each_block_where_it_started_ordered_as_the_search_needs():
    """The mv model's one-pass reading of a frame's vectors gives what slicing its rows and
    ordering them gives: each block's start (x - dx, y - dy) and motion, float32, by whole-pixel
    column, stably (blocks of one column keep the order they came in)."""
    from streamlens.frame import Frame
    from streamlens.track.kernels import order_vectors
    from streamlens.track.motion import MotionVectors

    rng = np.random.default_rng(5)
    vectors = np.column_stack([rng.uniform(-10, 1290, 3900), rng.uniform(-10, 730, 3900),
                               rng.normal(0, 6, (3900, 2))]).astype(np.float32)
    vectors[::7, 0] = np.floor(vectors[::7, 0])  # whole-pixel starts, and blocks sharing a column
    field = MotionVectors().observe(Frame("cam1", 3, None, 0.0, None, motion_vectors=vectors))
    start, motion, column = order_vectors(np.ascontiguousarray(vectors[:, :2] - vectors[:, 2:4]),
                                          np.ascontiguousarray(vectors[:, 2:4]))
    for got, expected in ((field.start, start), (field.motion, motion), (field.column, column)):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    assert (np.diff(field.column) >= 0).all() and field.index == 3
    empty = MotionVectors().observe(Frame("cam1", 4, None, 0.0, None))  # an I-frame: no vectors
    assert empty.start.shape == (0, 2) and empty.column.shape == (0,)


def test_a_box_grows_as_its_vectors_spread_out_and_blocks_from_two_frames_back_do_not_make_it_grow():
    """An object coming closer: each 8x8 block of it moves 3 px right plus 4% of its distance from
    the object's centre (it grows by 1.02 a frame); one block in four was predicted from two frames
    back, so its vector reads twice its motion."""
    from streamlens.frame import Frame
    from streamlens.track.motion import MotionVectors

    centre = np.array([148.0, 148.0])
    starts = np.array([(x, y) for x in range(104, 196, 8) for y in range(104, 196, 8)], float)
    motion = np.array([3.0, 0.0]) + 0.02 * (starts - centre)
    motion[::4] *= 2.0
    background = np.array([(x, y, 0.0, 0.0) for x in range(4, 320, 8) for y in range(4, 300, 8)
                           if not (100 <= x < 200 and 100 <= y < 200)])
    vectors = np.vstack([np.column_stack([starts + motion, motion]), background]).astype(np.float32)
    model = MotionVectors()
    frame = Frame("cam1", 1, None, 0.0, np.zeros((300, 320, 3), np.uint8), motion_vectors=vectors)
    estimate = model.measure(None, model.observe(frame), np.array([[100.0, 100.0, 196.0, 196.0]]))
    assert estimate.growth[0] == pytest.approx(1.02, abs=0.004)
    assert estimate.shift[0] == pytest.approx([3.0, 0.0], abs=0.5)
    rigid = np.column_stack([starts + [3.0, 0.0], np.tile([3.0, 0.0], (len(starts), 1))]).astype(np.float32)
    still = Frame("cam1", 1, None, 0.0, np.zeros((300, 320, 3), np.uint8), motion_vectors=rigid)
    box = np.array([[100.0, 100.0, 196.0, 196.0]])
    assert model.measure(None, model.observe(still), box).growth[0] == pytest.approx(1.0)  # moved, kept its size


def test_the_compiled_reading_of_ffmpeg_vectors_is_the_arithmetic_written_out(clips):
    """FFmpeg's records of a clip with B-frames (blocks from the past and from the future), and the
    same with mixed precisions: the compiled pass keeps exactly the past blocks, in order, each moved
    by -motion / (scale x distance) per frame."""
    from streamlens.sources.motion_vectors import vectors_from_side_data

    def written_out(raw, distance):
        raw = raw[raw["source"] < 0]
        scale = np.float32(-1.0) / (np.maximum(raw["motion_scale"], 1).astype(np.float32) * np.float32(distance))
        return np.stack([raw["dst_x"].astype(np.float32), raw["dst_y"].astype(np.float32),
                         (raw["motion_x"] * scale.astype(np.float64)).astype(np.float32),
                         (raw["motion_y"] * scale.astype(np.float64)).astype(np.float32)], axis=1).reshape(-1, 4)

    container = av.open(str(clips[2]))
    stream = container.streams.video[0]
    stream.codec_context.options = {"flags2": "+export_mvs"}
    records = [f.side_data.get("MOTION_VECTORS") for f in container.decode(stream)]
    container.close()
    records = [r.to_ndarray() for r in records if r is not None]
    assert sum((r["source"] > 0).any() for r in records) > 5  # B-frames: blocks from the future to leave out
    mixed = records[3].copy()
    mixed["motion_scale"][::3] = 2
    for raw in records + [mixed]:
        for distance in (1, 2, 3):
            assert np.array_equal(vectors_from_side_data(raw, distance), written_out(raw, distance))


def test_a_box_whose_blocks_lost_their_vectors_goes_on_at_its_speed_instead_of_stopping():
    """A person walking right at 6 px a frame; after the second keyframe the encoder codes the person's
    blocks without a vector from the past (intra, as it does for a fast or turning body): only three
    blocks of the background seen through the person keep one, at zero. Those three must not stop the
    box: it goes on at the speed its keyframes showed (before `MIN_COVERAGE` it fell 23 px behind)."""
    import supervision as sv

    from streamlens.frame import Frame
    from streamlens.track.tracker import KeyframeTracker

    background = [(x, y) for x in range(8, 640, 16) for y in range(8, 360, 16)]

    def frame(index: int, left: float, person_vectors: bool) -> Frame:
        rows = []
        for x, y in background:
            inside = left <= x < left + 60 and 100 <= y < 220
            if inside and person_vectors:
                rows.append((x, y, 6.0, 0.0))
            elif not inside:
                rows.append((x, y, 0.0, 0.0))
        if not person_vectors:  # three blocks of the background seen through the person, standing still
            rows += [(left + 30, 150, 0.0, 0.0), (left + 30, 166, 0.0, 0.0), (left + 22, 158, 0.0, 0.0)]
        return Frame("cam1", index, index / 30, 0.0, np.zeros((360, 640, 3), np.uint8),
                     motion_vectors=np.array(rows, np.float32))

    def person(left: float) -> sv.Detections:
        return sv.Detections(xyxy=np.array([[left, 100.0, left + 60, 220.0]]), confidence=np.array([0.9]),
                             class_id=np.array([0]), data={"class_name": np.array(["person"])})

    tracker = KeyframeTracker("mv", fps=30)
    tracker.update(frame(0, 100, True), person(100))
    for i in range(1, 6):
        tracker.propagate(frame(i, 100 + 6 * i, True))
    tracker.update(frame(6, 136, True), person(136))
    for i in range(7, 13):
        shown = tracker.propagate(frame(i, 100 + 6 * i, False))
    assert shown.xyxy[0, 0] == pytest.approx(172, abs=6)  # 36 px on, not left standing at 136
