"""Search by example (`runtime.history` tracks, `/api/search`, `streamlens search`) on a real run: the
shipped sample read as two streams `a` and `b` (the same objects on both) with a random-weight ONNX
model as the `reid` embedding, snapshots written to a folder; then a live run serving that history
over HTTP. The same object on the other stream is the answer; crops described as the `reid`
embeddings are find their track; malformed and foreign embeddings are counted, never kept; the
route's bounds answer 4xx in one line."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import cv2
import numpy as np
import pytest

from streamlens.config.runtime import HistoryConfig
from streamlens.history import search, store, tracks
from streamlens.history.sink import HistorySink
from streamlens.reid.appearance import DIM, describe

from .conftest import REPO
from .search_case import SAMPLE, build_projection_model, two_stream_pipeline


def streamlens(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamlens", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO)


def _iou(p, q) -> float:
    w = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
    h = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
    union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - w * h
    return w * h / union if union > 0 else 0.0


def twins(db) -> dict[int, int]:
    """Track ids of `a` -> the id of the same object on `b`: the `b` track whose first object_start
    came within 6 frames of it with a box overlapping at IoU 0.3 or more (the one match, else none)."""
    starts: dict = {}
    for (text,) in db.execute("SELECT message FROM events WHERE event = 'object_start' ORDER BY id"):
        m = json.loads(text)
        starts.setdefault((m["stream"], m["object"]["id"]), (m["frame"], m["object"]["box"]))
    out = {}
    for (stream, track), (frame, box) in starts.items():
        if stream != "a":
            continue
        found = [t for (s, t), (f, b) in starts.items() if s == "b" and abs(f - frame) <= 6 and _iou(box, b) >= 0.3]
        if len(found) == 1:
            out[track] = found[0]
    return out


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """The two-stream run's folder, with its history.db and shots/ (run once by `streamlens run`)."""
    folder = tmp_path_factory.mktemp("search")
    model = build_projection_model(folder / "projection.onnx")
    done = streamlens("run", "-q", str(two_stream_pipeline(folder, model)))
    assert done.returncode == 0, done.stderr
    return folder


def test_search_ranks_the_same_object_on_the_other_stream_first(history):
    with sqlite3.connect(history / "history.db") as db:
        pairs = twins(db)
        assert len(pairs) >= 4, pairs
        first, within_3 = [], []
        for a, b in pairs.items():
            found = search.by_track(db, "a", a, 5)
            if found is None:  # no good view of it ever: no embedding
                continue
            row, results = found
            assert row["stream"] == "a" and row["id"] == a and row["name"] == "reid"
            assert all((r["stream"], r["id"]) != ("a", a) for r in results)  # never the query itself
            assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
            ranked = [(r["stream"], r["id"]) for r in results]
            first.append(ranked[0] == ("b", b))
            within_3.append(("b", b) in ranked[:3])
    assert len(first) >= 4 and all(within_3) and sum(first) >= 0.8 * len(first), (first, within_3)


def test_the_command_prints_a_ranked_table_and_json_with_snapshots(history):
    with sqlite3.connect(history / "history.db") as db:
        a, b = next(iter(twins(db).items()))
    shown = streamlens("search", "--history", str(history / "history.db"), "--stream", "a", "--id", str(a),
                       "--limit", "3", "--json")
    assert shown.returncode == 0, shown.stderr
    answer = json.loads(shown.stdout)
    assert answer["name"] == "reid" and answer["query"]["stream"] == "a" and answer["query"]["id"] == a
    results = answer["results"]
    assert [r["rank"] for r in results] == [1, 2, 3]
    top = results[0]
    assert (top["stream"], top["id"]) == ("b", b) and top["score"] > 0.9
    assert top["first_ts"] <= top["last_ts"] and top["first_ts"] > 1e9  # wall times
    assert Path(top["snapshot_path"]).is_file() and Path(top["snapshot_path"]).read_bytes()[:2] == b"\xff\xd8"
    table = streamlens("search", "--history", str(history / "history.db"), "--stream", "a", "--id", str(a))
    assert table.returncode == 0, table.stderr
    head, row = table.stdout.splitlines()[:2]
    assert head.split()[:4] == ["rank", "score", "stream", "id"] and row.split()[:4] == ["1", f"{top['score']:.3f}",
                                                                                          "b", str(b)]
    others = streamlens("search", "--history", str(history / "history.db"), "--stream", "a", "--id", str(a),
                        "--others", "--json")
    assert others.returncode == 0, others.stderr
    assert {r["stream"] for r in json.loads(others.stdout)["results"]} == {"b"}  # the query's own camera left out


