"""Whole pipelines, run as a user runs them: real clips, the real CLI, real signals."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import av
import pytest

import streamlens
from streamlens.errors import StreamlensError
from streamlens.sinks import Sink

from .conftest import REPO, need_video, streamlens as run_cli

FRAME_KEYS = {"v", "type", "stream", "seq", "frame", "pts", "ts", "keyframe", "width", "height", "objects",
              "latency_ms"}
OBJECT_KEYS = {"id", "cls", "label", "score", "box"}


def read_jsonl(path: Path) -> list[dict]:
    text = path.read_text()
    assert text == "" or text.endswith("\n"), "the last line is cut"
    return [json.loads(line) for line in text.splitlines()]


def check_schema_v1(lines: list[dict], stream: str, width: int, height: int) -> None:
    frames = [m for m in lines if m["type"] == "frame" and m["stream"] == stream]
    eos = [m for m in lines if m["type"] == "eos" and m["stream"] == stream]
    assert len(eos) == 1 and eos[0]["frames"] == len(frames) and eos[0]["v"] == 1
    assert [m["seq"] for m in frames] + [eos[0]["seq"]] == list(range(len(frames) + 1))
    last_pts = -1.0
    for m in frames:
        assert set(m) >= FRAME_KEYS and m["v"] == 1
        assert (m["width"], m["height"]) == (width, height)
        assert m["pts"] > last_pts
        last_pts = m["pts"]
        assert {"decode", "detect", "track", "total"} <= set(m["latency_ms"])
        for obj in m["objects"]:
            assert set(obj) >= OBJECT_KEYS
            x1, y1, x2, y2 = obj["box"]
            assert 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height
            assert 0 <= obj["score"] <= 1 and isinstance(obj["id"], int) and isinstance(obj["label"], str)


def count_frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def write_pipeline(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(body)
    return path


def test_highway_motion_pipeline_writes_schema_v1_and_annotated_video(tmp_path):
    clip = need_video("highway_720p30.mp4")
    path = write_pipeline(tmp_path, f"""
sources: [{{name: highway, uri: {clip}}}]
detector: {{backend: motion}}
tracker: none
sinks:
  - {{type: jsonl, path: out/results.jsonl}}
  - {{type: video, path: out/annotated.mp4}}
