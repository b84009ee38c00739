"""`analytics.clips`: MP4 clips around events from a camera's own packets, with a real RTSP camera
(GStreamer's RTSP server from Debian's packages, fed the shipped sample) and ffprobe to read them:
same codec and size as the camera, covering each event's window, no longer than it by more than a
GOP; written by the worker that reads the camera (a process, and a thread), never the engine; a
folder that cannot be written loses clips, counted and told, never a frame; retention deletes the
oldest first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamlens.sources.clips import prune_clips

from .conftest import REPO
from .rtsp_server import GstRtspServer, gst_missing

SAMPLE = REPO / "samples" / "traffic.mp4"
PRE_S, POST_S = 2.0, 2.0
GOP_S = 1.0  # the sample's key frames are a second apart


@pytest.fixture
def camera(tmp_path):
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    (tmp_path / "gst").mkdir()
    with GstRtspServer({"cam1": SAMPLE}, tmp_path / "gst") as server:
        yield server


def probe(path: Path) -> dict:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_packets", "-show_entries",
                          "stream=codec_name,width,height,nb_read_packets:format=duration", "-of", "json", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    return {**found["streams"][0], "duration": float(found["format"]["duration"])}


def run_camera(tmp_path, server, decode: str, clips_path: str, seconds_of_events: int = 2) -> tuple[list, str]:
    """Run a pipeline on the camera until `seconds_of_events` line crossings have come and their
    clips' windows have passed, then Ctrl-C (or, `server` None, on the sample as a live file, to its
    end); returns (the JSONL's messages, stderr)."""
    pipeline = tmp_path / "p.yaml"
    # a file: paced as a camera, read once (its times start again at each loop), the run ends with it
    uri = f"'rtsp://127.0.0.1:{server.port}/cam1', transport: tcp" if server else f"{SAMPLE}, live: true"
    pipeline.write_text(f"""
sources: [{{name: cam1, uri: {uri}, decode: {decode}}}]
detector: {{backend: motion}}
keyframes: {{interval: 3}}
analytics:
  lines: [{{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}}]
  clips: {{events: [line_cross], pre_s: {PRE_S}, post_s: {POST_S}, path: {clips_path}}}
sinks: [{{type: jsonl, path: {tmp_path / 'out.jsonl'}}}]
""")
    stderr = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(pipeline)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    out = tmp_path / "out.jsonl"

    def messages() -> list[dict]:  # the lines written whole: the sink may be inside the last one
        return [json.loads(line) for line in out.read_text().split("\n")[:-1]] if out.exists() else []

    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and server is not None:
            crossings = [m for m in messages() if m["type"] == "event" and m["event"] == "line_cross"]
            frames = [m for m in messages() if m["type"] == "frame"]
            if len(crossings) >= seconds_of_events and frames and \
                    frames[-1]["pts"] > crossings[seconds_of_events - 1]["pts"] + POST_S + 2 * GOP_S:
                break
            time.sleep(0.5)
        if server is None:
            assert proc.wait(120) == 0, (tmp_path / "stderr.txt").read_text()
        assert proc.poll() in (None, 0), (tmp_path / "stderr.txt").read_text()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.wait(60)
        stderr.close()
    return messages(), (tmp_path / "stderr.txt").read_text()


@pytest.mark.parametrize("decode", ["process", "thread"])
def test_a_crossing_on_a_camera_gives_a_clip_of_its_own_packets(tmp_path, camera, decode):
    check_clips(tmp_path, *run_camera(tmp_path, camera, decode, str(tmp_path / "clips")))


@pytest.mark.parametrize("decode", ["process", "thread"])
def test_a_crossing_in_a_file_gives_a_clip_of_its_packets(tmp_path, decode):
    check_clips(tmp_path, *run_camera(tmp_path, None, decode, str(tmp_path / "clips")))


def check_clips(tmp_path, messages: list[dict], err: str) -> None:
    crossings = [m for m in messages if m["type"] == "event" and m["event"] == "line_cross"]
    assert len(crossings) >= 2, err
    frames = [m for m in messages if m["type"] == "frame"]
    last_pts = frames[-1]["pts"]
    checked = 0
    for event in crossings:
        clip = event["clip"]
        assert clip["start_pts"] == pytest.approx(event["pts"] - PRE_S, abs=1e-5)
        assert clip["end_pts"] == pytest.approx(event["pts"] + POST_S, abs=1e-5)
        path = Path(clip["path"])
        assert path.parent == tmp_path / "clips" / "cam1"
        if clip["end_pts"] + GOP_S > last_pts:
            continue  # its window had not passed when the run was stopped: written with what there was
        assert path.is_file(), (clip, sorted(p.name for p in path.parent.iterdir()))
        found = probe(path)
        assert (found["codec_name"], found["width"], found["height"]) == ("h264", 640, 360)  # the camera's own
        # from the key frame at or before the window's start to the first packet past its end (a clip
        # shared with the next crossing's window goes on to that one's end)
        sharing = [e for e in crossings if e["clip"]["path"] == clip["path"]]
        span = max(e["clip"]["end_pts"] for e in sharing) - min(e["clip"]["start_pts"] for e in sharing)
        assert span <= found["duration"] <= span + GOP_S + 0.2, (found, span)
        checked += 1
    assert checked >= 1
    assert not list((tmp_path / "clips").rglob("*.part"))  # nothing half-written is left
    assert "Traceback" not in err


def test_a_clips_folder_that_cannot_be_written_loses_clips_not_frames(tmp_path, camera):
    (tmp_path / "blocked").write_text("a file where the clips folder should be")
    messages, err = run_camera(tmp_path, camera, "process", str(tmp_path / "blocked" / "clips"))
    crossings = [m for m in messages if m["type"] == "event" and m["event"] == "line_cross"]
    assert len(crossings) >= 2
    assert err.count("cam1: clips are lost") == 1 and "Not a directory" in err, err  # told once
    lost = [m for m in messages if m["type"] == "event" and m["event"] == "clip_lost"]
    assert {m["clip"]["path"] for m in lost} == {c["clip"]["path"] for c in crossings}, (lost, crossings)
    assert all(m["clip"]["lost"] is True and m["clip"]["reason"] == "Not a directory" for m in lost)
    events = [m["seq"] for m in messages if m["type"] == "event"]
    assert events == list(range(events[0], events[0] + len(events)))  # clip_lost events numbered with the rest
    frames = [m["seq"] for m in messages if m["type"] == "frame"]
    assert frames == list(range(frames[0], frames[0] + len(frames)))  # no frame lost to the disk


def test_retention_deletes_the_oldest_clips_first(tmp_path):
    now = time.time()
    for i, (age_days, size) in enumerate([(10, 100), (5, 100), (2, 100), (1, 100)]):
        path = tmp_path / "cam" / f"{i}.mp4"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * size)
        os.utime(path, (now - age_days * 86400, now - age_days * 86400))
    assert prune_clips(tmp_path, 7, None, now=now) == 1  # older than a week
    assert prune_clips(tmp_path, None, 250, now=now) == 1  # then the oldest while over 250 bytes
    assert sorted(p.name for p in (tmp_path / "cam").iterdir()) == ["2.mp4", "3.mp4"]