def test_bad_search_arguments_are_one_line_exit_2(history):
    db = str(history / "history.db")
    (history / "bad.jpg").write_bytes(b"not a jpeg")
    for args, said in ((["--history", db], "either --stream and --id"),
                       (["--history", db, "--stream", "a", "--id", "999"], "no track 999 of stream 'a'"),
                       (["--history", db, "--image", str(history / "bad.jpg")], "not a JPEG picture"),
                       (["--history", str(history / "nope.db"), "--stream", "a", "--id", "1"], "no such history file"),
                       (["--history", db, "--stream", "a", "--id", "1", "--limit", "1000"], "--limit: 1 to 100"),
                       (["--history", db, "--image", str(history / "bad.jpg"), "--others"], "--others goes with")):
        done = streamlens("search", *args)
        assert done.returncode == 2 and said in done.stderr, done
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


# -- embeddings kept, and those refused --------------------------------------------------------

def crops(history: Path) -> list[Path]:
    """The snapshot crops the run wrote (object_end: each object's best view)."""
    return sorted((history / "shots" / "a").glob("object_end-*.jpg"))


def reid_message(stream: str, track: int, vector, ts: float = 1_900_000_000.0, seq: int = 0) -> dict:
    """An `embedding` message as the `reid` section publishes one."""
    return {"v": 1, "type": "embedding", "stream": stream, "seq": seq, "name": "reid", "object": {"id": track},
            "attempts": 1, "vector": vector, "frame": 0, "pts": 0.0, "ts": ts}


#: what a foreign model or a forger could send, and the reason each is refused for
BAD = [([0.5] * (DIM + 1), "wrong length for its name"), ([float("nan")] * DIM, "not finite"),
       (["x"] * DIM, "not a list of numbers"), ({"0": 1.0}, "not a list of numbers"),
       ([True] * DIM, "not a list of numbers"), ([0.0] * DIM, "not finite")]


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def crops_kept(history) -> tuple[int, HistorySink, list[str]]:
    """The run's snapshot crops described as the `reid` embeddings are, sent through a history sink
    as stream `crops` (track i: crop i), with the malformed ones of `BAD` among them: (crops sent,
    the closed sink, what it logged)."""
    shots = crops(history)
    assert len(shots) >= 3
    good = [reid_message("crops", i, [float(x) for x in describe(image, [[0, 0, image.shape[1], image.shape[0]]])[0]],
                         seq=i)
            for i, image in enumerate((cv2.imread(str(p)) for p in shots), 1)]
    bad = [reid_message("crops", 90 + i, vector) for i, (vector, _) in enumerate(BAD)]
    sink = HistorySink(HistoryConfig(path=history / "history.db"))
    lines = _Lines()
    logging.getLogger("streamlens.history").addHandler(lines)
    try:
        sink.open()
        for m in good[:1] + bad + good[1:]:
            sink.write(None, m, b"")
        sink.close()
    finally:
        logging.getLogger("streamlens.history").removeHandler(lines)
    return len(good), sink, lines.lines


def test_embeddings_of_crops_are_kept_and_malformed_or_foreign_ones_counted(history, crops_kept):
    """Only the sound embedding messages are kept; the others are counted by reason, told in a line
    when the sink closes, in the file, and by `streamlens search`."""
    sent, sink, logged = crops_kept
    assert sink.counters()["ignored"] == len(BAD)
    assert any(line.startswith(f"runtime.history: {len(BAD)} embedding message(s) not kept for search")
               for line in logged), logged
    shots = crops(history)
    with sqlite3.connect(history / "history.db") as db:
        kept = {t for (t,) in db.execute("SELECT t.track FROM tracks t JOIN vectors v ON v.track = t.id "
                                         "WHERE t.stream = 'crops'")}
        assert kept == set(range(1, sent + 1))
        assert tracks.ignored(db) == {"not a list of numbers": 3, "not finite": 2, "wrong length for its name": 1}
    table = streamlens("search", "--history", str(history / "history.db"), "--image", str(shots[1]))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].split()[2:4] == ["crops", "2"] and lines[1].split()[1] == "1.000", table.stdout
    assert lines[-1] == (f"{len(BAD)} embedding message(s) were not kept: not a list of numbers 3, not finite 2, "
                         "wrong length for its name 1")


