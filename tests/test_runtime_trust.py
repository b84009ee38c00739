"""What the runtime promises whatever the machine's speed: bounded memory on files, honest stream
ends, a final stats report per stream, deadlines that ignore wall-clock steps, and a failed start
that leaves the last run's output alone. (Signals and stuck sinks: tests/faults/.)"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import streamlens
from streamlens.frame import Frame
from streamlens.graph.run import pipeline as runtime
from streamlens.graph.channel import file_credits
from streamlens.sinks import Sink

from .conftest import REPO
from .test_engine import SlowMotionDetector
from .test_pipeline_run import read_jsonl, write_pipeline

SAMPLE = REPO / "samples" / "traffic.mp4"  # 300 frames, 640x360
SAMPLE_FRAMES = 300


class Collect(Sink):
    """An embedding program's sink: keeps every message, stats included."""

    name = "collect"
    wants_stats = True

    def __init__(self):
        self.messages: list[dict] = []

    def write(self, item, message, payload):
        self.messages.append(message)


class FrameCount:
    """Frames made and not yet freed, counted as they are made and freed. (Walking
    `gc.get_objects()` from another thread can hand out a tuple that a C extension is still
    filling in, and that extension then fails with a SystemError: a fault of the test, not of
    the runtime.)"""

    def __init__(self, monkeypatch):
        self.made: list[None] = []
        self.freed: list[None] = []  # list.append is atomic: the threads that make and free frames need no lock
        init = Frame.__init__

        def counted_init(frame, *args, **kwargs):
            init(frame, *args, **kwargs)
            self.made.append(None)

        monkeypatch.setattr(Frame, "__init__", counted_init)
        monkeypatch.setattr(Frame, "__del__", lambda frame: self.freed.append(None), raising=False)

    def alive(self) -> int:
        return len(self.made) - len(self.freed)


def test_a_file_waits_for_a_slow_detector_instead_of_filling_memory(tmp_path, monkeypatch):
    """A detector far slower than decoding (every frame a keyframe): the file source waits for
    credits, so the frames alive at any moment stay bounded, and none is lost."""
    monkeypatch.setattr(runtime, "build_detector", lambda cfg, *_: SlowMotionDetector(0.02))
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}}}]
detector: {{backend: motion, max_batch: 2}}
keyframes: {{interval: 1}}
tracker: none
""")
    sink = Collect()
    pipeline = streamlens.Pipeline.from_yaml(path, sinks=[sink])
    count = FrameCount(monkeypatch)
    alive: list[int] = []
    report = pipeline.run(on_tick=lambda p: alive.append(count.alive()), tick_s=0.05)
    assert report.exit_code == 0
    frames = [m for m in sink.messages if m["type"] == "frame"]
    assert [m["frame"] for m in frames] == list(range(SAMPLE_FRAMES))
    # credits, the inbox's share, what the sink's queue holds, and a few in the hands of threads
    bound = file_credits(1, 2) + 2 * pipeline.config.runtime.queue_size + 4
    assert len(alive) > 5 and max(alive) <= bound, (max(alive), bound)


def test_every_stream_ends_with_its_last_stats_and_what_it_lost(tmp_path):
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}}}, {{name: cam2, uri: {SAMPLE}, max_fps: 10}}]
detector: {{backend: motion}}
tracker: none
""")
    sink = Collect()
    report = streamlens.Pipeline.from_yaml(path, sinks=[sink]).run(stats_every_s=3600)  # no periodic stats
    assert report.exit_code == 0 and report.incomplete == []
    for name, frames in (("cam1", SAMPLE_FRAMES), ("cam2", SAMPLE_FRAMES // 3)):
        mine = [m for m in sink.messages if m["stream"] == name]
        stats, eos = mine[-2], mine[-1]
        assert stats["type"] == "stats" and stats["frames"] == frames and stats["dropped"] == 0
        assert eos == {"v": 1, "type": "eos", "stream": name, "seq": frames, "frames": frames, "reason": "end",
                       "lost": {"corrupt": 0, "decoder": 0, "refused": 0, "inbox": 0, "stale": 0, "shed": 0},
                       "expected": SAMPLE_FRAMES if name == "cam1" else None, "detail": None}


def _truncated_copy(tmp_path: Path) -> Path:
    """The first 40% of a clip whose index comes first (faststart): it opens, then ends early."""
    clip = tmp_path / "fast.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(SAMPLE), "-c", "copy", "-movflags", "+faststart",
                    str(clip)], check=True)
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(clip.read_bytes()[:int(clip.stat().st_size * 0.4)])
    return cut