""")
    proc = run_cli("run", str(path))
    assert proc.returncode == 0, proc.stderr
    lines = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert len(lines) == 898 and lines[-1]["type"] == "eos" and lines[-1]["frames"] == 897
    check_schema_v1(lines, "highway", 1280, 720)
    assert [m["frame"] for m in lines[:-1]] == list(range(897))
    with_cars = sum(1 for m in lines[30:-1] if m["objects"])
    assert with_cars >= 0.85 * (897 - 30)
    assert count_frames(tmp_path / "out" / "annotated.mp4") == 897
    assert "highway" in proc.stderr and "897" in proc.stderr  # the summary


def quickstart_copy(tmp_path: Path) -> Path:
    """A copy of the two folders the quickstart reads and writes (pipelines/, samples/): the user's
    pipelines/out is left alone."""
    for folder, name in (("pipelines", "quickstart.yaml"), ("samples", "traffic.mp4")):
        (tmp_path / folder).mkdir()
        shutil.copy(REPO / folder / name, tmp_path / folder / name)
    return tmp_path


def test_quickstart_shows_keyframes_lasting_ids_and_a_counting_line(tmp_path):
    """`streamlens run pipelines/quickstart.yaml` as the README says: the page's address printed;
    the detector ran on under half of the frames and the tracker carried the objects between them
    under ids that last; the line counted crossings (events, and the counts in the frames); the
    summary, the JSONL file and the annotated video agree on the frames."""
    proc = run_cli("run", "pipelines/quickstart.yaml", cwd=quickstart_copy(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert re.match(r"live page: http://127\.0\.0\.1:\d+/\n", proc.stderr), proc.stderr
    out = tmp_path / "pipelines" / "out"
    lines = read_jsonl(out / "quickstart.jsonl")
    check_schema_v1(lines, "cam1", 640, 360)
    frames = [m for m in lines if m["type"] == "frame"]
    keyframes = sum(m["keyframe"] for m in frames)
    assert len(frames) == 300 and 0 < keyframes < len(frames) / 2
    summary_row = [row.split() for row in proc.stderr.splitlines() if row.startswith("cam1 ")][-1]
    assert summary_row[1:3] == [str(len(frames)), str(keyframes)]
    carried = [m for m in frames[30:] if not m["keyframe"]]
    assert sum(1 for m in carried if m["objects"]) >= 0.9 * len(carried)  # the tracker between keyframes
    seen: dict[int, int] = {}
    for m in frames:
        for obj in m["objects"]:
            seen[obj["id"]] = seen.get(obj["id"], 0) + 1
    lasting = {i for i, n in seen.items() if n > 30}
    assert len(lasting) >= 5 and -1 not in seen, seen  # the person and the vehicles, each under its id
    crossings = [m for m in lines if m["type"] == "event" and m["event"] == "line_cross"]
    assert crossings and all(e["line"] == "gate" and e["object"]["id"] in lasting for e in crossings)
    counted = {d: sum(e["direction"] == d for e in crossings) for d in ("in", "out")}
    assert {d: frames[-1]["counts"]["gate"][d] for d in ("in", "out")} == counted
    assert count_frames(out / "quickstart.mp4") == len(frames)


def test_quickstart_live_serves_the_page_until_ctrl_c(tmp_path):
    """`streamlens run pipelines/quickstart.yaml --live`, as the quickstart's docs say to watch the
    page: the address it prints answers with the page and the stream with its counting line while
    the sample plays paced and again from its start; Ctrl-C ends it with whole files."""
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "pipelines/quickstart.yaml", "--live"],
                            cwd=quickstart_copy(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        said = [proc.stderr.readline()]
        while said[-1] and not said[-1].startswith("live page: "):  # "": ended, the address never printed
            said.append(proc.stderr.readline())
        page = re.fullmatch(r"live page: (http://127\.0\.0\.1:\d+/)\n", said[-1])
        assert page, said
        with urllib.request.urlopen(page[1], timeout=10) as reply:
            assert b"<html" in reply.read()
        with urllib.request.urlopen(page[1] + "api/streams", timeout=10) as reply:
            shown = json.load(reply)["streams"]
        assert [(s["name"], s["live"], s["lines"]) for s in shown] == [
            ("cam1", True, [{"name": "gate", "points": [[320.0, 108.0], [320.0, 270.0]]}])]  # fractions of 640x360
        deadline = time.monotonic() + 60
        while shown[0]["frames"] <= 300 and time.monotonic() < deadline:  # 10 s, then from the start again
            time.sleep(0.5)
            with urllib.request.urlopen(page[1] + "api/streams", timeout=10) as reply:
                shown = json.load(reply)["streams"]
        assert shown[0]["frames"] > 300 and shown[0]["state"] == "running", shown
        proc.send_signal(signal.SIGINT)
        said.append(proc.communicate(timeout=60)[1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, "".join(said)
    lines = read_jsonl(tmp_path / "pipelines" / "out" / "quickstart.jsonl")
    frames = [m for m in lines if m["type"] == "frame"]
    assert len(frames) > 300 and frames[-1]["frame"] > 300
    assert count_frames(tmp_path / "pipelines" / "out" / "quickstart.mp4") == len(frames)


def test_two_sources_are_tagged_and_keyframes_follow_the_interval(tmp_path):
    a, b = need_video("highway_320x240.avi"), need_video("road_topdown_640x360.avi")
    path = write_pipeline(tmp_path, f"""
sources:
  - {{name: highway, uri: {a}}}
  - {{name: road, uri: {b}, max_fps: 15}}
