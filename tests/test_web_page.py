"""The live page (`runtime.http`, streamlens/http) in a real browser: Debian's headless Chromium
driven by Selenium through /usr/bin/chromedriver (nothing downloaded), against pipelines run in this
process on a thread: two live, paced, looping copies of samples/traffic.mp4 with the motion
detector, a counting line, a zone, snapshots and a JSONL sink (one pipeline and one browser for the
module); one bound off loopback for the token; YOLOX-Nano on the shared highway clip for the
screenshot. Every wait is on a condition, with generous timeouts; nothing compares times."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from .conftest import REPO

SAMPLE = REPO / "samples" / "traffic.mp4"
STREAMS = ("cam1", "cam2")
TOKEN = "t0ken-for-the-page-test"
PASSWORD = "s3cret-Pa55"


def _tool():
    spec = importlib.util.spec_from_file_location("page_screenshot", REPO / "tools" / "page_screenshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = _tool()
wait_for = tool.wait_for


def get(url: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None


def get_once(url: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    """`get` without following a redirect."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def lines_of(path: Path) -> list[dict]:
    """The whole lines of a JSONL file still being written."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def pipeline_file(folder: Path, *, host: str = "127.0.0.1", token_env: str = "STREAMLENS_HTTP_TOKEN",
                  streams=STREAMS, more: str = "") -> Path:
    """Live looping copies of the sample at 10 fps, a line and a zone, snapshots, a JSONL sink, the
    page on a free port. A queue of 64 frames a stream and a budget of 1 s: a busy machine (these
    tests share two cores with a browser) delays frames but drops none, so a drop is the page's."""
    folder.mkdir(parents=True, exist_ok=True)
    sources = "\n".join(f"  - {{name: {s}, uri: {SAMPLE}, live: true, loop: true, max_fps: 10}}" for s in streams)
    sources += more
    path = folder / "pipeline.yaml"
    path.write_text(f"""sources:
{sources}
detector: {{backend: motion}}
keyframes: {{interval: 5}}
tracker: {{motion: kalman}}
analytics:
  lines: [{{name: gate, points: [[0.5, 0.0], [0.5, 1.0]]}}]
  zones: [{{name: road, polygon: [[0.0, 0.35], [1.0, 0.35], [1.0, 0.7], [0.0, 0.7]]}}]
  snapshots: {{events: [object_start, object_end]}}
sinks: [{{type: jsonl, path: {folder / 'results.jsonl'}}}]
runtime:
  queue_size: 64
  budget_ms: 1000
  http: {{host: '{host}', port: 0, preview_fps: 10, token_env: {token_env}, add_folders: ['{SAMPLE.parent}']}}
""")
    return path


@pytest.fixture(scope="module")
def browser():
    missing = tool.browser_missing()
    if missing:
        pytest.skip(missing)
    driver = tool.open_browser()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The module's pipeline, running: (pipeline, base URL, its JSONL file)."""
    folder = tmp_path_factory.mktemp("page")
    with tool.running(pipeline_file(folder)) as pipeline:
        yield pipeline, f"http://127.0.0.1:{pipeline.http_port}", folder / "results.jsonl"


def js(driver, expression: str):
    return driver.execute_script(f"return {expression}")


def errors(driver) -> list[dict]:
    """The browser console's errors since the last call."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def open_page(driver, url: str) -> None:
    """Open `url` with an empty console log: what an earlier page logged while its server went away
    is not this page's error."""
    driver.get("about:blank")
    errors(driver)
    driver.get(url)
    wait_for(lambda: js(driver, "window.streamlens && window.streamlens.ready"), 30, "the page to load its streams")


def pixel_sum(driver, stream: str) -> int:
    return js(driver, f"""(() => {{
        const c = document.querySelector('canvas[data-stream="{stream}"]');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let h = 0;
        for (let i = 0; i < d.length; i += 7) h = (h * 31 + d[i]) | 0;
        return h;
    }})()""")