def test_a_truncated_file_ends_truncated_and_the_run_says_so(tmp_path):
    cut = _truncated_copy(tmp_path)
    out = tmp_path / "out.jsonl"
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cut, uri: {cut}}}, {{name: whole, uri: {SAMPLE}}}]
detector: {{backend: motion}}
tracker: none
sinks: [{{type: jsonl, path: {out}}}]
""")
    proc = subprocess.run([sys.executable, "-m", "streamlens", "run", str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("streamlens: error:")]
    assert len(errors) == 1 and f"cut: {cut}: truncated" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    lines = read_jsonl(out)
    eos = {m["stream"]: m for m in lines if m["type"] == "eos"}
    decoded = sum(1 for m in lines if m["type"] == "frame" and m["stream"] == "cut")
    assert 0 < decoded < SAMPLE_FRAMES
    assert eos["cut"]["reason"] == "truncated" and eos["cut"]["frames"] == decoded
    assert eos["cut"]["expected"] == SAMPLE_FRAMES and "truncated" in eos["cut"]["detail"]
    assert eos["whole"]["reason"] == "end" and eos["whole"]["frames"] == SAMPLE_FRAMES  # the other went on


def test_latency_and_live_deadlines_ignore_a_step_of_the_wall_clock(tmp_path, monkeypatch):
    """The wall clock jumps back an hour while a live stream runs (NTP, a user's `date -s`): the
    results' latencies stay those of the monotonic clock and no frame is judged stale."""
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true, max_staleness_ms: 2000}}]
detector: {{backend: motion}}
keyframes: {{interval: 5}}
""")
    sink = Collect()
    pipeline = streamlens.Pipeline.from_yaml(path, sinks=[sink])
    real = time.time
    stepped = []

    def step(p) -> None:
        if not stepped and p.stats["cam1"].frames >= 30:
            stepped.append(True)
            monkeypatch.setattr(time, "time", lambda: real() - 3600.0)

    report = pipeline.run(on_tick=step, tick_s=0.05)
    assert stepped and report.exit_code == 0
    frames = [m for m in sink.messages if m["type"] == "frame"]
    # every frame is published or counted; a clock step judged as age would have dropped all of the
    # 270 after it (a busy machine may shed a few for the budget, which is not what is checked here)
    assert len(frames) + report.streams[0].dropped == SAMPLE_FRAMES
    assert len([m for m in frames if m["frame"] >= 30]) > (SAMPLE_FRAMES - 30) // 2
    assert all(0 <= m["latency_ms"]["total"] < 60_000 for m in frames)
    # the detector's answers still arrive after the step (on time as keyframes, or, on a busy machine
    # whose controller stopped keyframes waiting, a few frames later: `detected_frame` tells)
    assert max(m["detected_frame"] for m in frames if m["detected_frame"] is not None) >= 60


def test_the_budget_controller_ticks_once_a_second_however_slow_the_runs_loop_turns(tmp_path):
    """Past a hundred live files decoded on the graph's threads, a turn of the run's loop waits for
    the GIL and took 0.4-5 s; the controller's second came every fourth turn, every 3-5 s, and it
    took up to 20 s to reach its last rung (indoor K=128 published nothing in its window). Here
    each turn takes at least 0.85 s (an `on_tick` that sleeps): the controller ticks once a
    second or so, not once in four turns."""
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true, loop: true}}]
detector: {{backend: motion}}
""")
    pipeline = streamlens.Pipeline.from_yaml(path, sinks=[Collect()])
    assert pipeline.controller is not None
    ticks, turns = [], []
    tick = pipeline.controller.tick
    pipeline.controller.tick = lambda *args, **kwargs: ticks.append(None) or tick(*args, **kwargs)

    def slow_turn(p) -> None:
        turns.append(len(ticks))
        if len(turns) == 8:
            p.stop()
        time.sleep(0.6)

    report = pipeline.run(on_tick=slow_turn, tick_s=0.25)
    assert report.status == "interrupted" and report.error is None and len(turns) >= 8
    # by the eighth turn (at least 6.2 s in): 5 ticks at 0.85 s a turn, one a turn from 1 s on;
    # once in four turns, 2
    assert turns[7] >= 4


