"""`runtime.workers: N`: the streams of one pipeline over N engine processes look like one pipeline
to its users (the same results, one ZeroMQ endpoint, one /metrics), and an engine that dies is
restarted with its cameras, whose `seq` goes on past what was published."""

from __future__ import annotations

import http.server
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
import zmq

from streamlens.wire.keys import curve_available

from .conftest import REPO, streamlens
from .test_pipeline_run import read_jsonl, write_pipeline

SAMPLE = REPO / "samples" / "traffic.mp4"  # 300 frames, 640x360


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def frame_subscriber(ctx: zmq.Context, port: int, *topics: bytes) -> zmq.Socket:
    """A SUB socket on 127.0.0.1:`port` that never drops (no receive limit), subscribed to `topics`."""
    sub = ctx.socket(zmq.SUB)
    sub.rcvhwm = 0
    sub.connect(f"tcp://127.0.0.1:{port}")
    for topic in topics or (b"frame.",):
        sub.subscribe(topic)
    return sub


def run(path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamlens", "run", "-q", *args, str(path)],
                          capture_output=True, text=True, timeout=timeout)


def files_pipeline(tmp_path, workers: int, sinks: str) -> Path:
    path = tmp_path / f"w{workers}.yaml"
    path.write_text(f"""
sources:
  - {{uri: {SAMPLE}}}
  - {{uri: {SAMPLE}, max_fps: 10}}
  - {{uri: {SAMPLE}, name: third}}
detector: {{backend: motion}}
runtime: {{workers: {workers}}}
sinks: {sinks}
""")
    return path