def test_the_api_serves_an_events_clip_and_the_page_links_it(tmp_path):
    """`/api/events/<n>/clip.mp4` serves the clip an event names (503 until written), the page's event
    list links it; a live looping file with the page in this process."""
    import threading
    import urllib.error
    import urllib.request

    from streamlens.config import load_pipeline
    from streamlens.graph.run.pipeline import Pipeline

    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true, loop: true}}]
detector: {{backend: motion}}
keyframes: {{interval: 3}}
analytics:
  lines: [{{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}}]
  clips: {{events: [line_cross], pre_s: 1, post_s: 1, path: clips}}
runtime: {{http: {{port: 0}}}}
""")
    with Pipeline(load_pipeline(pipeline)) as p:
        runner = threading.Thread(target=p.run, daemon=True)
        runner.start()
        deadline = time.monotonic() + 90
        served = None
        while served is None and time.monotonic() < deadline:
            time.sleep(0.5)
            if p.http_port is None:
                continue
            base = f"http://127.0.0.1:{p.http_port}"
            with urllib.request.urlopen(base + "/api/events", timeout=30) as r:
                events = [e for e in json.loads(r.read()) if "clip" in e["event"]]
            for e in events:
                if Path(e["event"]["clip"]["path"]).is_file():
                    with urllib.request.urlopen(f"{base}/api/events/{e['index']}/clip.mp4", timeout=30) as r:
                        served = (r.headers["Content-Type"], r.read(), Path(e["event"]["clip"]["path"]).read_bytes())
                    break
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{p.http_port}/api/events/999999/clip.mp4", timeout=30)
        p.stop()
        runner.join(60)
    assert served is not None, "no clip was served"
    ctype, body, on_disk = served
    assert ctype == "video/mp4" and body == on_disk and body[4:8] == b"ftyp"
    assert missing.value.code == 404
    assert "/api/events/${index}/clip.mp4" in (REPO / "streamlens" / "http" / "page" / "app.js").read_text()


def test_the_packet_window_holds_pre_s_and_one_gop_in_bounded_memory():
    """A 720p camera at 2 Mbit/s, 30 fps, a key frame every 2 s (key frames 10x a P frame), with
    `pre_s: 5` (kept: 5 s + a live source's margin): at most 2 MB; and any stream at most its cap."""
    from streamlens.sources import CLIP_MARGIN_S
    from streamlens.sources.clips import MAX_WINDOW_BYTES, PacketWindow, _Packet

    fps, gop, rate = 30, 60, 2_000_000 / 8
    p_bytes = rate * gop / fps / (gop - 1 + 10)
    keep = 5.0 + CLIP_MARGIN_S
    window = PacketWindow(keep)
    most = 0
    for i in range(30 * 60):
        key = i % gop == 0
        window.add(_Packet(b"x" * int(p_bytes * (10 if key else 1)), i, i, key, i / fps))
        most = max(most, window.bytes)
        assert window.packets[0].keyframe and window.packets[0].seconds <= i / fps - keep or i / fps < keep
    assert most <= 2.0e6, most
    huge = PacketWindow(60.0, max_bytes=MAX_WINDOW_BYTES)
    for i in range(600):
        huge.add(_Packet(b"x" * 1_000_000, i, i, i % 30 == 0, i / 30))
    assert huge.bytes <= MAX_WINDOW_BYTES + 30 * 1_000_000  # the cap, plus the GOP being read


def test_an_event_later_than_the_margin_widens_the_window_for_the_next_clips(tmp_path):
    """The window keeps `pre_s` plus a margin for the event's way back from the engine; an event
    that comes back later (a loaded machine) makes it keep twice that lag from then on, so the next
    clip starts at the key frame at or before its `pts - pre_s` again."""
    import av

    from streamlens.sources.clips import ClipRecorder

    with av.open(str(SAMPLE)) as container:
        stream = container.streams.video[0]
        plain = ClipRecorder(stream, 2.3)  # without `pre_s`: the window it was given, whatever comes
        plain.request(0.0, 1.0, tmp_path / "plain.mp4")
        plain.close(wait_s=30)
        assert plain.window.keep_s == 2.3
        recorder = ClipRecorder(stream, 2.3, pre_s=2.0, folder=tmp_path)
        try:
            requested = False
            for packet in container.demux(stream):
                recorder.packet(packet)
                if not requested and recorder.newest_s is not None and recorder.newest_s >= 4.0:
                    # an event at 3.0 s, asked for with the newest packet at 4 s: 1 s late, past 0.3 s
                    recorder.request(1.0, 4.0, tmp_path / "late.mp4")
                    requested = True
                    assert recorder.window.keep_s == pytest.approx(2.0 + 2 * (recorder.newest_s - 3.0))
        finally:
            recorder.close(wait_s=30)
    assert recorder.window.keep_s > 2.3


def _unshare_missing(folder: Path) -> str | None:
    """Why a tmpfs cannot be mounted on `folder` in a mount namespace of its own here, or None."""
    try:
        made = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               f"mount -t tmpfs -o size=2m tmpfs '{folder}'"], capture_output=True, text=True,
                              timeout=30)
    except FileNotFoundError:
        return "no unshare command here (util-linux)"
    if made.returncode != 0:
        return f"cannot mount a tmpfs in a mount namespace of its own here: {made.stderr.strip() or 'unshare failed'}"
    return None


