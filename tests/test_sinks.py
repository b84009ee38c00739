"""The JSONL and annotated-video sinks, on real files: what lands on disk, and when."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import supervision as sv

from streamlens.config import VideoSinkConfig
from streamlens.errors import SinkError
from streamlens.frame import Frame, FrameResult, StatsReport, StreamEnd, empty_detections
from streamlens.sinks import build_sink
from streamlens.sinks.jsonl import FLUSH_INTERVAL_S, JsonlSink
from streamlens.sinks.video import VideoSink
from streamlens.wire.schema import dumps, message_for

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
HIGHWAY_720P = DATA / "video" / "highway_720p30.mp4"

# a box at known pixels on the 720p frames: left edge x=200, top y=150, right x=500, bottom y=400
BOX = (200, 150, 500, 400)


def make_detections(box=BOX, tracker_id=7, class_id=2, name="car", score=0.83) -> sv.Detections:
    det = sv.Detections(
        xyxy=np.array([box], np.float32),
        confidence=np.array([score], np.float32),
        class_id=np.array([class_id], np.int64),
        tracker_id=np.array([tracker_id], np.int64),
    )
    det.data["class_name"] = np.array([name], dtype=object)
    return det


def write_item(sink, item) -> None:
    """Hand an item to a sink the way the runtime does: with its message and payload."""
    message = message_for(item)
    sink.write(item, message, dumps(message))


def synthetic_image(width: int, height: int, index: int) -> np.ndarray:
    """A moving gradient, so every frame differs (and the encoder has something to do)."""
    x = np.arange(width, dtype=np.int32)[None, :]
    y = np.arange(height, dtype=np.int32)[:, None]
    image = np.empty((height, width, 3), np.uint8)
    image[..., 0] = (x + index * 3) % 256
    image[..., 1] = (y * 2) % 256
    image[..., 2] = (x + y + index) % 256
    return image


def results_for(stream: str, images: list[np.ndarray], fps: float = 30.0, detections=None):
    return [
        FrameResult(
            Frame(stream, i, i / fps, time.time(), image),
            seq=i,
            keyframe=i % 5 == 0,
            detections=detections if detections is not None else empty_detections(),
        )
        for i, image in enumerate(images)
    ]


def read_video(path: Path) -> tuple[av.video.stream.VideoStream, list[np.ndarray], list[float]]:
    """Decode a whole file: its stream info, BGR images and frame times in seconds."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        images, times = [], []
        for frame in container.decode(stream):
            images.append(frame.to_ndarray(format="bgr24"))
            times.append(float(frame.time))
        return stream, images, times


@pytest.fixture(scope="module")
def highway_frames() -> list[np.ndarray]:
    """The first 40 frames of the real 720p clip, decoded here with PyAV."""
    if not HIGHWAY_720P.exists():
        pytest.skip(f"test video not found: {HIGHWAY_720P} (the shared data folder is absent)")
    images = []
    with av.open(str(HIGHWAY_720P)) as container:
        for frame in container.decode(video=0):
            images.append(frame.to_ndarray(format="bgr24"))
            if len(images) == 40:
                break
    return images


# ---------------------------------------------------------------------------------------- JSONL


def test_jsonl_writes_one_json_object_per_line_in_order_with_eos_last(tmp_path):
    path = tmp_path / "out" / "nested" / "results.jsonl"  # parent folders are made
    images = [synthetic_image(64, 48, i) for i in range(25)]
    results = results_for("cam1", images, detections=make_detections((4, 4, 30, 20)))
    sink = JsonlSink(path)
    sink.open()
    for result in results:
        write_item(sink, result)
    write_item(sink, StreamEnd("cam1", seq=25, frames=25))
    sink.close()
    sink.close()  # idempotent

    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.decode().splitlines()
    assert len(lines) == 26
    messages = [json.loads(line) for line in lines]
    assert all(isinstance(m, dict) for m in messages)
    assert [m["seq"] for m in messages] == list(range(26))
    assert [m["type"] for m in messages] == ["frame"] * 25 + ["eos"]
    assert messages[-1]["frames"] == 25
    assert messages[3]["objects"][0]["id"] == 7 and messages[3]["objects"][0]["label"] == "car"