def test_the_preview_sink_keeps_references_and_bounds_what_it_keeps():
    """`write()` stores references: nothing is converted or encoded until asked; the events' ring
    and their snapshots' bytes are bounded; the frame is never converted in place."""
    from streamlens.frame import Event, Frame, FrameResult, Snapshot, empty_detections
    from streamlens.http.preview import PreviewSink
    from streamlens.pictures import YuvPicture, i420_bytes
    from streamlens.wire.schema import event_message, frame_message

    sink = PreviewSink(results=4, events=3, snapshot_bytes=10)
    picture = YuvPicture(np.full(i420_bytes(64, 36), 128, np.uint8), 64, 36)
    for seq in range(6):
        result = FrameResult(Frame("cam1", seq, seq / 30, 1.0, decoded=picture), seq, False, empty_detections())
        sink.write(result, frame_message(result), b"")
        event = Event("cam1", seq, {"event": "object_start", "object": {"id": seq}}, result,
                      Snapshot(b"x" * 4, "crop", seq) if seq % 2 == 0 else None)
        sink.write(event, event_message(event), b"")
    assert result.frame._image is None and sink._streams["cam1"].preview is None  # nothing made yet
    assert [sink.message("cam1", s) is not None for s in range(6)] == [False, False, True, True, True, True]
    assert [(i, m["seq"], shot) for i, m, shot in sink.events_since(0)] == [(4, 3, False), (5, 4, True), (6, 5, False)]
    assert sink.snapshot(5) == b"xxxx" and sink.snapshot(3) is None  # event 3 is no longer kept
    seq, jpeg, message = sink.preview_jpeg("cam1")
    assert (seq, jpeg[:2], message["seq"]) == (5, b"\xff\xd8", 5) and result.frame._image is None
    assert sink.preview_jpeg("cam1")[1] is jpeg  # one encode per frame, however many ask


def test_the_page_loads_without_errors_and_every_stream_plays(browser, run):
    pipeline, base, _ = run
    errors(browser)  # what an earlier page logged
    open_page(browser, base + "/")
    wait_for(lambda: all((js(browser, f"window.streamlens.frames['{s}']") or 0) >= 3 for s in STREAMS), 60,
             "three frames drawn on each stream's canvas")
    seqs = {s: js(browser, f"window.streamlens.drawn['{s}'].seq") for s in STREAMS}
    pixels = {s: pixel_sum(browser, s) for s in STREAMS}
    wait_for(lambda: all(js(browser, f"window.streamlens.drawn['{s}'].seq") > seqs[s] for s in STREAMS), 30,
             "newer frames on both canvases")
    wait_for(lambda: all(pixel_sum(browser, s) != pixels[s] for s in STREAMS), 30, "both canvases to change")
    wait_for(lambda: all(js(browser, f"window.streamlens.drawn['{s}'].rules") == 2 for s in STREAMS), 30,
             "the line and the zone drawn on both")
    names = js(browser, "[...document.querySelectorAll('.tile h3')].map(e => e.textContent)")
    assert names == list(STREAMS)
    assert errors(browser) == []


def test_the_boxes_drawn_are_the_boxes_of_that_frames_message(browser, run):
    pipeline, base, jsonl = run
    open_page(browser, base + "/")
    compared = 0
    deadline = time.monotonic() + 60
    while compared < 6 and time.monotonic() < deadline:
        wait_for(lambda: all(js(browser, f"window.streamlens.drawn['{s}']") for s in STREAMS), 30, "frames drawn")
        browser.execute_script("window.streamlens.setPaused(true)")
        drawn = js(browser, "window.streamlens.drawn")
        browser.execute_script("window.streamlens.setPaused(false)")
        for stream in STREAMS:
            seq = drawn[stream]["seq"]
            message = wait_for(lambda: next((m for m in lines_of(jsonl) if m["type"] == "frame"
                                             and m["stream"] == stream and m["seq"] == seq), None), 30,
                               f"{stream} seq {seq} in the JSONL file")
            assert drawn[stream]["boxes"] == [o["box"] for o in message["objects"]], (stream, seq)
            compared += bool(message["objects"])
        time.sleep(0.3)
    assert compared >= 6, "too few frames with boxes to compare"