def test_an_older_history_file_gains_the_tracks_and_keeps_its_events(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the file as the version before tracks made it
        db.executescript(store.SCHEMA.split("CREATE TABLE IF NOT EXISTS tracks")[0])
        db.execute("INSERT INTO events (ts, stream, event, rule, label, message) VALUES (1, 'cam', 'loiter', 'bay', "
                   "'car', '{}')")
    db = store.connect(str(path))
    store.create(db)
    assert db.execute("PRAGMA user_version").fetchone()[0] == store.VERSION
    store.add(db, "r", [], vectors=[("cam", 3, "reid", np.ones(4, np.float32) / 2, 2_000_000_000.0)])
    assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1
    assert store.prune(db, 1, now=2_000_000_000.0 + 2 * 86400) == 1  # the event, and the track with it
    assert db.execute("SELECT COUNT(*) FROM tracks").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] == 0
    db.close()


# -- over HTTP ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served(history):
    """A live run serving the history file (one paced stream of its own; its tracks have no embedding)."""
    from .test_web_page import tool

    path = history / "serve.yaml"
    path.write_text(f"""
sources: [{{name: idle, uri: {SAMPLE}, live: true, loop: true, max_fps: 2}}]
detector: {{backend: motion}}
analytics: {{snapshots: {{events: [object_end], kind: crop, path: shots}}}}
sinks: []
runtime: {{history: {{path: history.db}}, workers: 1, http: {{port: 0}}}}
""")
    with tool.running(path) as pipeline:
        yield f"http://127.0.0.1:{pipeline.http_port}"


def call(method: str, url: str, body: bytes | None = None, ctype: str = "image/jpeg") -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": ctype} if body else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_api_answers_by_track_with_snapshot_urls(history, served):
    with sqlite3.connect(history / "history.db") as db:
        a, b = next(iter(twins(db).items()))
    code, body = call("GET", f"{served}/api/search?stream=a&id={a}&limit=3")
    assert code == 200, body
    answer = json.loads(body)
    assert answer["query"]["stream"] == "a" and answer["query"]["id"] == a and answer["scanned_at_most"] == 100_000
    results = answer["results"]
    assert len(results) == 3 and (results[0]["stream"], results[0]["id"]) == ("b", b)
    assert "snapshot_path" not in results[0]
    code, jpeg = call("GET", served + results[0]["snapshot"])  # the file, which outlives the run that wrote it
    assert code == 200 and jpeg[:2] == b"\xff\xd8"
    assert all(r["linked"] is False for r in results)  # no reid.across in this pipeline
    code, body = call("GET", f"{served}/api/search?stream=a&id={a}&limit=5&others=1")
    assert code == 200, body
    others = json.loads(body)["results"]
    assert others and all(r["stream"] != "a" for r in others) and (others[0]["stream"], others[0]["id"]) == ("b", b)
    code, body = call("GET", f"{served}/api/search?stream=a&id={a}&others=2")
    assert code == 400 and b"others" in body


def test_the_api_answers_by_crop(history, crops_kept, served):
    shot = crops(history)[1].read_bytes()
    code, body = call("POST", f"{served}/api/search?limit=2", shot)
    assert code == 200, body
    answer = json.loads(body)
    assert answer["name"] == "reid" and answer["dim"] == DIM and answer["query"]["image"]["width"] > 0
    assert [(r["rank"], r["stream"], r["id"]) for r in answer["results"]][0] == (1, "crops", 2)
    assert answer["results"][0]["score"] > 0.99
    assert answer["ignored"]["not finite"] == 2  # the malformed ones, as counted


def test_the_api_bounds_answer_4xx_in_one_line(served):
    host, port = served.removeprefix("http://").split(":")
    for method, url, body, ctype, code, said in (
            ("GET", "/api/search?stream=a&id=999", None, "", 404, "no track 999 of stream 'a'"),
            ("GET", "/api/search?stream=a", None, "", 400, "needs stream=NAME and id=TRACK"),
            ("GET", "/api/search?stream=a&id=1&limit=101", None, "", 400, "limit"),
            ("POST", "/api/search", b"not a jpeg", "image/jpeg", 400, "not a JPEG picture"),
            ("POST", "/api/search", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(40), "image/jpeg", 400, "JPEG"),
            ("POST", "/api/search", b"{}", "application/json", 415, "takes a JPEG crop")):
        got, text = call(method, served + url, body, ctype)
        assert got == code and said in text.decode() and text.decode().count("\n") == 1, (url, got, text)
    # too large: refused from its Content-Length, before any of it is read
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", "/api/search")
    conn.putheader("Content-Type", "image/jpeg")
    conn.putheader("Content-Length", str(3 << 20))
    conn.endheaders()
    reply = conn.getresponse()
    assert reply.status == 413 and "at most 2097152 bytes" in reply.read().decode()
    conn.close()