def by_stream(lines: list[dict]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for m in lines:
        if m["type"] == "frame":
            out.setdefault(m["stream"], []).append(
                (m["seq"], m["frame"], m["keyframe"], [(o["label"], o["box"]) for o in m["objects"]]))
    return out


def test_two_engines_write_what_one_does(tmp_path):
    """Files over two engines: the jsonl file (written once, by the supervisor) holds the same results
    per stream as with one engine; every stream ends with its eos; video files per stream. (Every
    frame a keyframe: each engine staggers its own streams' keyframes, so with an interval their
    phases, and the boxes between keyframes, would differ.)"""
    found = {}
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        path = files_pipeline(tmp_path, workers, f"[{{type: jsonl, path: {out}/r.jsonl}}, "
                                                 f"{{type: video, path: '{out}/{{stream}}.mp4'}}]")
        proc = run(path)
        assert proc.returncode == 0, proc.stderr
        lines = read_jsonl(out / "r.jsonl")
        assert sorted(m["stream"] for m in lines if m["type"] == "eos") == ["cam1", "cam2", "third"]
        assert sorted(p.name for p in out.glob("*.mp4")) == ["cam1.mp4", "cam2.mp4", "third.mp4"]
        found[workers] = by_stream(lines)
    assert {k: len(v) for k, v in found[2].items()} == {"cam1": 300, "cam2": 100, "third": 300}
    assert found[2] == found[1]


def receive_run(path, sock: zmq.Socket) -> tuple[dict[str, list[int]], set[str]]:
    """Run `streamlens run -q path` to its end, reading `sock` meanwhile: each stream's frame seqs
    and the streams whose eos came (until all three have)."""
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seqs: dict[str, list[int]] = {}
    ended: set[str] = set()
    try:
        deadline = time.monotonic() + 240
        while len(ended) < 3 and time.monotonic() < deadline:
            if sock.poll(1000):
                m = json.loads(sock.recv_multipart()[1])
                if m["type"] == "eos":
                    ended.add(m["stream"])
                elif m["type"] == "frame":
                    seqs.setdefault(m["stream"], []).append(m["seq"])
        assert proc.wait(120) == 0, proc.stderr.read()
    finally:
        proc.kill()
    return seqs, ended


ALL_FRAMES = {"cam1": list(range(300)), "cam2": list(range(100)), "third": list(range(300))}


def test_subscribers_see_every_engine_on_one_endpoint(tmp_path):
    """One zmq endpoint for all engines: a subscriber that was there first gets every frame of every
    stream, gapless, and each stream's eos."""
    port = free_port()
    path = files_pipeline(tmp_path, 2, f"[{{type: zmq, endpoint: 'tcp://127.0.0.1:{port}', hwm: 100000, "
                                       f"wait_subscribers: 1, wait_timeout_s: 60}}]")
    ctx = zmq.Context()
    sub = frame_subscriber(ctx, port, b"frame.", b"eos.")
    try:
        seqs, ended = receive_run(path, sub)
    finally:
        sub.close(0)
        ctx.term()
    assert ended == {"cam1", "cam2", "third"} and seqs == ALL_FRAMES


def command_line(process: psutil.Process) -> str:
    """The process's command line, "" once it has ended (it may, between listing and reading)."""
    try:
        return " ".join(process.cmdline())
    except (psutil.Error, OSError):
        return ""


def engines(pid: int) -> list[psutil.Process]:
    """The engine processes of the run `pid`, oldest first (engine 0 first)."""
    found = [p for p in psutil.Process(pid).children()
             if "spawn_main" in (line := command_line(p)) and "resource_tracker" not in line]

    def started(p: psutil.Process) -> float:
        try:
            return p.create_time()
        except psutil.Error:
            return float("inf")

    return sorted(found, key=started)


def test_a_killed_engine_comes_back_with_its_cameras_and_the_others_lose_nothing(tmp_path):
    """Three live streams over two engines, /metrics for all. SIGKILL the engine of cam2: cam2
    delivers again, its seq going on past what was published (never a repeat); cam1 and third (the
    other engine: 0) lose nothing. Ctrl-C then ends every process."""
    port, http = free_port(), free_port()
    path = write_pipeline(tmp_path, f"""
sources:
  - {{uri: {SAMPLE}, live: true, loop: true}}
  - {{uri: {SAMPLE}, live: true, loop: true}}
  - {{uri: {SAMPLE}, live: true, loop: true, name: third}}
detector: {{backend: motion}}
keyframes: {{interval: 3}}
runtime: {{workers: 2, http: {{port: {http}}}}}
sinks: [{{type: zmq, endpoint: 'tcp://127.0.0.1:{port}', hwm: 100000}}]
""")
    ctx = zmq.Context()
    sub = frame_subscriber(ctx, port)
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seqs: dict[str, list[int]] = {"cam1": [], "cam2": [], "third": []}

    def receive_until(condition, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not condition() and time.monotonic() < deadline:
            if sub.poll(500):
                m = json.loads(sub.recv_multipart()[1])
                seqs[m["stream"]].append(m["seq"])
        assert condition(), {k: len(v) for k, v in seqs.items()}

    try:
        receive_until(lambda: all(len(v) >= 30 for v in seqs.values()), 120)
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        for name in seqs:
            assert f'streamlens_frames_total{{stream="{name}"}}' in metrics
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=10) as r:
            assert r.status == 200
        first, second = engines(proc.pid)
        second.kill()  # engine 1: cam2
        killed_at = len(seqs["cam2"])
        receive_until(lambda: len(seqs["cam2"]) > killed_at and seqs["cam2"][-1] > seqs["cam2"][killed_at - 1] + 30
                      and len(seqs["cam1"]) > killed_at + 60, 120)
        after = engines(proc.pid)
        assert len(after) == 2 and after[0].pid == first.pid and after[1].pid != second.pid
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
        stderr = proc.stderr.read()
        assert "engine 1 (cam2) died (killed by signal 9); restarting it in 1 s (restart 1)" in stderr, stderr
        # started again, it was told to go at once, not left to its own wait for engines long built
        assert "were not built within" not in stderr, stderr
        assert not [p for p in (first, *after) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        proc.kill()
        sub.close(0)
        ctx.term()
    cam2 = seqs["cam2"]
    # never a repeat, never back: the new engine goes on from the last seq the old one published
    # (a message published but not yet sent when the engine died would show as a gap)
    assert all(b > a for a, b in zip(cam2, cam2[1:])), [(a, b) for a, b in zip(cam2, cam2[1:]) if b <= a]
    for name in ("cam1", "third"):
        s = seqs[name]
        assert s == list(range(s[0], s[0] + len(s))), name  # the other engine lost nothing


def test_the_streams_of_an_engine_not_running_when_the_run_ends_still_end_in_every_sink(tmp_path):
    """Ctrl-C just after an engine was killed: it is not started again (the run is ending), so it
    sends no `eos`. The supervisor sends one for each of its streams, in the zmq sink and the JSONL
    file alike: reason `stopped`, `seq` past every frame the stream published; every other stream
    ends once, from its own engine."""
    port = free_port()
    path = write_pipeline(tmp_path, f"""
sources:
  - {{uri: {SAMPLE}, live: true, loop: true}}
  - {{uri: {SAMPLE}, live: true, loop: true}}
detector: {{backend: motion}}
runtime: {{workers: 2}}
sinks:
  - {{type: zmq, endpoint: 'tcp://127.0.0.1:{port}', hwm: 100000}}
  - {{type: jsonl, path: {tmp_path}/out.jsonl}}
""")
    ctx = zmq.Context()
    sub = frame_subscriber(ctx, port, b"frame.", b"eos.")
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got: dict[str, list[dict]] = {"cam1": [], "cam2": []}

    def receive_until(condition, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not condition() and time.monotonic() < deadline:
            if sub.poll(500):
                m = json.loads(sub.recv_multipart()[1])
                got[m["stream"]].append(m)
        assert condition(), {k: len(v) for k, v in got.items()}

    try:
        receive_until(lambda: all(len(v) >= 20 for v in got.values()), 120)
        engines(proc.pid)[1].kill()  # engine 1: cam2; Ctrl-C before its restart's wait (1 s) is over
        proc.send_signal(signal.SIGINT)
        receive_until(lambda: all(v[-1]["type"] == "eos" for v in got.values()), 60)
        assert proc.wait(60) == 130
    finally:
        proc.kill()
        stderr = proc.stderr.read()
        sub.close(0)
        ctx.term()
    lines = read_jsonl(tmp_path / "out.jsonl")
    for name, messages in got.items():
        for where, seen in (("zmq", messages), ("jsonl", [m for m in lines if m["stream"] == name])):
            ends = [m for m in seen if m["type"] == "eos"]
            assert len(ends) == 1 and ends[0]["reason"] == "stopped", (name, where, ends, stderr[-2000:])
            frames = [m["seq"] for m in seen if m["type"] == "frame"]
            assert ends[0]["seq"] > max(frames), (name, where)
    assert "Traceback" not in stderr


def test_a_file_whose_engine_dies_ends_with_an_error_not_a_repeat(tmp_path):
    """A file is not read again by a restarted engine (its output would repeat): its stream ends with
    an error naming it, the other engine's stream goes on, and the run's exit code says it failed."""
    path = write_pipeline(tmp_path, f"""
sources:
  - {{uri: {SAMPLE}, loop: true}}
  - {{uri: {SAMPLE}, loop: true}}
detector: {{backend: motion}}
runtime: {{workers: 2}}
sinks: [{{type: jsonl, path: {tmp_path}/out.jsonl}}]
""")
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(engines(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        engines(proc.pid)[1].kill()  # engine 1: cam2
        while len(engines(proc.pid)) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 1
        stderr = proc.stderr.read()
    finally:
        proc.kill()
    assert f"streamlens: error: cam2: {SAMPLE}: its engine 1 died (killed by signal 9)" in stderr, stderr
    assert "restarting it" not in stderr  # an engine of files alone is never started again
    ends = {m["stream"]: m for m in read_jsonl(tmp_path / "out.jsonl") if m["type"] == "eos"}
    assert list(ends) == ["cam1"] and ends["cam1"]["reason"] == "stopped"


def test_a_push_consumer_gets_every_result_of_every_engine(tmp_path):
    """A zmq sink in mode push over two engines: one PULL consumer, bound by the supervisor, receives
    every frame of every stream and each eos; nothing is dropped while it reads."""
    port = free_port()
    path = files_pipeline(tmp_path, 2, f"[{{type: zmq, mode: push, endpoint: 'tcp://127.0.0.1:{port}'}}]")
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.connect(f"tcp://127.0.0.1:{port}")
    try:
        seqs, ended = receive_run(path, pull)
    finally:
        pull.close(0)
        ctx.term()
    assert ended == {"cam1", "cam2", "third"} and seqs == ALL_FRAMES


@pytest.mark.skipif(not curve_available(), reason="this libzmq has no CurveZMQ support")
def test_curve_applies_on_the_endpoint_the_supervisor_binds(tmp_path):
    """CurveZMQ with two engines: the supervisor's endpoint takes the authorized client's key, which
    then receives every frame of every stream and their three eos (703 messages; not --until-eos:
    one engine's streams may all end before the other's first frame arrives)."""
    keys = tmp_path / "keys"
    assert streamlens("keygen", str(keys)).returncode == 0
    port = free_port()
    path = files_pipeline(tmp_path, 2, f"[{{type: zmq, endpoint: 'tcp://127.0.0.1:{port}', hwm: 100000, "
                                       f"wait_subscribers: 1, wait_timeout_s: 60, curve: {{server_secret: "
                                       f"{keys}/server.key_secret, authorized: {keys}/authorized}}}}]")
    listener = subprocess.Popen([sys.executable, "-m", "streamlens", "subscribe", f"tcp://127.0.0.1:{port}",
                                 "--count", "703", "--topic", "frame.", "--topic", "eos.", "--server-key",
                                 str(keys / "server.key"), "--client-key", str(keys / "client.key_secret")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc = run(path)
        out, err = listener.communicate(timeout=120)
    finally:
        listener.kill()
    assert proc.returncode == 0, proc.stderr
    frames = [json.loads(line) for line in out.splitlines()]
    per_stream = {name: [m["seq"] for m in frames if m["stream"] == name and m["type"] == "frame"]
                  for name in ("cam1", "cam2", "third")}
    assert per_stream == ALL_FRAMES, err


def test_events_of_every_engine_reach_the_file(tmp_path):
    """Analytics with two engines: each stream's events reach the one jsonl file, in order, with a
    gapless event seq per stream, as with one engine."""
    found = {}
    for workers in (1, 2):
        out = tmp_path / f"e{workers}.jsonl"
        path = tmp_path / f"a{workers}.yaml"
        path.write_text(f"""
sources: [{{uri: {SAMPLE}}}, {{uri: {SAMPLE}, name: other}}]
detector: {{backend: motion}}
runtime: {{workers: {workers}}}
analytics: {{lines: [{{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}}]}}
sinks: [{{type: jsonl, path: {out}}}]
""")
        assert run(path).returncode == 0
        events = [m for m in read_jsonl(out) if m["type"] == "event"]
        found[workers] = {name: [(m["seq"], m["event"], m["frame"]) for m in events if m["stream"] == name]
                          for name in ("cam1", "other")}
    for name, events in found[2].items():
        assert events and [seq for seq, _, _ in events] == list(range(len(events))), name
    assert found[2] == found[1]


def test_engines_of_one_machine_share_its_cores():
    """Each engine's onnxruntime gets cores / engines threads, unless the file sets `threads`."""
    import os

    from streamlens.config import parse_pipeline
    from streamlens.scale.supervisor import Supervisor

    model = REPO / "pipelines" / "quickstart.yaml"  # any existing file: validation only checks it is there
    for threads, expected in ((None, max(1, (os.cpu_count() or 1) // 2)), (3, 3)):
        detector = {"backend": "onnx", "model": str(model), **({"threads": threads} if threads else {})}
        data = {"sources": [{"uri": str(SAMPLE)}, {"uri": str(SAMPLE)}], "detector": detector,
                "runtime": {"workers": 2}}
        supervisor = Supervisor(parse_pipeline(data, REPO / "p.yaml"))
        configs = [supervisor._engine_config(engine) for engine in supervisor._engines]
        shutil.rmtree(supervisor._dir)  # never run: its folder for sockets goes now
        assert [c.detector.threads for c in configs] == [expected, expected]
        assert [len(c.sources) for c in configs] == [1, 1] and configs[0].runtime.workers == 1


def test_a_supervisor_offers_the_http_server_all_a_pipeline_does():
    """The HTTP server reads either run as a `RunView` (it may not import them): both have every
    member of it."""
    from streamlens import Pipeline
    from streamlens.config import parse_pipeline
    from streamlens.http.run_view import RunView
    from streamlens.scale.supervisor import Supervisor

    data = {"sources": [{"uri": str(SAMPLE)}, {"uri": str(SAMPLE)}], "detector": {"backend": "motion"},
            "runtime": {"workers": 2}}
    supervisor = Supervisor(parse_pipeline(data, REPO / "p.yaml"))
    shutil.rmtree(supervisor._dir)  # never run: its folder for sockets goes now
    pipeline = Pipeline(parse_pipeline(data, REPO / "p.yaml"))
    members = {*RunView.__annotations__, *(name for name in vars(RunView) if not name.startswith("_"))}
    assert {"stats", "stopping", "queue_depth", "control_of", "preview"} <= members
    for run in (pipeline, supervisor):
        assert [name for name in sorted(members) if not hasattr(run, name)] == [], type(run).__name__
        assert len(run.stats) == 2


def test_a_webhook_and_snapshots_work_through_two_engines_as_through_one(tmp_path):
    """A webhook sink with two engines is written by the supervisor: it posts every event of both
    engines' streams, each stream's in order, the same as the jsonl file holds; events with a
    snapshot reach the file with their metadata whatever engine made them."""
    from .test_webhook_sink import Hook, _Handler

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.hook = hook = Hook()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "e.jsonl"
        path = tmp_path / "hook.yaml"
        path.write_text(f"""
sources: [{{uri: {SAMPLE}}}, {{uri: {SAMPLE}, name: other}}]
detector: {{backend: motion}}
runtime: {{workers: 2}}
analytics: {{lines: [{{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}}], snapshots: {{events: [object_end]}}}}
sinks:
  - {{type: jsonl, path: {out}}}
  - {{type: webhook, url: 'http://127.0.0.1:{server.server_address[1]}/hook'}}
""")
        done = run(path)
        assert done.returncode == 0, done.stderr
        events = [m for m in read_jsonl(out) if m["type"] == "event"]
        posted = [json.loads(r["body"]) for r in hook.wait_for(len(events))]
    finally:
        server.shutdown()
        server.server_close()
    assert {m["stream"] for m in events} == {"cam1", "other"}
    for name in ("cam1", "other"):
        assert [m for m in posted if m["stream"] == name] == [m for m in events if m["stream"] == name]
    assert any("snapshot" in m and m["snapshot"]["bytes"] > 0 for m in events)


def test_by_default_a_file_of_several_streams_runs_one_engine_per_core_one_per_two_on_a_gpu(monkeypatch):
    """`runtime.workers` defaults to auto: one engine per CPU core with the detector on the CPU (two
    engines did as well as one or better at every load measured on two cores: docs/scale.md), one
    per two cores with it on a GPU, never more than streams; one stream is always one engine."""
    import os

    from streamlens.config import parse_pipeline
    from streamlens.scale.policy import supervised, worker_count

    model = REPO / "pipelines" / "quickstart.yaml"  # any existing file: validation only checks it is there

    def config(streams: int, **detector):
        data = {"sources": [{"uri": str(SAMPLE), "name": f"s{i}"} for i in range(streams)],
                "detector": detector or {"backend": "motion"}}
        return parse_pipeline(data, REPO / "p.yaml")

    assert config(3).runtime.workers == "auto"
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert [worker_count(config(k)) for k in (1, 2, 3, 8)] == [1, 2, 3, 4]
    assert worker_count(config(8, backend="onnx", model=str(model), device="cpu")) == 4
    assert worker_count(config(8, backend="onnx", model=str(model), device="cuda")) == 2
    assert worker_count(config(8, backend="ultralytics", model=str(model), device="cuda:1")) == 2
    assert not supervised(config(1)) and supervised(config(2))
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert worker_count(config(8)) == 1 and not supervised(config(8))


def test_the_engines_of_a_run_start_their_streams_together(tmp_path):
    """Built one after another, the first engine's streams ran while the next still loaded its model
    and were late behind that load; now each built engine waits, and the supervisor starts their
    streams once every engine is built. The debug log shows it in its causal order: each engine's
    "built" line is written before it tells the supervisor, whose "start" lines come after both."""
    path = files_pipeline(tmp_path, 2, f"[{{type: jsonl, path: {tmp_path}/r.jsonl}}]")
    proc = subprocess.run([sys.executable, "-m", "streamlens", "run", "--debug", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()

    def where(text: str) -> int:
        found = [i for i, line in enumerate(lines) if text in line]
        assert found, f"no line with {text!r} in:\n{proc.stderr[-3000:]}"
        return found[0]

    built = [where(f"engine {i} built; its streams wait for the other engines") for i in (0, 1)]
    started = [where(f"engine {i} built as every engine is: its streams start") for i in (0, 1)]
    assert max(built) < min(started)
    assert {k: len(v) for k, v in by_stream(read_jsonl(tmp_path / "r.jsonl")).items()} == \
        {"cam1": 300, "cam2": 100, "third": 300}


def test_a_built_engine_waits_for_go_and_a_stop_lets_it_end(tmp_path):
    """An engine told to start together calls its `on_ready` once built, before any stream of its
    starts, and publishes nothing until `go`; a stop while it waits ends the run without a frame."""
    from streamlens.config import parse_pipeline
    from streamlens.scale.engine import EngineRun, EngineSpec

    tree = {"sources": [{"uri": str(SAMPLE)}], "detector": {"backend": "motion"},
            "sinks": [{"type": "jsonl", "path": str(tmp_path / "r.jsonl")}]}
    for ending in ("go", "stop"):
        config = parse_pipeline(tree, tmp_path / "p.yaml")
        engine = EngineRun(EngineSpec(0, config, ["cam1"], start_together=True))
        ready, published_at_ready, result = threading.Event(), [], []

        def on_ready(engine=engine, ready=ready, published_at_ready=published_at_ready) -> None:
            published_at_ready.append(engine.snapshot().stats["cam1"].frames)
            ready.set()

        thread = threading.Thread(target=lambda e=engine, r=on_ready, out=result: out.append(e.run(on_ready=r)))
        thread.start()
        assert ready.wait(60), "the engine never said it was built"
        # nothing published yet; that nothing comes while it waits, the "stop" round shows: not a frame
        # in the end, however long it waited
        assert engine.snapshot().stats["cam1"].frames == 0 and published_at_ready == [0]
        engine.go() if ending == "go" else engine.stop()
        thread.join(120)
        assert not thread.is_alive() and result[0][0] == "report", result
        frames = sum(1 for m in read_jsonl(tmp_path / "r.jsonl") if m["type"] == "frame")
        assert frames == (300 if ending == "go" else 0), (ending, frames)


def test_an_engine_never_told_to_go_starts_its_streams_after_its_wait(tmp_path, monkeypatch, caplog):
    """A supervisor that never answers (an engine of the run stuck loading) holds a built engine
    back `START_WAIT_S` at most: then it starts its streams, says so, and delivers every frame."""
    from streamlens.config import parse_pipeline
    from streamlens.scale import engine as engine_module

    monkeypatch.setattr(engine_module, "START_WAIT_S", 0.2)
    tree = {"sources": [{"uri": str(SAMPLE)}], "detector": {"backend": "motion"},
            "sinks": [{"type": "jsonl", "path": str(tmp_path / "r.jsonl")}]}
    engine = engine_module.EngineRun(engine_module.EngineSpec(0, parse_pipeline(tree, tmp_path / "p.yaml"), ["cam1"],
                                                              start_together=True))
    ready = []
    with caplog.at_level("WARNING", logger="streamlens.scale"):
        kind, report = engine.run(on_ready=lambda: ready.append(True))
    assert kind == "report" and report.status == "done" and ready == [True]
    assert "engine 0: the other engines were not built within 0.2 s; starting its streams" in caplog.text
    assert sum(1 for m in read_jsonl(tmp_path / "r.jsonl") if m["type"] == "frame") == 300


def test_the_supervisor_keeps_the_collector_off_what_it_built_while_the_engines_run(tmp_path):
    """The supervisor's forwarders hand every engine's results on while it holds the GIL; a full
    collection walking all it had built (45-94 ms every 2-3 s at indoor K=64) held each message up.
    Once its engines go, what it built is frozen out of those passes; at the run's end it is the
    collector's again, so a process that runs pipelines one after another keeps none of them."""
    import gc

    from streamlens.config import load_pipeline
    from streamlens.scale.supervisor import Supervisor

    frozen = []
    report = Supervisor(load_pipeline(files_pipeline(tmp_path, 2, f"[{{type: jsonl, path: {tmp_path}/r.jsonl}}]"))
                        ).run(on_tick=lambda s: frozen.append(gc.get_freeze_count()))
    assert report.status == "done", report.error
    assert max(frozen) > 1000  # the modules, the config, the sockets
    assert gc.get_freeze_count() == 0
    assert {k: len(v) for k, v in by_stream(read_jsonl(tmp_path / "r.jsonl")).items()} == \
        {"cam1": 300, "cam2": 100, "third": 300}


def test_a_program_that_froze_its_own_heap_keeps_it_frozen_after_a_run(tmp_path):
    """Python gives back frozen objects only all at once: a program embedding streamlens that froze
    its own (`gc.freeze`, as pre-fork servers do) has them still frozen when the run ends."""
    import gc

    from streamlens.config import load_pipeline
    from streamlens.scale.supervisor import Supervisor

    gc.freeze()
    try:
        theirs = gc.get_freeze_count()
        report = Supervisor(load_pipeline(files_pipeline(tmp_path, 2, f"[{{type: jsonl, path: {tmp_path}/r.jsonl}}]"))
                            ).run()
        assert report.status == "done", report.error
        assert theirs > 0 and gc.get_freeze_count() > 0  # still frozen (less what reference counts freed meanwhile)
    finally:
        gc.unfreeze()