def test_the_figures_and_the_plot_update(browser, run):
    pipeline, base, _ = run
    open_page(browser, base + "/")
    wait_for(lambda: js(browser, "window.streamlens.statsUpdates") >= 1, 30, "the first stats")
    updates, points = js(browser, "window.streamlens.statsUpdates"), js(browser, "window.streamlens.plotPoints")
    wait_for(lambda: js(browser, "window.streamlens.statsUpdates") >= updates + 3, 30, "three more stats updates")
    wait_for(lambda: js(browser, "window.streamlens.plotPoints") > points, 30, "the latency plot to grow")
    fps = js(browser, "document.querySelector('[data-stream=cam1] [data-figure=fps]').textContent")
    assert fps != "–" and float(fps) > 0  # it said – before the first figures
    latency = js(browser, "document.querySelector('[data-stream=cam1] [data-figure=latency]').textContent")
    assert latency.endswith(" ms") and "–" not in latency
    assert js(browser, "document.querySelector('[data-stream=cam2] [data-figure=drops]').textContent") == "0"
    assert js(browser, "document.querySelector('[data-stream=cam1] [data-figure=control]').textContent") == "level 0"
    counts = js(browser, "[...document.querySelectorAll('#counts td:nth-child(2)')].map(e => e.textContent)")
    assert counts == ["gate", "road", "gate", "road"]
    wait_for(lambda: js(browser, "document.querySelectorAll('#events li img').length") > 0, 30,
             "events with snapshot thumbnails")
    assert errors(browser) == []


def test_a_click_opens_the_large_view_and_back_returns_to_the_grid(browser, run):
    from selenium.webdriver.common.by import By

    pipeline, base, _ = run
    open_page(browser, base + "/")
    wait_for(lambda: js(browser, "window.streamlens.drawn['cam2']"), 30, "cam2 drawn")
    tile = browser.find_element(By.CSS_SELECTOR, ".tile[data-stream=cam2]")
    small = tile.size["width"]
    tile.find_element(By.CSS_SELECTOR, ".view").click()
    wait_for(lambda: js(browser, "window.streamlens.view") == "cam2", 10, "the large view of cam2")
    assert "large" in browser.find_element(By.TAG_NAME, "body").get_attribute("class")
    assert tile.is_displayed() and tile.size["width"] > 1.5 * small
    assert not browser.find_element(By.CSS_SELECTOR, ".tile[data-stream=cam1]").is_displayed()
    frames = js(browser, "window.streamlens.frames['cam2']")
    wait_for(lambda: js(browser, "window.streamlens.frames['cam2']") > frames, 30, "the large view to play")
    browser.find_element(By.ID, "back").click()
    wait_for(lambda: js(browser, "window.streamlens.view") is None, 10, "the grid again")
    assert browser.find_element(By.CSS_SELECTOR, ".tile[data-stream=cam1]").is_displayed()


def test_a_second_viewer_does_not_slow_the_pipeline(browser, run):
    """Two windows watch at once: every frame the sources made is still kept (nothing dropped), and
    both windows play."""
    pipeline, base, _ = run
    open_page(browser, base + "/")
    first = browser.current_window_handle
    browser.switch_to.new_window("window")
    try:
        open_page(browser, base + "/")
        second = browser.current_window_handle
        made = {s: pipeline.stats[s].frames for s in STREAMS}
        drawn = {}
        for handle in (first, second):
            browser.switch_to.window(handle)
            drawn[handle] = js(browser, "window.streamlens.framesDrawn")
        for handle in (first, second):
            browser.switch_to.window(handle)
            wait_for(lambda: js(browser, "window.streamlens.framesDrawn") >= drawn[handle] + 20, 60,
                     "20 more frames drawn in each window")
        wait_for(lambda: all(pipeline.stats[s].frames > made[s] + 10 for s in STREAMS), 60,
                 "the pipeline going on meanwhile")
        assert {s: pipeline.stats[s].dropped for s in STREAMS} == {s: 0 for s in STREAMS}
        lost = {s: {cause: n for cause, n in pipeline.stats[s].lost.items() if n} for s in STREAMS}
        assert lost == {s: {} for s in STREAMS}
    finally:
        browser.switch_to.window(browser.window_handles[-1])
        if len(browser.window_handles) > 1:
            browser.close()
        browser.switch_to.window(browser.window_handles[0])