detector: {{backend: motion}}
keyframes: {{interval: 3}}
tracker: none
sinks: [{{type: jsonl, path: out.jsonl}}]
""")
    report = streamlens.Pipeline.from_yaml(path).run()
    assert report.exit_code == 0 and report.error is None
    lines = read_jsonl(tmp_path / "out.jsonl")
    check_schema_v1(lines, "highway", 320, 240)
    check_schema_v1(lines, "road", 640, 360)
    highway = [m for m in lines if m["stream"] == "highway" and m["type"] == "frame"]
    road = [m for m in lines if m["stream"] == "road" and m["type"] == "frame"]
    assert len(highway) == 748 and 180 <= len(road) <= 190  # 374 frames at 30 fps, capped at 15
    keyframes = [m["seq"] for m in highway if m["keyframe"]]
    assert keyframes[0] == 0 and all(b - a == 3 for a, b in zip(keyframes[1:], keyframes[2:]))
    assert all(not m["objects"] for m in highway if not m["keyframe"])  # tracker none: nothing between


def test_embedded_results_iterator_and_early_exit(tmp_path):
    clip = need_video("highway_320x240.avi")
    path = write_pipeline(tmp_path, f"sources: [{{uri: {clip}}}]\ndetector: {{backend: motion}}\ntracker: none\n")
    items = list(streamlens.Pipeline.from_yaml(path).results())
    assert len(items) == 749 and isinstance(items[-1], streamlens.StreamEnd)
    assert [r.seq for r in items[:-1]] == list(range(748))
    assert items[100].frame.image.shape == (240, 320, 3)
    results = streamlens.Pipeline.from_yaml(path).results()
    for n, _ in enumerate(results):
        if n == 10:
            break
    results.close()  # what leaving a for loop does once the generator is collected
    assert not [t for t in threading.enumerate() if t.name in ("streamlens-run", "engine", "detector")]


def test_unreadable_video_is_one_line_and_exit_1(tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(os.urandom(4096))
    path = write_pipeline(tmp_path, f"sources: [{{uri: {bad}}}]\ndetector: {{backend: motion}}\n")
    proc = run_cli("run", str(path))
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and str(bad) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    with pytest.raises(StreamlensError, match="broken.mp4"):
        streamlens.Pipeline.from_yaml(path).run()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_leaves_whole_lines_and_exit_130(tmp_path, sig):
    clip = need_video("highway_720p30.mp4")
    out = tmp_path / "out.jsonl"
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {clip}, live: true}}]
detector: {{backend: motion}}
sinks: [{{type: jsonl, path: {out}}}, {{type: video, path: {tmp_path / 'out.mp4'}}}]
""")
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(path)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 20_000):
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    lines = read_jsonl(out)  # every line whole
    frames = [m for m in lines if m["type"] == "frame"]
    assert 20 < len(frames) < 897
    assert lines[-1] == {**lines[-1], "type": "eos", "frames": len(frames), "reason": "stopped"}
    assert count_frames(tmp_path / "out.mp4") == len(frames)  # the video is closed and playable
    assert "Traceback" not in stderr


class FailingSink(Sink):
    """A user's own sink (the embedding API) that breaks after some frames, like a full disk."""

    name = "failing"

    def __init__(self, after: int):
        self.after, self.seen = after, 0

    def write(self, item, message, payload):
        self.seen += 1
        if self.seen > self.after:
            raise streamlens.SinkError("failing sink: disk full")


def test_a_failing_sink_stops_the_run_and_the_others_keep_what_was_produced(tmp_path):
    clip = need_video("highway_320x240.avi")
    out = tmp_path / "out.jsonl"
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {clip}}}]
detector: {{backend: motion}}
sinks: [{{type: jsonl, path: {out}}}]
""")
    report = streamlens.Pipeline.from_yaml(path, sinks=[FailingSink(after=100)]).run()
    assert (report.status, report.exit_code, report.error) == ("failed", 1, "failing sink: disk full")
    lines = read_jsonl(out)
    frames = [m for m in lines if m["type"] == "frame"]
    assert len(frames) >= 100 and [m["seq"] for m in frames] == list(range(len(frames)))
    assert lines[-1]["type"] == "eos" and lines[-1]["reason"] in ("error", "stopped")


def test_bulk_mode_detects_every_frame_of_a_file_and_refuses_cameras(tmp_path):
    out = tmp_path / "out.jsonl"
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {REPO / 'samples' / 'traffic.mp4'}, live: true}}]
detector: {{backend: motion}}
keyframes: {{interval: 10}}
sinks: [{{type: jsonl, path: {out}}}]
""")
    proc = run_cli("run", "--bulk", "-q", str(path))
    assert proc.returncode == 0, proc.stderr
    frames = [m for m in read_jsonl(out) if m["type"] == "frame"]
    assert len(frames) == 300 and all(m["keyframe"] for m in frames)
    # not paced at 30 fps: paced, frames would be decoded a frame period (33 ms) apart at the least
    gaps = sorted(b["ts"] - a["ts"] for a, b in zip(frames, frames[1:]))
    assert gaps[len(gaps) // 2] < 1 / 30, gaps[len(gaps) // 2]
    camera = write_pipeline(tmp_path, "sources: [{uri: 'rtsp://127.0.0.1:1/x'}]\ndetector: {backend: motion}\n")
    proc = run_cli("run", "--bulk", str(camera))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"{camera}: sources[0].uri: runtime.mode bulk reads files; a camera or URL is live"


def _listening(pid: int) -> bool:
    """Whether the process `pid` has a TCP socket listening (a zmq sink bound)."""
    import psutil

    try:
        return any(c.status == psutil.CONN_LISTEN for c in psutil.Process(pid).net_connections("tcp"))
    except psutil.Error:
        return False


def test_ctrl_c_while_waiting_for_subscribers_exits_at_once(tmp_path):
    path = write_pipeline(tmp_path, f"""
sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}}}]
detector: {{backend: motion}}
sinks: [{{type: zmq, endpoint: "tcp://127.0.0.1:*", wait_subscribers: 1, wait_timeout_s: 60}}]
""")
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(path)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _listening(proc.pid) and time.monotonic() < deadline:  # its sink is waiting for subscribers
        time.sleep(0.1)
    assert proc.poll() is None and _listening(proc.pid)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=20)  # not the 60 s it would wait for a subscriber
    assert proc.returncode == 130, stderr