def test_jsonl_truncates_an_existing_file(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text("old line\n" * 100)
    sink = JsonlSink(path)
    sink.open()
    write_item(sink, StreamEnd("cam1", seq=0, frames=0))
    sink.close()
    assert [json.loads(line)["type"] for line in path.read_text().splitlines()] == ["eos"]


def test_jsonl_lines_reach_the_file_whole_before_close(tmp_path):
    path = tmp_path / "results.jsonl"
    sink = JsonlSink(path)
    sink.open()
    try:
        for result in results_for("cam1", [synthetic_image(32, 24, i) for i in range(10)]):
            write_item(sink, result)
        deadline = time.monotonic() + 5 * FLUSH_INTERVAL_S + 1.0
        while time.monotonic() < deadline and path.stat().st_size == 0:
            time.sleep(0.02)
        raw = path.read_bytes()  # what `tail -f` would see, without close()
        assert raw.endswith(b"\n"), "a reader saw half a line"
        assert len(raw.splitlines()) == 10

        # a StreamEnd reaches the file at once, not on the timer
        write_item(sink, StreamEnd("cam1", seq=10, frames=10))
        assert json.loads(path.read_bytes().splitlines()[-1])["type"] == "eos"
    finally:
        sink.close()


def test_jsonl_unwritable_path_is_one_line_naming_the_path(tmp_path):
    regular_file = tmp_path / "not_a_folder"
    regular_file.write_text("x")
    path = regular_file / "out" / "results.jsonl"
    sink = JsonlSink(path)
    with pytest.raises(SinkError) as error:
        sink.open()
    message = str(error.value)
    assert str(path) in message
    assert "\n" not in message
    sink.close()  # closing a sink that never opened is harmless


# ---------------------------------------------------------------------------------------- video


def ffprobe_stream(path: Path) -> dict:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames",
         "-show_entries", "stream=codec_name,width,height,pix_fmt,nb_read_frames,avg_frame_rate",
         "-of", "json", str(path)],
        capture_output=True, text=True, check=True, timeout=30,
    )
    return json.loads(out.stdout)["streams"][0]


def test_video_sink_draws_boxes_and_writes_one_frame_per_result(tmp_path, highway_frames):
    path = tmp_path / "annotated.mp4"
    results = results_for("cam1", highway_frames, detections=make_detections())
    originals = [image.copy() for image in highway_frames]
    sink = VideoSink(path, stream_fps={"cam1": 30.0})
    sink.open()
    for result in results:
        write_item(sink, result)
    write_item(sink, StreamEnd("cam1", seq=40, frames=40))
    sink.close()

    assert sink.frames_written == {"cam1": 40}
    unchanged = all(np.array_equal(a, b) for a, b in zip(originals, highway_frames))
    assert unchanged, "the sink drew on the input frames"

    info = ffprobe_stream(path)
    assert info["codec_name"] == "h264" and info["pix_fmt"] == "yuv420p"
    assert (info["width"], info["height"]) == (1280, 720)
    assert int(info["nb_read_frames"]) == 40
    assert Fraction(info["avg_frame_rate"]) == 30

    stream, decoded, times = read_video(path)
    assert len(decoded) == 40
    assert times[-1] == pytest.approx(39 / 30, abs=1e-3)  # plays at 30 fps

    i = 20
    out, src = decoded[i].astype(np.int16), originals[i].astype(np.int16)
    x1, y1, x2, y2 = BOX
    # pixels along the box's right and bottom edges (away from the label at the top left)
    right_edge = np.s_[y1 + 20 : y2 - 20, x2 - 1 : x2 + 2]
    bottom_edge = np.s_[y2 - 1 : y2 + 2, x1 + 20 : x2 - 20]
    for edge in (right_edge, bottom_edge):
        change = np.abs(out[edge] - src[edge]).mean()
        assert change > 30, f"no box drawn at {edge}: mean change {change:.1f}"
    # a region far from the box only carries compression noise
    far = np.abs(out[500:700, 800:1200] - src[500:700, 800:1200])
    assert far.mean() < 6, far.mean()