def _get(url: str) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.parametrize("workers", [1, 2])
def test_clips_lost_on_a_full_disk_are_counted_told_once_and_marked(tmp_path, workers):
    """Clips into a 2 MB tmpfs (in a mount namespace of its own) that is nearly full: each clip lost
    is counted in /metrics (`streamlens_clips_lost_total`), /api/stats and the summary, logged once
    per stream, its event in the history file says so (`clip.lost`, the reason) and its clip URL
    answers 410 with one line; with two engines the supervisor shows every stream's."""
    import socket

    clips = tmp_path / "clips"
    clips.mkdir()
    missing = _unshare_missing(clips)
    if missing:
        pytest.skip(missing)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    names = ["cam1", "cam2"][:workers]
    sources = ", ".join(f"{{name: {n}, uri: {SAMPLE}, live: true, loop: true}}" for n in names)
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"""
sources: [{sources}]
detector: {{backend: motion}}
keyframes: {{interval: 3}}
analytics:
  lines: [{{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}}]
  clips: {{events: [line_cross], pre_s: 1, post_s: 1, path: {clips}}}
sinks: [{{type: jsonl, path: {tmp_path / 'out.jsonl'}}}]
runtime: {{workers: {workers}, http: {{port: {port}}}, history: {{path: {tmp_path / 'history.db'}}}}}
""")
    # 1.9 MB of the 2 MB taken: a clip or so fits, the others find no space left
    run = (f"mount -t tmpfs -o size=2m tmpfs '{clips}' && head -c 1900k /dev/zero > '{clips}/filler' && "
           f"exec '{sys.executable}' -m streamlens run '{pipeline}'")
    stderr = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", run], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    lost, gone, stats = {}, None, None
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1.0)
            try:
                code, body = _get(base + "/metrics")
            except OSError:  # not listening yet
                continue
            lost = {n: float(line.rsplit(" ", 1)[1]) for n in names for line in body.decode().splitlines()
                    if line.startswith(f'streamlens_clips_lost_total{{stream="{n}"}}')}
            if len(lost) < len(names) or min(lost.values()) < 2:
                continue
            code, body = _get(base + "/api/events")
            marked = [e for e in json.loads(body) if e["event"]["event"] == "line_cross"
                      and e["event"]["clip"].get("lost")]
            if not marked:
                continue
            gone = _get(f"{base}/api/events/{marked[0]['index']}/clip.mp4"), marked[0]["event"]
            stats = json.loads(_get(base + "/api/stats")[1])
            break
        assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.wait(90)
        stderr.close()
    err = (tmp_path / "stderr.txt").read_text()
    assert gone is not None, (lost, err)
    (code, body), event = gone
    assert code == 410 and body.decode().count("\n") == 1, (code, body)
    assert "lost: No space left on device" in body.decode() and event["clip"]["reason"] == "No space left on device"
    assert all(stats["streams"][n]["clips_lost"] >= 2 for n in names), stats
    for n in names:
        assert err.count(f"{n}: clips are lost") == 1, err  # one warning per stream, then counted
        summary = [line for line in err.splitlines() if line.startswith(f"{n}: ") and "clip(s) lost" in line]
        assert len(summary) == 1 and int(summary[0].split()[1]) >= lost[n], err
        assert summary[0].endswith("(the last: No space left on device)"), summary
    assert "Traceback" not in err
    import sqlite3

    with sqlite3.connect(tmp_path / "history.db") as db:  # the marks outlive the run
        marked = db.execute("SELECT COUNT(*) FROM events WHERE event = 'line_cross' AND "
                            "json_extract(message, '$.clip.lost') = 1").fetchone()[0]
        told = db.execute("SELECT COUNT(*) FROM events WHERE event = 'clip_lost'").fetchone()[0]
    assert marked >= len(names) * 2 and told >= len(names) * 2, (marked, told)


def test_the_live_page_marks_kept_events_whose_clip_was_lost():
    """Without a history file the page's own events say so too: a `clip_lost` event marks the kept
    events of its stream with that clip (new messages; the one it was given is left as it was)."""
    from streamlens.http.preview import PreviewSink

    from streamlens.frame import Event

    sink = PreviewSink()

    first = {"type": "event", "stream": "cam1", "seq": 0, "event": "line_cross", "clip": {"path": "c/a.mp4"}}
    other = {"type": "event", "stream": "cam2", "seq": 0, "event": "line_cross", "clip": {"path": "c/a.mp4"}}
    told = {"type": "event", "stream": "cam1", "seq": 1, "event": "clip_lost",
            "clip": {"path": "c/a.mp4", "lost": True, "reason": "No space left on device"}, "events": [0]}
    for message in (first, other, told):
        sink.write(Event(message["stream"], message["seq"], {}, None), message, b"")
    assert sink.event(1)["clip"] == {"path": "c/a.mp4", "lost": True, "reason": "No space left on device"}
    assert sink.event(2)["clip"] == {"path": "c/a.mp4"} and first["clip"] == {"path": "c/a.mp4"}