def test_an_exception_in_the_caller_stops_every_node_and_keeps_what_was_written(tmp_path):
    """`run(on_tick=...)` raising (or Ctrl-C in a program that embeds the pipeline) ends the run with
    that exception, but only after every thread has stopped and the sinks have closed their files."""
    import threading

    clip = need_video("highway_320x240.avi")
    out = tmp_path / "out.jsonl"
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {clip}, live: true}}]
detector: {{backend: motion}}
sinks: [{{type: jsonl, path: {out}}}]
""")
    before = set(threading.enumerate())
    ticks = []

    def on_tick(pipeline):
        ticks.append(1)
        if len(ticks) == 5:
            raise RuntimeError("the caller's bug")

    with pytest.raises(RuntimeError, match="the caller's bug"):
        streamlens.Pipeline.from_yaml(path).run(on_tick=on_tick)
    assert [t.name for t in set(threading.enumerate()) - before if t.is_alive()] == []
    lines = read_jsonl(out)
    frames = [m for m in lines if m["type"] == "frame"]
    assert frames and [m["seq"] for m in frames] == list(range(len(frames)))
    assert lines[-1]["type"] == "eos"


def test_leaving_a_with_block_ends_a_run_going_on_another_thread_and_keeps_what_was_written(tmp_path):
    """`with Pipeline(...) as p`: leaving the block closes the pipeline. A run still going (here a
    looping camera-like file that never ends, run on a thread of the caller's) is aborted and waited
    for: every thread ends, the sink has flushed whole lines and each stream its `eos`."""
    clip = need_video("highway_320x240.avi")
    out = tmp_path / "out.jsonl"
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {clip}, live: true, loop: true}}]
detector: {{backend: motion}}
sinks: [{{type: jsonl, path: {out}}}]
""")
    before = set(threading.enumerate())
    reports = []
    with streamlens.Pipeline.from_yaml(path) as pipeline:
        runner = threading.Thread(target=lambda: reports.append(pipeline.run()))
        runner.start()
        deadline = time.monotonic() + 60
        while pipeline.stats["cam1"].frames < 10 and time.monotonic() < deadline and runner.is_alive():
            time.sleep(0.05)
        assert pipeline.stats["cam1"].frames >= 10
    assert not runner.is_alive() and reports[0].status == "interrupted"
    runner.join()
    assert [t.name for t in set(threading.enumerate()) - before if t.is_alive()] == []
    lines = read_jsonl(out)
    frames = [m for m in lines if m["type"] == "frame"]
    assert len(frames) >= 10 and [m["seq"] for m in frames] == list(range(len(frames)))
    assert lines[-1]["type"] == "eos"
    pipeline.close()  # again, after the run: nothing to do


def test_closing_a_pipeline_that_never_ran_does_nothing(tmp_path):
    path = write_pipeline(tmp_path, f"sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}}}]\n"
                                    "detector: {backend: motion}\n")
    with streamlens.Pipeline.from_yaml(path) as pipeline:
        pass
    assert pipeline.run().status == "done"  # it may still run, once


def test_an_adaptive_file_schedule_is_the_same_on_every_run(tmp_path):
    """Adaptive keyframes on files read the tracker's signals: three runs at once (each slowed by
    the others, in its own way) choose the same keyframes and publish the same boxes."""
    outs = []
    procs = []
    for k in range(3):
        out = tmp_path / f"run{k}.jsonl"
        path = tmp_path / f"p{k}.yaml"
        path.write_text(f"""
sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}}}, {{uri: {REPO / 'samples' / 'traffic.mp4'}, name: two}}]
detector: {{backend: motion}}
keyframes: {{interval: 5, adaptive: true, max_interval: 15}}
tracker: mv
sinks: [{{type: jsonl, path: {out}}}]
""")
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)]))
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]

    def seen(out: Path) -> list:
        return sorted((m["stream"], m["frame"], m["keyframe"], [(o["id"], o["box"]) for o in m["objects"]])
                      for m in map(json.loads, out.read_text().splitlines()) if m["type"] == "frame")

    first = seen(outs[0])
    assert len(first) == 600 and any(k for _, _, k, _ in first)
    assert seen(outs[1]) == first and seen(outs[2]) == first
