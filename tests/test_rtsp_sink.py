"""The rtsp sink against a real RTSP server that takes published streams (GStreamer's, in record
mode: streamlens/testing/rtsp_record.py): a run's annotated video read back by ffprobe and PyAV
while the run goes on, again after the server restarts on the same port; the frames lost meanwhile
counted; a server that does not answer never holds up the pipeline."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest

from streamlens.config import load_pipeline
from streamlens.frame import Frame, FrameResult, StreamEnd, empty_detections
from streamlens.sinks import build_sink
from streamlens.sinks.rtsp import RtspSink
from streamlens.testing.rtsp_record import RecordServer

from .conftest import REPO
from .rtsp_server import free_port, gst_missing

SAMPLE = REPO / "samples" / "traffic.mp4"
PASSWORD = "pub-S3cret"


@pytest.fixture
def record_server(tmp_path):
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    with RecordServer(["cam1"], tmp_path) as server:
        yield server


def _probe(url: str) -> dict | None:
    """What ffprobe reads of `url`'s video (codec, size), or None while there is nothing to read."""
    try:
        done = subprocess.run(["ffprobe", "-v", "error", "-rtsp_transport", "tcp", "-timeout", "5000000",
                               "-select_streams", "v:0", "-show_entries", "stream=codec_name,width,height",
                               "-of", "json", url], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return None
    streams = json.loads(done.stdout or "{}").get("streams") if done.returncode == 0 else None
    return streams[0] if streams else None


def _decoded_size(url: str) -> tuple[int, int]:
    """The size of the first frame PyAV decodes from `url`."""
    with av.open(url, options={"rtsp_transport": "tcp"}, timeout=10) as container:
        frame = next(container.decode(video=0))
        return frame.width, frame.height


def _wait_for(check, timeout: float, proc: subprocess.Popen | None, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc is None or proc.poll() is None, f"the run exited ({proc.returncode}) while waiting for {what}"
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _file_ts(path: Path) -> list[float]:
    """The wall-clock times of the frames of a JSONL file still being written."""
    text = path.read_text() if path.exists() else ""
    lines = [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]
    return [m["ts"] for m in lines if m["type"] == "frame"]


def test_a_run_publishes_its_annotated_video_and_publishes_again_after_the_server_restarts(tmp_path, record_server):
    server = record_server
    url = server.publish_url(credentials="streamlens:${RTSP_PASSWORD}")
    (tmp_path / "p.yaml").write_text(f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true, loop: true}}]
detector: {{backend: motion}}
keyframes: {{interval: 5}}
tracker: {{motion: kalman}}
analytics:
  lines: [{{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}}]
sinks:
  - {{type: rtsp, url: '{url}', keyframe_s: 1, timeout_s: 2, retry_max_s: 1}}
  - {{type: jsonl, path: out/results.jsonl}}