def test_two_streams_get_two_files_and_odd_sizes_work(tmp_path):
    path = tmp_path / "out" / "annotated.mp4"
    cam1 = results_for("cam1", [synthetic_image(321, 241, i) for i in range(12)],
                       detections=make_detections((10, 10, 120, 90), tracker_id=-1))
    cam2 = results_for("cam2", [synthetic_image(160, 120, i) for i in range(8)], fps=12.5)
    sink = VideoSink(path, stream_fps={"cam2": 12.5})
    sink.open()
    for i in range(12):  # interleaved, as the runtime delivers them
        write_item(sink, cam1[i])
        if i < 8:
            write_item(sink, cam2[i])
    write_item(sink, StreamEnd("cam2", seq=8, frames=8))
    write_item(sink, StreamEnd("cam1", seq=12, frames=12))
    sink.close()

    assert sorted(p.name for p in path.parent.iterdir()) == ["annotated-cam2.mp4", "annotated.mp4"]
    assert sink.frames_written == {"cam1": 12, "cam2": 8}

    stream, images, _ = read_video(path)
    assert (stream.codec_context.name, len(images)) == ("h264", 12)
    assert images[0].shape == (242, 322, 3)  # 321x241 padded to even

    stream, images, times = read_video(tmp_path / "out" / "annotated-cam2.mp4")
    assert (len(images), images[0].shape) == (8, (120, 160, 3))
    assert stream.average_rate == Fraction(25, 2)
    assert times[-1] == pytest.approx(7 / 12.5, abs=1e-3)


def test_stream_placeholder_in_path_names_each_file(tmp_path):
    sink = VideoSink(tmp_path / "{stream}.mp4")
    sink.open()
    for stream in ("north gate", "cam2"):
        for result in results_for(stream, [synthetic_image(64, 48, i) for i in range(3)]):
            write_item(sink, result)
    sink.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cam2.mp4", "north_gate.mp4"]


def test_close_without_stream_end_leaves_a_playable_file(tmp_path):
    path = tmp_path / "interrupted.mp4"
    sink = VideoSink(path)
    sink.open()
    for result in results_for("cam1", [synthetic_image(320, 240, i) for i in range(15)],
                              detections=make_detections((20, 20, 100, 80))):
        write_item(sink, result)
    sink.close()  # as after Ctrl-C: no StreamEnd came
    sink.close()

    stream, images, times = read_video(path)
    assert len(images) == 15 == sink.frames_written["cam1"]
    assert times[-1] == pytest.approx(14 / 30, abs=1e-3)


def test_video_sink_unwritable_path_fails_at_open_naming_the_path_and_key(tmp_path):
    regular_file = tmp_path / "not_a_folder"
    regular_file.write_text("x")
    path = regular_file / "annotated.mp4"
    sink = VideoSink(path)
    with pytest.raises(SinkError) as error:
        sink.open()  # at the start, not at the first frame
    assert str(error.value) == f"video sink: cannot write {path}: a file is in the way of a folder"
    sink.close()
    cfg = VideoSinkConfig(type="video", path=tmp_path / "out" / "{stream}" / "annotated.mp4")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "cam2").write_text("x")  # cam2's folder cannot be made
    sink = build_sink(cfg, {"cam1": 25.0, "cam2": 25.0}, where="sinks[1]")
    with pytest.raises(SinkError) as error:
        sink.open()
    assert str(error.value) == (f"sinks[1].path: cannot write {tmp_path}/out/cam2/annotated.mp4: "
                                "a file is in the way of a folder")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cam1", "cam2"]
    assert list((tmp_path / "out" / "cam1").iterdir()) == []  # the check leaves no empty file