def test_frame_jpg_and_the_events_api_match_the_results(run):
    import cv2

    pipeline, base, jsonl = run
    code, headers, body = get(base + "/api/streams/cam1/frame.jpg")
    assert code == 200 and headers["Content-Type"] == "image/jpeg"
    image = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (360, 640, 3)
    code, _, body = get(base + "/api/streams")
    streams = json.loads(body)["streams"]
    assert [(s["name"], s["width"], s["height"]) for s in streams] == [(n, 640, 360) for n in STREAMS]
    assert streams[0]["lines"] == [{"name": "gate", "points": [[320.0, 0.0], [320.0, 360.0]]}]
    assert streams[0]["zones"][0]["polygon"] == [[0.0, 126.0], [640.0, 126.0], [640.0, 252.0], [0.0, 252.0]]

    found = wait_for(lambda: json.loads(get(base + "/api/events?since=0")[2]), 30, "events")
    events = [e["event"] for e in found]
    newest = {(e["stream"], e["seq"]) for e in events[-1:]}

    def written_so_far() -> list[dict] | None:
        written = [m for m in lines_of(jsonl) if m["type"] == "event"]
        return written if newest <= {(m["stream"], m["seq"]) for m in written} else None

    written = wait_for(written_so_far, 30, "the events in the JSONL file")
    start = written.index(events[0])  # the API keeps the newest 500: a stretch of what was written
    assert written[start:start + len(events)] == events
    assert [e["index"] for e in found] == list(range(found[0]["index"], found[0]["index"] + len(found)))
    middle = found[len(found) // 2]["index"]
    assert json.loads(get(base + f"/api/events?since={middle}")[2])[:len(found) - len(found) // 2 - 1] == \
        found[len(found) // 2 + 1:]
    shot = next(e for e in found if e["has_snapshot"])
    code, headers, body = get(base + f"/api/events/{shot['index']}/snapshot.jpg")
    assert code == 200 and headers["Content-Type"] == "image/jpeg" and len(body) == shot["event"]["snapshot"]["bytes"]
    assert cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR) is not None
    code, headers, body = get(base + "/api/streams/cam2/preview.jpg")
    seq = int(headers["X-Streamlens-Seq"])
    assert json.loads(headers["X-Streamlens-Result"])["seq"] == seq
    kept = json.loads(get(base + f"/api/streams/cam2/result?seq={seq}")[2])
    assert kept == json.loads(headers["X-Streamlens-Result"])
    assert get(base + "/api/streams/nope/frame.jpg")[0] == 404


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A pipeline listening on 0.0.0.0, its token in STREAMLENS_PAGE_TEST_TOKEN, with a camera that
    refuses and has a password that must never show: (pipeline, base URL, its file)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        door = f"\n  - {{name: door, uri: 'rtsp://admin:{PASSWORD}@127.0.0.1:{s.getsockname()[1]}/x'}}"
    path = pipeline_file(tmp_path_factory.mktemp("guarded"), host="0.0.0.0", token_env="STREAMLENS_PAGE_TEST_TOKEN",
                         streams=("cam1",), more=door)
    os.environ["STREAMLENS_PAGE_TEST_TOKEN"] = TOKEN
    try:
        with tool.running(path) as pipeline:
            yield pipeline, f"http://127.0.0.1:{pipeline.http_port}", path
    finally:
        del os.environ["STREAMLENS_PAGE_TEST_TOKEN"]


def test_off_loopback_every_route_but_healthz_needs_the_token(guarded):
    pipeline, base, _ = guarded
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for route in ("/", "/api/streams", "/api/stats", "/metrics", "/page/app.js", "/api/streams/cam1/frame.jpg",
                  "/api/events?since=0"):
        code, headers, _ = get(base + route)
        assert code == 401 and headers["WWW-Authenticate"].startswith("Bearer"), route
        assert get(base + route, {"Authorization": "Bearer wrong"})[0] == 401, route
        assert get(base + route, bearer)[0] in (200, 503), route  # 503: no frame yet
    assert get(base + "/api/streams?token=wrong")[0] == 401
    code, headers, _ = get_once(base + f"/api/events?since=3&token={TOKEN}")  # the exchange: a redirect
    assert code == 303 and headers["Location"] == "/api/events?since=3", headers
    assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
    assert TOKEN not in headers["Set-Cookie"] and headers["Referrer-Policy"] == "no-referrer"
    cookie = headers["Set-Cookie"].split(";")[0]
    assert get(base + "/api/stats", {"Cookie": cookie})[0] == 200
    code, _, body = get(base + "/healthz")  # no token: 200 running or degraded, 503 still starting
    assert code in (200, 503) and set(json.loads(body)["streams"]) == {"cam1", "door"}
    listed = json.loads(get(base + "/api/streams", bearer)[2])["streams"]
    assert listed[1]["uri"].startswith("rtsp://***@127.0.0.1:")
    for route in ("/api/streams", "/api/stats", "/metrics", "/healthz"):
        assert PASSWORD not in get(base + route, bearer)[2].decode(), route


def test_off_loopback_the_page_works_with_the_token_given_once(browser, guarded):
    pipeline, base, _ = guarded
    errors(browser)
    browser.get(base + f"/?token={TOKEN}")  # once: the cookie carries the page's own requests
    wait_for(lambda: js(browser, "window.streamlens && window.streamlens.framesDrawn") >= 3, 60,
             "frames drawn on the page opened with ?token=")
    assert "token" not in browser.current_url
    wait_for(lambda: js(browser, "window.streamlens.statsUpdates") >= 1, 30, "stats on the page")
    assert PASSWORD not in browser.page_source
    assert errors(browser) == []
    browser.get("about:blank")  # before the server goes: the page would log its going


def test_off_loopback_without_the_token_the_run_fails_at_start_in_one_line(guarded):
    _, _, path = guarded
    env = {k: v for k, v in os.environ.items() if k != "STREAMLENS_PAGE_TEST_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "streamlens", "run", "-q", str(path)], capture_output=True,
                          text=True, timeout=120, env=env, cwd=REPO)
    assert done.returncode != 0
    said = done.stderr.strip().splitlines()
    assert len(said) == 1 and "runtime.http.token_env: the environment variable STREAMLENS_PAGE_TEST_TOKEN is not " \
        "set" in said[0], done.stderr


def test_with_several_engines_the_page_plays_every_streams_frames_with_its_boxes(browser, tmp_path):
    """`runtime.workers: 2` under `streamlens run`: the frames stay in the engine processes, and the
    page the supervisor serves plays both streams all the same (each asked of its engine), with the
    boxes of each frame's own message, and its figures."""
    from .test_engine_previews import two_engines

    with two_engines(tmp_path) as (run, base):
        def up() -> bool:
            try:
                return run.poll() is not None or get(base + "/healthz")[0] == 200
            except urllib.error.URLError:  # not listening yet
                return False

        wait_for(up, 60, "the run to start")
        assert run.poll() is None, run.stderr.read()
        errors(browser)
        open_page(browser, base + "/")
        wait_for(lambda: all((js(browser, f"window.streamlens.frames['{s}']") or 0) >= 3 for s in STREAMS), 60,
                 "three frames drawn on each stream's canvas")
        browser.execute_script("window.streamlens.setPaused(true)")
        drawn = js(browser, "window.streamlens.drawn")
        browser.execute_script("window.streamlens.setPaused(false)")
        for stream in STREAMS:  # the JSONL file, written by the supervisor from what the engines push
            seq = drawn[stream]["seq"]
            message = wait_for(lambda: next((m for m in lines_of(tmp_path / "results.jsonl") if m["type"] == "frame"
                                             and m["stream"] == stream and m["seq"] == seq), None), 30,
                               f"{stream} seq {seq} in the JSONL file")
            assert drawn[stream]["boxes"] == [o["box"] for o in message["objects"]], (stream, seq)
        wait_for(lambda: js(browser, "document.querySelector('[data-stream=cam2] [data-figure=fps]').textContent")
                 not in ("–", "0.0"), 30, "cam2's figures")
        assert errors(browser) == []
        browser.get("about:blank")


def test_the_screenshot_of_the_highway_clip_shows_the_boxes(browser, tmp_path):
    """tools/page_screenshot.py's code on the real clip and YOLOX-Nano: on the screenshot, the
    outline of every box the page says it drew has the box's colour, and the middle of the box
    mostly has not."""
    import cv2

    missing = tool.data_missing()
    if missing:
        pytest.skip(missing)
    shot = tmp_path / "page.png"
    browser.get("about:blank")
    errors(browser)
    with tool.running(tool.highway_pipeline(tmp_path)) as pipeline:
        drawn = tool.capture(browser, f"http://127.0.0.1:{pipeline.http_port}/", shot, min_boxes=4)
        assert errors(browser) == []
        browser.get("about:blank")
    picture = cv2.cvtColor(cv2.imread(str(shot), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB).astype(np.int32)
    ratio = drawn["ratio"]
    on_edges, inside, boxes = [], [], 0
    for name, stream in drawn["streams"].items():
        left, top, scale = stream["at"]
        for box, color in zip(stream["boxes"], stream["colors"]):
            x1, y1, x2, y2 = ((left + box[0] * scale) * ratio, (top + box[1] * scale) * ratio,
                              (left + box[2] * scale) * ratio, (top + box[3] * scale) * ratio)
            if x2 - x1 < 12 or y2 - y1 < 12:
                continue  # too small to tell its outline from its middle
            rgb = np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)])
            boxes += 1

            def share(xs, ys) -> float:
                """The share of the points (xs, ys) with a pixel of the box's colour within 1 px."""
                hits = 0
                for x, y in zip(xs, ys):
                    patch = picture[int(y) - 1:int(y) + 2, int(x) - 1:int(x) + 2].reshape(-1, 3)
                    hits += bool((np.abs(patch - rgb).sum(axis=1) < 90).any())
                return hits / len(xs)

            ys = np.linspace(y1 + 0.3 * (y2 - y1), y2 - 0.1 * (y2 - y1), 12)  # below its label
            on_edges.append(max(share(np.full(12, x1), ys), share(np.full(12, x2), ys)))
            inside.append(share(np.full(12, (x1 + x2) / 2), ys))
    assert boxes >= 3, drawn
    assert np.mean(on_edges) > 0.7, on_edges
    assert np.mean(inside) < np.mean(on_edges) - 0.4, (on_edges, inside)