""")
    stderr = tmp_path / "stderr.txt"
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "p.yaml"], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=open(tmp_path / "stdout.txt", "wb"),
                            stderr=open(stderr, "wb"), env={**os.environ, "RTSP_PASSWORD": PASSWORD})
    results = tmp_path / "out" / "results.jsonl"
    try:
        first = _wait_for(lambda: _probe(server.play_url("cam1")), 60, proc, "the published stream")
        assert first == {"codec_name": "h264", "width": 640, "height": 360}
        assert _decoded_size(server.play_url("cam1")) == (640, 360)
        killed = time.time()
        server.kill()
        before = len(_file_ts(results))  # frames go on while the server is away, and are lost
        _wait_for(lambda: len(_file_ts(results)) >= before + 60, 60, proc, "frames published while the server is away")
        server.restart()
        restarted = time.time()
        again = _wait_for(lambda: _probe(server.play_url("cam1")), 60, proc, "the stream after the restart")
        assert again == first
        assert _decoded_size(server.play_url("cam1")) == (640, 360)
        assert proc.poll() is None, "the run ended"
        ts = _file_ts(results)
        assert ts[0] < killed and ts[-1] > restarted
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    err = stderr.read_text()
    out = (tmp_path / "stdout.txt").read_text()
    assert proc.returncode == 130, err[-2000:]
    assert re.search(r"rtsp://\*\*\*@127\.0\.0\.1:\d+/cam1: connection lost", err), err[-2000:]
    assert "publishing again after" in err
    lost = re.search(r"sinks\[0\] \(rtsp\): (\d+) ", out + err)
    assert lost and int(lost.group(1)) > 0, (out + err)[-2000:]  # at 30 fps, about 90 frames lost
    assert PASSWORD not in err + out


def _result(stream: str, index: int, size: tuple[int, int] = (320, 240)) -> FrameResult:
    image = np.zeros((size[1], size[0], 3), np.uint8)
    image[:, (index * 4) % size[0]] = 255
    return FrameResult(Frame(stream, index, index / 25, time.time(), image), index, True, empty_detections())


def test_a_server_that_does_not_answer_never_holds_up_the_pipeline(tmp_path, record_server, caplog):
    """The server stopped (SIGSTOP: its port accepts, it never answers): the publisher waits for it on
    its own thread, and frames that find its queue full are dropped and counted at once."""
    record_server.server.pause()
    sink = RtspSink(record_server.publish_url(credentials=f"user:{PASSWORD}"), stream_fps={"cam1": 25},
                    queue_size=2, timeout_s=1, retry_max_s=1)
    sink.where = "sinks[0]"
    sink.open()
    with caplog.at_level(logging.INFO, logger="streamlens.sinks.rtsp"):
        try:
            for i in range(50):
                sink.write(_result("cam1", i), {}, b"")
            assert sink.drops()["cam1"] >= 40  # the queue holds two; one is in hand
        finally:
            sink.close()  # the try ends after timeout_s; close() waits for it
            record_server.server.resume()
    assert sink.sent() == {"cam1": 0} and sink.drops() == {"cam1": 50}
    assert re.search(r"sinks\[0\]: rtsp://\*\*\*@127\.0\.0\.1:\d+/cam1: cannot publish", caplog.text), caplog.text
    assert PASSWORD not in caplog.text


def test_a_refused_server_costs_frames_not_time_and_the_stream_ends(tmp_path):
    sink = RtspSink(f"rtsp://127.0.0.1:{free_port()}/out", queue_size=4, retry_max_s=0.5)
    sink.open()
    for i in range(30):
        sink.write(_result("cam1", i), {}, b"")
    sink.write(StreamEnd("cam1", 30, 30, "end"), {}, b"")
    sink.close()
    assert sink.sent() == {"cam1": 0} and sink.drops() == {"cam1": 30}


def test_a_stream_is_published_at_url_slash_stream_with_a_keyframe_each_keyframe_s(tmp_path, record_server):
    """The sink alone: `<url>/<stream>`, an odd frame size padded to even, every frame sent, a
    keyframe every `keyframe_s` (0.5 s here) and timestamps that go forward."""
    sink = build_sink(load_pipeline_sink(tmp_path, record_server.publish_url()), {"cam1": 25.0}, "sinks[0]")
    assert sink.url_for("cam1") == record_server.publish_url("cam1")
    sink.open()
    stop, frames = threading.Event(), []

    def feed() -> None:  # a stream at 25 fps, as a run writes it
        while not stop.is_set():
            sink.write(_result("cam1", len(frames), (321, 241)), {}, b"")
            frames.append(1)
            time.sleep(0.04)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        found = _wait_for(lambda: _probe(record_server.play_url("cam1")), 60, None, "the stream")
        packets = _packets(record_server.play_url("cam1"), 75)  # 3 s at 25 fps
    finally:
        stop.set()
        feeder.join()
        sink.close()
    assert found == {"codec_name": "h264", "width": 322, "height": 242}
    assert sink.connections() == {"cam1": 1} and sink.drops() == {}
    assert sink.sent() == {"cam1": len(frames)}
    keyframes = [pts for pts, key in packets if key]
    assert len(keyframes) >= 3, packets  # about 6
    assert all(b[0] >= a[0] for a, b in zip(packets, packets[1:])), packets  # the relay sends SPS and PPS apart


def _packets(url: str, count: int) -> list[tuple[float, bool]]:
    """(pts in seconds, keyframe) of the first `count` video packets PyAV reads from `url`."""
    found = []
    with av.open(url, options={"rtsp_transport": "tcp"}, timeout=10) as container:
        for packet in container.demux(video=0):
            if packet.pts is not None:
                found.append((float(packet.pts * packet.time_base), packet.is_keyframe))
            if len(found) >= count:
                break
    return found


def load_pipeline_sink(folder: Path, url: str):
    """An rtsp sink's typed section, read from a pipeline file as a run reads it."""
    path = folder / "p.yaml"
    path.write_text(f"""
sources: [{{uri: {SAMPLE}}}]
detector: {{backend: motion}}
sinks: [{{type: rtsp, url: '{url}', keyframe_s: 0.5}}]
""")
    return load_pipeline(path).sinks[0]