def test_the_engine_gets_the_controllers_wait_limit_three_budgets_below_its_first_rung(tmp_path):
    """The rung the runtime posts to the engine carries `wait_limit_s`: three budgets while the
    controller has climbed nothing (a stall's frames are published late, not dropped), the
    budget's trimmed limit once it has. Checked on every rung posted, whichever the machine's
    speed makes it reach."""
    from streamlens.graph.engine import Control

    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true, loop: true}}]
detector: {{backend: motion}}
""")
    pipeline = streamlens.Pipeline.from_yaml(path, sinks=[Collect()])
    control = pipeline.controller
    posted = []
    put = pipeline._mail.put

    def recording_put(item, **kwargs):
        if isinstance(item, Control):
            posted.append((item.max_wait_s, control.level, control.max_wait_s))
        return put(item, **kwargs)

    pipeline._mail.put = recording_put
    report = pipeline.run(on_tick=lambda p: p.stop() if len(posted) >= 3 else None)
    assert report.error is None and len(posted) >= 3
    budget_s = control.budget_ms / 1000
    for limit, level, trimmed in posted:
        assert limit == pytest.approx(3 * budget_s if level == 0 else trimmed)


def test_a_start_that_fails_leaves_the_last_runs_output_alone(tmp_path):
    """The metrics port is taken: the run fails at start with one line naming it, before the
    JSONL file of the last run is truncated."""
    out = tmp_path / "out.jsonl"
    out.write_text('{"last": "run"}\n')
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}}}]
detector: {{backend: motion}}
runtime: {{http: {{port: {port}}}}}
sinks: [{{type: jsonl, path: {out}}}]
""")
        proc = subprocess.run([sys.executable, "-m", "streamlens", "run", str(path)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        check = subprocess.run([sys.executable, "-m", "streamlens", "validate", str(path)], cwd=REPO,
                               capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and str(port) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, \
        proc.stderr
    assert out.read_text() == '{"last": "run"}\n'
    assert check.returncode == 2 and str(port) in check.stderr


def test_stream_up_is_one_while_a_stream_delivers_and_lost_is_by_cause(tmp_path):
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true, loop: true}}]
detector: {{backend: motion}}
tracker: none
runtime: {{http: {{port: 0}}}}
""")
    pipeline = streamlens.Pipeline.from_yaml(path)
    seen: dict[str, str] = {}

    def scrape(p) -> None:
        if p.http_port is None or "running" in seen:
            if "running" in seen:
                p.stop()
            return
        if p.stats["cam1"].frames >= 10:
            with urllib.request.urlopen(f"http://127.0.0.1:{p.http_port}/metrics", timeout=5) as r:
                seen["running"] = r.read().decode()

    report = pipeline.run(on_tick=scrape, tick_s=0.05)
    assert report.exit_code == 130
    text = seen["running"]
    assert 'streamlens_stream_up{stream="cam1"} 1.0' in text
    assert 'streamlens_lost_total{cause="inbox",stream="cam1"} 0.0' in text


def test_metric_values_stream_up_losses_and_ends(tmp_path):
    """Cameras report `streaming`, files `running`: both deliver frames; losses by cause, late
    detections and how a stream ended are exported as counted."""
    from prometheus_client import CollectorRegistry, generate_latest

    from streamlens.http.metrics import Collector

    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}}}, {{name: cam2, uri: {SAMPLE}}}, {{name: cam3, uri: {SAMPLE}}}]
detector: {{backend: motion}}
""")
    pipeline = streamlens.Pipeline.from_yaml(path)
    for name, state in (("cam1", "streaming"), ("cam2", "running"), ("cam3", "backing_off")):
        pipeline.stats[name].state = state
    pipeline.stats["cam2"].lost = {"corrupt": 2, "decoder": 0, "inbox": 5, "stale": 0, "shed": 0}
    pipeline.stats["cam2"].discarded_detections = 3
    pipeline.stats["cam3"].reason = "truncated"
    registry = CollectorRegistry()
    registry.register(Collector(pipeline))
    text = generate_latest(registry).decode()
    assert 'streamlens_stream_up{stream="cam1"} 1.0' in text
    assert 'streamlens_stream_up{stream="cam2"} 1.0' in text
    assert 'streamlens_stream_up{stream="cam3"} 0.0' in text
    assert 'streamlens_lost_total{cause="corrupt",stream="cam2"} 2.0' in text
    assert 'streamlens_lost_total{cause="inbox",stream="cam2"} 5.0' in text
    assert 'streamlens_discarded_detections_total{stream="cam2"} 3.0' in text
    assert 'streamlens_stream_ended{reason="truncated",stream="cam3"} 1.0' in text
    assert text.count("streamlens_stream_ended{") == 1  # the others have not ended