def test_with_a_history_the_counts_show_the_last_24_hours(browser, tmp_path):
    """`runtime.history` with events already in its file (a crossing an hour ago, from a run
    before): the counts table gains the last 24 hours of each rule, read from /api/history, and
    they go up as this run's own crossings are written."""
    from streamlens.history import store

    folder = tmp_path / "h"
    path = pipeline_file(folder)
    path.write_text(path.read_text().replace("queue_size: 64", "queue_size: 64\n  history: {path: history.db}"))
    db = store.connect(str(folder / "history.db"))
    store.create(db)
    hour_ago = time.time() - 3600
    store.add_events(db, [{"type": "event", "stream": "cam1", "event": "line_cross", "line": "gate", "direction": "in",
                           "ts": hour_ago, "object": {"label": "motion"}},
                          {"type": "event", "stream": "cam1", "event": "zone_enter", "zone": "road",
                           "ts": hour_ago, "object": {"label": "motion"}}])
    db.close()
    with tool.running(path) as pipeline:
        errors(browser)
        open_page(browser, f"http://127.0.0.1:{pipeline.http_port}/")
        wait_for(lambda: js(browser, "window.streamlens.day"), 30, "the last 24 hours of counts")
        day = js(browser, "window.streamlens.day")
        assert day["cam1/gate"]["in"] >= 1 and day["cam1/road"]["count"] >= 1, day
        wait_for(lambda: js(browser, "document.querySelector('#counts td.day')"), 30, "the 24 hours column")
        assert js(browser, "document.querySelector('#counts td.day').textContent").startswith("24 h:")
        assert errors(browser) == []
        browser.get("about:blank")