@pytest.mark.parametrize("url, problem", [
    ("http://127.0.0.1/x", "expected rtsp://HOST[:PORT]/PATH"),
    ("rtsp://u:hidden@host/{stream}/{stream}", "at most once"),
])
def test_a_wrong_url_is_one_line_without_its_secret(tmp_path, url, problem):
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources: [{{uri: {SAMPLE}}}]
detector: {{backend: motion}}
sinks: [{{type: rtsp, url: '{url}'}}]
""")
    done = subprocess.run([sys.executable, "-m", "streamlens", "validate", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "sinks[0].url" in done.stderr and problem in done.stderr, done.stderr
    assert "hidden" not in done.stderr


def test_each_engine_of_a_supervised_run_publishes_its_own_streams():
    """With `runtime.workers` the rtsp sink stays in the engines (they have the pixels), as it is:
    each stream has its own path."""
    import shutil

    from streamlens.config import parse_pipeline
    from streamlens.scale.supervisor import Supervisor

    data = {"sources": [{"uri": str(SAMPLE)}, {"uri": str(SAMPLE)}], "detector": {"backend": "motion"},
            "sinks": [{"type": "rtsp", "url": "rtsp://127.0.0.1:8554/ai"}, {"type": "jsonl", "path": "o.jsonl"}],
            "runtime": {"workers": 2}}
    config = parse_pipeline(data, REPO / "p.yaml")
    supervisor = Supervisor(config)
    configs = [supervisor._engine_config(engine) for engine in supervisor._engines]
    shutil.rmtree(supervisor._dir)  # never run: its folder for sockets goes now
    for engine in configs:
        assert [s.type for s in engine.sinks] == ["rtsp", "zmq"] and engine.sinks[0] == config.sinks[0]
    assert [len(engine.sources) for engine in configs] == [1, 1]


def test_with_two_engines_the_summary_counts_what_each_engines_sink_could_not_deliver(tmp_path):
    """Each engine of `runtime.workers: 2` keeps its own rtsp sink: the frames they could not publish
    (here, to a port where no server listens) are added up in the summary of the run, as with one engine."""
    from streamlens.testing.rtsp_server import free_port

    path = tmp_path / "p.yaml"
    sample = REPO / "samples" / "traffic.mp4"
    path.write_text(f"""sources:
  - {{name: cam1, uri: {sample}}}
  - {{name: cam2, uri: {sample}}}
detector: {{backend: motion}}
runtime: {{workers: 2}}
sinks:
  - {{type: rtsp, url: "rtsp://127.0.0.1:{free_port()}/out", timeout_s: 1}}
""")
    done = subprocess.run([sys.executable, "-m", "streamlens", "run", str(path)], capture_output=True, text=True,
                          timeout=180, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = done.stdout + done.stderr
    frames = sum(int(line.split()[1]) for line in summary.splitlines() if re.match(r"cam\d +\d", line))
    assert frames == 600, summary
    assert "sinks[0] (rtsp): 600 message(s) not delivered" in summary, summary


@pytest.mark.parametrize("workers", [1, 2])
def test_metrics_count_what_a_sink_could_not_deliver_while_the_run_goes_on(tmp_path, workers):
    """`streamlens_sink_dropped_total{sink}`: an rtsp sink whose server is away drops its frames (the run
    goes on); /metrics counts them by the sink's entry while the run goes on, over one engine or two."""
    import urllib.request

    http = free_port()
    path = tmp_path / "p.yaml"
    sample = REPO / "samples" / "traffic.mp4"
    path.write_text(f"""sources:
  - {{name: cam1, uri: {sample}, live: true, loop: true}}
  - {{name: cam2, uri: {sample}, live: true, loop: true}}
detector: {{backend: motion}}
runtime: {{workers: {workers}, http: {{port: {http}, page: false}}}}
sinks:
  - {{type: rtsp, url: "rtsp://127.0.0.1:{free_port()}/out", timeout_s: 1}}
  - {{type: jsonl, path: {tmp_path / "out.jsonl"}}}
""")
    run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    counted = {}
    try:
        for _ in range(1200):  # up to 2 minutes on a loaded machine
            time.sleep(0.1)
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5).read().decode()
            except OSError:
                continue
            counted = {m.group(1): float(m.group(2)) for m in
                       re.finditer(r'^streamlens_sink_dropped_total\{sink="([^"]+)"\} (\S+)$', text, re.M)}
            if counted.get("sinks[0] (rtsp)", 0) >= 30:
                break
    finally:
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=60)
    assert counted.get("sinks[0] (rtsp)", 0) >= 30, (counted, err[-2000:])
    # every sink of the file has its counter, from zero, under its own type (with two engines the
    # jsonl file is written by the supervisor, each engine's leg of it a push to it); no inner sink
    assert counted.get("sinks[1] (jsonl)") == 0 and set(counted) == {"sinks[0] (rtsp)", "sinks[1] (jsonl)"}