def test_a_client_has_at_most_two_searches_in_hand(served):
    host, port = served.removeprefix("http://").split(":")
    held = []
    for _ in range(2):  # two bodies that never come: each holds a search in hand
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(f"POST /api/search HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: image/jpeg\r\n"
                  f"Content-Length: 1000\r\n\r\n".encode())
        held.append(s)
    try:
        third = None
        for _ in range(50):  # the held requests' heads may still be on their way
            third, text = call("GET", f"{served}/api/search?stream=a&id=1")
            if third == 429:
                break
        assert third == 429 and "at most 2 searches at once per client" in text.decode()
    finally:
        for s in held:
            s.close()
    assert call("GET", f"{served}/api/search?stream=a&id=999")[0] in (404, 429)


def test_the_page_shows_the_tracks_like_an_events_thumbnail(history, served):
    """The page's events from the history file carry their snapshots and a "similar" button; asking
    for track a's object shows the same object on b first, with its thumbnail."""
    from .test_web_page import js, open_page, tool

    missing = tool.browser_missing()
    if missing:
        pytest.skip(missing)
    with sqlite3.connect(history / "history.db") as db:
        a, b = next(iter(twins(db).items()))
        (ts,) = db.execute("SELECT ts FROM events WHERE stream = 'a' AND event = 'object_end' "
                           "AND json_extract(message, '$.object.id') = ? ORDER BY id LIMIT 1", (a,)).fetchone()
    driver = tool.open_browser()
    try:
        open_page(driver, served + "/")
        tool.wait_for(lambda: js(driver, "document.querySelectorAll('#events button.similar').length > 0"), 30,
                      "an event with a similar button")
        js(driver, "document.querySelector('#events button.similar').click()")
        tool.wait_for(lambda: js(driver, "window.streamlens.similarShown !== null"), 30, "the first answer")
        assert js(driver, "!document.querySelector('#similar').hidden")
        js(driver, f"window.streamlens.similarShown = null, window.streamlens.similar('a', {a}, {ts})")
        shown = tool.wait_for(lambda: js(driver, "window.streamlens.similarShown"), 30, "the tracks like it")
        assert (shown[0]["stream"], shown[0]["id"]) == ("b", b), shown
        tool.wait_for(lambda: js(driver, "Array.from(document.querySelectorAll('#similar-list img'))"
                                         ".some(i => i.complete && i.naturalWidth > 0)"), 30, "a thumbnail shown")
    finally:
        driver.quit()


def linked_history() -> sqlite3.Connection:
    """Two cameras of one run: track 1 of cam1 joined by reid.across to track 4 of cam2 (global_id 7),
    which looks less like it than two other cars of cam1 do; a later run reuses global_id 7."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    store.create(db)
    unit = lambda v: (np.asarray(v, np.float32) / np.linalg.norm(v)).astype(np.float32)  # noqa: E731
    store.add(db, "run1", [], vectors=[("cam1", 1, "reid", unit([1, 0, 0]), 10.0),
                                       ("cam1", 2, "reid", unit([1, 0.1, 0]), 11.0),
                                       ("cam1", 3, "reid", unit([1, 0.2, 0]), 12.0),
                                       ("cam2", 4, "reid", unit([1, 0.6, 0.3]), 13.0),
                                       ("cam2", 5, "reid", unit([1, 0.3, 0]), 14.0)],
              global_ids=[("cam1", 1, 7, 10.0), ("cam2", 4, 7, 13.0), ("cam1", 2, 8, 11.0)])
    store.add(db, "run2", [], vectors=[("cam2", 9, "reid", unit([1, 0, 0]), 20.0)],
              global_ids=[("cam2", 9, 7, 20.0)])
    return db


def test_search_by_track_puts_the_tracks_reid_joined_to_it_first():
    db = linked_history()
    row, results = search.by_track(db, "cam1", 1, 4, at=10.0)
    ranked = [(r["stream"], r["id"], r["linked"]) for r in results]
    # cam2's track 4 shares the query's global_id in its run: first, though three look more alike;
    # run2's track 9 has global_id 7 too, but of another run: ranked by its look (the same: 1.0)
    assert ranked == [("cam2", 4, True), ("cam2", 9, False), ("cam1", 2, False), ("cam1", 3, False)]
    assert [r["score"] for r in results[1:]] == sorted((r["score"] for r in results[1:]), reverse=True)
    # other streams only
    _, results = search.by_track(db, "cam1", 1, 10, at=10.0, others=True)
    assert [(r["stream"], r["id"]) for r in results] == [("cam2", 4), ("cam2", 9), ("cam2", 5)]
    # a track with no global_id: by similarity alone
    _, results = search.by_track(db, "cam2", 5, 2, at=14.0)
    assert not any(r["linked"] for r in results)
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