def test_rle_masks_are_drawn_and_decoded_as_pycocotools_reads_them(browser, tmp_path):
    """`segment.output: rle` (the tests' tiny SAM-format ONNX pair): the page draws each object's
    mask, and reads every COCO RLE string of the results to the counts pycocotools writes."""
    from pycocotools import mask as coco

    from .sam_models import build_tiny_sam

    (tmp_path / "sam").mkdir()
    encoder, decoder = build_tiny_sam(tmp_path / "sam")
    path = pipeline_file(tmp_path / "p", streams=("cam1",))
    path.write_text(path.read_text() + f"segment: {{model: {encoder}, decoder: {decoder}, output: rle, every_s: 0.5}}\n")
    with tool.running(path) as pipeline:
        open_page(browser, f"http://127.0.0.1:{pipeline.http_port}/")
        wait_for(lambda: (js(browser, "window.streamlens.drawn['cam1']") or {}).get("masks", 0) > 0, 60,
                 "a frame drawn with its masks")
        results = tmp_path / "p" / "results.jsonl"
        wait_for(lambda: any("mask" in o for m in lines_of(results) if m["type"] == "frame" for o in m["objects"]),
                 60, "masks in the results")
        rles = [o["mask"] for m in lines_of(results) if m["type"] == "frame" for o in m["objects"] if "mask" in o]
        assert rles
        for rle in rles[:20]:
            expected = coco.decode({"size": rle["size"], "counts": rle["counts"].encode()})
            counts = js(browser, f"window.streamlens.rleCounts({json.dumps(rle['counts'])})")
            flat = np.repeat(np.arange(len(counts)) % 2, counts).astype(np.uint8)  # 0s first, column-major
            assert flat.size == rle["size"][0] * rle["size"][1]
            assert np.array_equal(flat.reshape(rle["size"][1], rle["size"][0]).T, expected)
        assert not errors(browser)  # while the run is up: its end would refuse the page's next request
        browser.get("about:blank")  # the module's other tests open their own page



def test_a_stream_added_while_running_appears_on_the_page_and_a_removed_one_says_so(browser, tmp_path):
    """`POST /api/streams` while the page is open: the new stream gets its tile and plays without a
    reload; `DELETE` it and its badge says `removed`."""
    path = pipeline_file(tmp_path / "p", streams=("cam1",))
    with tool.running(path) as pipeline:
        base = f"http://127.0.0.1:{pipeline.http_port}"
        open_page(browser, base + "/")
        wait_for(lambda: js(browser, "window.streamlens.drawn['cam1']"), 60, "cam1 drawn: the run is running")
        body = json.dumps({"name": "door", "uri": str(SAMPLE), "live": True, "loop": True, "max_fps": 10}).encode()
        request = urllib.request.Request(base + "/api/streams", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 201
        wait_for(lambda: (js(browser, "window.streamlens.drawn['door']") or {}).get("seq", -1) >= 3, 60,
                 "the added stream drawn on the page")
        request = urllib.request.Request(base + "/api/streams/door", method="DELETE")
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 202
        wait_for(lambda: js(browser, "document.querySelector('[data-stream=\"door\"] .state')?.textContent")
                 == "removed", 60,
                 "the removed stream's badge")
        assert not errors(browser)
        browser.get("about:blank")