def test_a_failing_sink_ends_the_run_while_a_file_waits_for_a_credit(tmp_path, monkeypatch):
    """A file source holding every credit it may when the sink fails: the frames discarded give no
    credit back (and a keyframe still with the detector never comes back), yet the source ends, and
    with it the run."""
    import threading

    from streamlens.detect.motion import MotionDetector

    release = threading.Event()

    class FirstOnly(MotionDetector):  # the first keyframe's detections come back; later ones hang
        calls = 0

        def detect(self, frames):
            FirstOnly.calls += 1
            if FirstOnly.calls > 1:
                release.wait(60)
            return super().detect(frames)

    monkeypatch.setattr(runtime, "build_detector", lambda cfg, *_: FirstOnly())
    monkeypatch.setattr(runtime, "ABORT_JOIN_S", 1.0)  # the hung detector is not waited for long
    path = write_pipeline(tmp_path, f"""
sources: [{{name: cam1, uri: {SAMPLE}}}]
detector: {{backend: motion, max_batch: 1}}
keyframes: {{interval: 2}}
tracker: none
""")

    class Failing(Sink):
        name, inline = "failing", True  # written on the engine's thread: the engine waits in it

        def write(self, item, message, payload):
            if message["type"] != "frame" or message["frame"] < 1:
                return
            deadline = time.monotonic() + 30  # until the source waits for a credit
            while pipeline._credits.held("cam1") < pipeline._credits.limit and time.monotonic() < deadline:
                time.sleep(0.01)
            raise streamlens.SinkError("failing: the disk is gone")

    pipeline = streamlens.Pipeline.from_yaml(path, sinks=[Failing()])
    reports = []
    runner = threading.Thread(target=lambda: reports.append(pipeline.run()), daemon=True)
    runner.start()
    try:
        runner.join(60)
        assert not runner.is_alive(), "the run hung with its file source waiting for a credit"
    finally:
        release.set()
    assert reports[0].status == "failed" and reports[0].error == "failing: the disk is gone"
