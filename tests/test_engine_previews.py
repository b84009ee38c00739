"""The live page with several engines (streamlens/scale/preview.py): each engine answers for its own
frames on a socket of its own, and the supervisor's page asks the engine that has the stream.
Here with real ZeroMQ sockets (ipc files) between `PreviewServer`s and an `EnginePreviews` in this
process, and with `streamlens run` and two engine processes, one of them killed."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from .conftest import REPO
from .test_web_page import wait_for

SAMPLE = REPO / "samples" / "traffic.mp4"


def _frame(stream: str, seq: int, width: int = 64):
    from streamlens.frame import Frame, FrameResult, empty_detections
    from streamlens.wire.schema import frame_message

    image = np.full((36, width, 3), 10 * seq % 250, np.uint8)
    result = FrameResult(Frame(stream, seq, seq / 30, 1.0, image), seq, True, empty_detections())
    return result, frame_message(result)


def _event(stream: str, seq: int, result, shot: bytes | None):
    from streamlens.frame import Event, Snapshot
    from streamlens.wire.schema import event_message

    event = Event(stream, seq, {"event": "object_start", "object": {"id": seq}}, result,
                  Snapshot(shot, "crop", seq) if shot is not None else None)
    return event, event_message(event)


@pytest.fixture()
def engines(tmp_path):
    """Two engines' preview servers (cam1 in engine 0, cam2 in engine 1) and the supervisor's view
    of them; the servers are closed and made anew by the test as it needs."""
    from streamlens.scale.preview import EnginePreviews, PreviewServer

    at = {0: f"ipc://{tmp_path}/0-preview", 1: f"ipc://{tmp_path}/1-preview"}
    servers = [PreviewServer(at[0]), PreviewServer(at[1])]
    for server in servers:
        server.open()
    owner = {"cam1": 0, "cam2": 1}
    view = EnginePreviews(lambda name: at.get(owner.get(name)), lambda: dict(at), fresh_s=0)
    yield view, servers, at
    view.close()
    for server in servers:
        server.close()


def test_the_page_reads_each_streams_frames_from_the_engine_that_has_it(engines):
    import cv2

    view, servers, _ = engines
    assert view.preview_jpeg("cam1") is None and view.newest_message("cam2") is None  # no frame yet
    for seq in range(3):
        servers[0].write(*_frame("cam1", seq), b"")
    servers[1].write(*_frame("cam2", 7, width=96), b"")
    seq, jpeg, message = view.preview_jpeg("cam1")
    assert (seq, message["stream"], message["seq"]) == (2, "cam1", 2)
    assert cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR).shape == (36, 64, 3)
    assert view.annotated_jpeg("cam2")[0] == 7
    assert view.newest_message("cam2")["width"] == 96 and view.geometry("cam2") == ([], [])
    assert view.message("cam1", 1)["seq"] == 1 and view.message("cam1", 9) is None
    assert view.preview_jpeg("nope") is None and view.message("nope", 0) is None  # no engine has it


def test_events_are_numbered_once_over_every_engine_and_go_on_past_an_engine_started_again(engines):
    from streamlens.scale.preview import PreviewServer

    view, servers, at = engines
    result, message = _frame("cam1", 0)
    servers[0].write(result, message, b"")
    servers[0].write(*_event("cam1", 0, result, b"\xff\xd8one"), b"")
    servers[1].write(*_event("cam2", 0, _frame("cam2", 0)[0], None), b"")
    first = view.events_since(0)
    assert [(i, m["stream"], shot) for i, m, shot in first] == [(1, "cam1", True), (2, "cam2", False)]
    assert view.snapshot(1) == b"\xff\xd8one" and view.snapshot(2) is None
    assert view.shot_of(first[0][1]) == 1 and view.event(2) == first[1][1]

    servers[1].write(*_event("cam2", 1, _frame("cam2", 1)[0], b"\xff\xd8two"), b"")
    servers[0].close()  # engine 0 dies; started again it numbers its own events from 1
    servers[0] = PreviewServer(at[0])
    servers[0].open()
    result, message = _frame("cam1", 5)
    servers[0].write(result, message, b"")
    servers[0].write(*_event("cam1", 1, result, b"\xff\xd8new"), b"")
    after = view.events_since(2)
    assert [(i, m["stream"], m["seq"]) for i, m, _ in after] == [(3, "cam1", 1), (4, "cam2", 1)]
    assert view.snapshot(4) == b"\xff\xd8two" and view.snapshot(3) == b"\xff\xd8new"
    assert view.snapshot(1) is None  # the snapshot of engine 0's first run went with it
    assert [i for i, _, _ in view.events_since(0)] == [1, 2, 3, 4]  # nothing numbered twice


def test_an_engine_that_does_not_answer_costs_only_its_own_streams(engines, monkeypatch):
    """An engine stopped (here: never answering) gives no frame and no events, the others do; while
    one question waits on it, every other about its streams gets nothing at once, without asking."""
    import streamlens.scale.preview as preview_module

    view, servers, _ = engines
    servers[0].write(*_frame("cam1", 0), b"")
    servers[1].write(*_frame("cam2", 0), b"")
    servers[1].write(*_event("cam2", 0, _frame("cam2", 0)[0], None), b"")
    servers[0]._done.set()  # engine 0 stops answering (as a process stopped by SIGSTOP would)
    servers[0]._thread.join()
    assert view.preview_jpeg("cam1") is None and view.newest_message("cam1") is None
    assert view.preview_jpeg("cam2")[0] == 0
    assert [m["stream"] for _, m, _ in view.events_since(0)] == ["cam2"]
    monkeypatch.setattr(preview_module, "ASK_TIMEOUT_S", 300)  # the next question waits until answered below
    answered = []
    probe = threading.Thread(target=lambda: answered.append(view.message("cam1", 0)))
    probe.start()
    wait_for(lambda: view._probing, 30, "the question to the silent engine")
    assert [view.message("cam1", 0) for _ in range(20)] == [None] * 20
    sock, asked = servers[0]._sock, []  # what engine 0 was asked, read here in its place
    while sock.poll(30_000 if len(asked) < 4 else 0):
        asked.append(sock.recv_multipart())
    assert [parts[-2] for parts in asked] == [b"preview", b"stream", b"events", b"message"]
    sock.send_multipart([*asked[-1][:-2], json.dumps({"message": {"seq": 0}}).encode(), b""])  # the probe's answer
    probe.join()
    assert answered == [{"seq": 0}]
    servers[1].write(*_frame("cam2", 1), b"")
    assert view.preview_jpeg("cam2")[0] == 1  # the other engine: asked as ever


def _get(url: str) -> tuple[int, dict, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@contextlib.contextmanager
def two_engines(tmp_path, camera: str | None = None):
    """`streamlens run` of the live page's test pipeline (cam1, a looping live copy of the sample, in
    engine 0; cam2, another copy or the RTSP camera at URL `camera`, in engine 1) with `workers: 2`
    and the page on a free port: (the process, the base URL); ended when the block ends."""
    from .test_web_page import pipeline_file
    from .test_workers import free_port

    port = free_port()
    if camera is None:
        path = pipeline_file(tmp_path)
    else:
        path = pipeline_file(tmp_path, streams=("cam1",), more=f"\n  - {{name: cam2, uri: '{camera}', transport: tcp}}")
    path.write_text(path.read_text().replace("queue_size: 64", "queue_size: 64\n  workers: 2")
                    .replace("port: 0", f"port: {port}"))
    run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield run, f"http://127.0.0.1:{port}"
    finally:
        run.terminate()
        try:
            run.wait(60)
        except subprocess.TimeoutExpired:
            run.kill()


def test_the_page_of_two_engines_shows_every_streams_frames_and_goes_on_past_a_killed_engine(tmp_path):
    """`streamlens run` with `workers: 2`, cam2 a camera of a real RTSP server (GStreamer's) decoded in
    its worker process, as cameras are by default: the API serves each stream's frames, results and
    events from its engine (the supervisor without OpenCV or numba: it draws and tracks nothing);
    engine 1 killed (with its camera's decode worker), cam2's frames come back from the engine
    started again, with a later `seq`, and the events go on being numbered without a repeat."""
    import cv2

    from .rtsp_server import GstRtspServer, gst_missing
    from .test_workers import engines as engine_processes

    def drawing_libraries(pid: int) -> set[str]:  # OpenCV's and numba's shared libraries mapped by `pid`
        with open(f"/proc/{pid}/maps") as maps:
            return {name for line in maps for name in ("cv2", "llvmlite") if f"/{name}/" in line}

    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    with GstRtspServer({"cam2": SAMPLE}, tmp_path) as server, two_engines(tmp_path, server.url("cam2")) as (run, base):
        def frame(stream: str, after: int = -1):
            try:
                code, headers, body = _get(f"{base}/api/streams/{stream}/preview.jpg")
            except urllib.error.URLError:  # not listening yet
                return None
            if code != 200 or int(headers["X-Streamlens-Seq"]) <= after:
                return None
            return int(headers["X-Streamlens-Seq"]), json.loads(headers["X-Streamlens-Result"]), body

        seen = {s: wait_for(lambda s=s: frame(s), 90, f"a frame of {s}") for s in ("cam1", "cam2")}
        for stream, (seq, message, jpeg) in seen.items():
            assert (message["stream"], message["seq"]) == (stream, seq)
            assert cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR).shape == (360, 640, 3)
            assert json.loads(_get(f"{base}/api/streams/{stream}/result?seq={seq}")[2]) == message
        code, headers, body = _get(f"{base}/api/streams/cam2/frame.jpg")
        assert code == 200 and cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR).shape == (360, 640, 3)
        # the engines draw and track; the supervisor that serves their frames loads neither library
        assert drawing_libraries(run.pid) == set()
        assert all(drawing_libraries(p.pid) == {"cv2", "llvmlite"} for p in engine_processes(run.pid))
        listed = json.loads(_get(f"{base}/api/streams")[2])["streams"]
        assert [(s["name"], s["width"], s["lines"][0]["name"]) for s in listed] == [("cam1", 640, "gate"),
                                                                                   ("cam2", 640, "gate")]

        def events_of_both():
            found = json.loads(_get(f"{base}/api/events?since=0")[2])
            return found if {e["event"]["stream"] for e in found} == {"cam1", "cam2"} else None

        before = wait_for(events_of_both, 60, "events of both engines")
        shot = next(e for e in before if e["has_snapshot"])
        code, _, body = _get(f"{base}/api/events/{shot['index']}/snapshot.jpg")
        assert code == 200 and len(body) == shot["event"]["snapshot"]["bytes"]

        last = frame("cam2") or seen["cam2"]
        engine_processes(run.pid)[1].kill()  # engine 1: cam2
        again = wait_for(lambda: frame("cam2", after=last[0]), 90, "cam2's frames from its engine started again")
        assert again[1]["seq"] == again[0] > last[0]

        def events_after_the_restart():
            found = json.loads(_get(f"{base}/api/events?since={before[-1]['index']}")[2])
            return found if any(e["event"]["stream"] == "cam2" for e in found) else None

        later = wait_for(events_after_the_restart, 90, "events of cam2 after the restart")
        indices = [e["index"] for e in json.loads(_get(f"{base}/api/events?since=0")[2])]
        assert indices == sorted(set(indices)) and later[0]["index"] > before[-1]["index"]
        assert run.poll() is None, run.stderr.read()


def test_a_stopped_engine_flooded_with_viewers_costs_the_other_engines_stream_nothing(tmp_path):
    """`streamlens run` with `workers: 2`; engine 1 (cam2) stopped with SIGSTOP while 64 viewers at
    once ask for cam2's frame, result and the stream list, over and over: cam1's frames go on
    reaching the page, /healthz answers; once the engine goes on, cam2's frames come back."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from .test_workers import engines as engine_processes

    with two_engines(tmp_path) as (run, base):
        def seq(stream: str) -> int | None:
            try:
                code, headers, _ = _get(f"{base}/api/streams/{stream}/preview.jpg")
            except OSError:  # not listening yet, or a flooded socket: asked again
                return None
            return int(headers["X-Streamlens-Seq"]) if code == 200 else None

        def hammer(i: int) -> None:
            for route in ("/api/streams/cam2/preview.jpg", f"/api/streams/cam2/result?seq={i}", "/api/streams",
                          "/api/streams/cam2/frame.jpg"):
                try:
                    _get(base + route)
                except OSError:
                    pass

        before = {s: wait_for(lambda s=s: seq(s), 90, f"a frame of {s}") for s in ("cam1", "cam2")}
        stopped = engine_processes(run.pid)[1]
        stopped.send_signal(signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(64) as pool:
                flood = [pool.submit(hammer, i) for i in range(256)]
                after = wait_for(lambda: (s := seq("cam1")) is not None and s > before["cam1"] + 10 and s, 90,
                                 "cam1's frames going on while engine 1 is stopped and flooded")
                assert _get(base + "/healthz")[0] == 200
                for future in flood:
                    future.result()
        finally:
            stopped.send_signal(signal.SIGCONT)
        assert after > before["cam1"] + 10
        wait_for(lambda: (s := seq("cam2")) is not None and s > before["cam2"], 90, "cam2's frames once it goes on")
        assert run.poll() is None, run.stderr.read()