def test_video_sink_encodes_each_stream_on_a_thread_of_its_own(tmp_path):
    sink = VideoSink(tmp_path / "{stream}.mp4", stream_fps={"cam1": 30.0, "cam2": 30.0})
    sink.open()
    streams = {name: results_for(name, [synthetic_image(96, 64, i) for i in range(6)]) for name in ("cam1", "cam2")}
    for i in range(6):
        for name in streams:
            write_item(sink, streams[name][i])
    encoders = sorted(t.name for t in threading.enumerate() if t.name.startswith("video-"))
    write_item(sink, StreamEnd("cam1", seq=6, frames=6))
    sink.close()
    assert encoders == ["video-cam1", "video-cam2"]
    assert not any(t.name.startswith("video-") for t in threading.enumerate())  # all ended in close()
    assert sink.frames_written == {"cam1": 6, "cam2": 6} and sink.drops() == {}
    assert [len(read_video(tmp_path / f"{name}.mp4")[1]) for name in streams] == [6, 6]


def test_an_encoder_error_is_one_line_and_ends_the_sink(tmp_path):
    sink = VideoSink(tmp_path / "a.mp4", codec="no_such_codec")
    sink.open()
    write_item(sink, results_for("cam1", [synthetic_image(32, 24, 0)])[0])
    with pytest.raises(SinkError) as error:
        sink.close()  # the encoder's thread found it: the next write or close says so
    assert str(error.value) == (f"video sink: cannot write {tmp_path}/a.mp4: "
                                "codec 'no_such_codec' is not in this FFmpeg build")


# ------------------------------------------------------------------------- NaN and full disks


def strict_json(line: str | bytes) -> dict:
    """Parse as a strict JSON reader does (Python's json takes NaN and Infinity; JSON does not)."""
    def reject(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(line, parse_constant=reject)


def test_nan_and_infinities_reach_the_file_as_null(tmp_path):
    det = make_detections((4, 4, 30, 20), score=float("nan"))
    det.xyxy[0, 2] = np.inf
    result = results_for("cam1", [synthetic_image(64, 48, 0)], detections=det)[0]
    result.frame.timings["detect"] = float("nan")
    path = tmp_path / "results.jsonl"
    sink = JsonlSink(path)
    sink.open()
    write_item(sink, result)
    write_item(sink, StatsReport("cam1", {"fps": float("inf"), "latency_ms": {"p95": float("nan")}}))
    sink.close()
    frame, stats = [strict_json(line) for line in path.read_bytes().splitlines()]
    assert frame["objects"][0]["score"] is None and frame["objects"][0]["box"] == [4.0, 4.0, None, 20.0]
    assert frame["latency_ms"]["detect"] is None and frame["objects"][0]["label"] == "car"
    assert stats["fps"] is None and stats["latency_ms"] == {"p95": None}


FILE_LIMIT_WRITER = """
import resource, signal, sys
from streamlens.errors import SinkError
from streamlens.frame import StreamEnd
from streamlens.sinks.jsonl import JsonlSink
from streamlens.wire.schema import dumps, message_for
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead
resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, 10_000))
sink = JsonlSink(sys.argv[1])
sink.open()
try:
    for seq in range(1000):
        end = StreamEnd("cam1", seq, seq)
        sink.write(end, message_for(end), dumps(message_for(end)))  # a StreamEnd writes at once
except SinkError as e:
    print(e)
try:
    sink.close()
except SinkError as e:
    print("close:", e)
print("lost", sink.lost_lines)
"""


def test_jsonl_keeps_whole_lines_when_a_write_fails_halfway(tmp_path):
    """A file that can grow no more (a size limit here, a full disk alike) takes part of a line:
    the sink cuts it back to its last whole line and says why, once, naming the path."""
    path = tmp_path / "results.jsonl"
    proc = subprocess.run([sys.executable, "-c", FILE_LIMIT_WRITER, str(path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    first, closing, lost = proc.stdout.splitlines()
    assert first == f"jsonl sink: cannot write {path}: File too large"
    assert closing == f"close: {first}"
    raw = path.read_bytes()
    assert 0 < len(raw) <= 10_000 and raw.endswith(b"\n")
    seqs = [strict_json(line)["seq"] for line in raw.splitlines()]
    assert seqs == list(range(len(seqs)))
    assert lost == "lost 1"  # the line cut short; the sink took no more after the error
