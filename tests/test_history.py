"""`runtime.history`: every event and the counts per minute in SQLite, through real runs of the
shipped sample (`streamlens run` in a subprocess, one engine and two), read back by
`streamlens history`, `/api/history` and `/api/events`; a database locked by another program costs
no frame; retention deletes the oldest."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest

from streamlens.history import store

from .conftest import REPO, sample_pipeline

LINE = "  lines: [{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}]\n" \
       "  zones: [{name: left, polygon: [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], inertia: 2}]"


def pipeline(tmp_path, runtime: str = "", sources: str | None = None):
    path = sample_pipeline(tmp_path, f"  - {{type: jsonl, path: {tmp_path / 'out.jsonl'}}}", LINE)
    text = path.read_text() + f"runtime: {{history: {{path: history.db}}{runtime}}}\n"
    if sources is not None:
        text = text.replace(text.split("\n")[1], sources)
    path.write_text(text)
    return path


def streamlens(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamlens", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def jsonl_events(tmp_path) -> list[dict]:
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    return [m for m in lines if m["type"] == "event"]


def stored(tmp_path) -> list[dict]:
    with sqlite3.connect(tmp_path / "history.db") as db:
        return [json.loads(m) for (m,) in db.execute("SELECT message FROM events ORDER BY id")]


def expected_counts(events: list[dict]) -> dict:
    """Per (minute, stream, rule): crossings in and out and zone entries, from event messages."""
    out: dict = {}
    for m in events:
        if m["event"] not in ("line_cross", "zone_enter"):
            continue
        key = (int(m["ts"] // 60) * 60, m["stream"], m.get("line") or m.get("zone"))
        n = out.setdefault(key, {"in": 0, "out": 0, "count": 0})
        n["count" if m["event"] == "zone_enter" else m["direction"]] += 1
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_the_history_holds_every_event_and_counts_that_equal_them_across_restarts(tmp_path, workers):
    sources = "sources: [{name: a, uri: %s}, {name: b, uri: %s}]" % ((REPO / "samples" / "traffic.mp4",) * 2)
    path = pipeline(tmp_path, f", workers: {workers}", sources)
    everything = []
    for _ in range(2):  # a second run adds to the same file: the first one's events stay
        done = streamlens("run", "-q", str(path))
        assert done.returncode == 0, done.stderr
        events = jsonl_events(tmp_path)
        assert any(m["event"] == "line_cross" for m in events) and any(m["event"] == "zone_enter" for m in events)
        everything += events
        # the same messages (with two engines, the streams' events interleave in another order)
        assert sorted(map(json.dumps, stored(tmp_path))) == sorted(map(json.dumps, everything))
    shown = streamlens("history", str(tmp_path / "history.db"), "--since", "1d", "--bucket", "1m", "--json")
    assert shown.returncode == 0, shown.stderr
    got = {(b["t"], b["stream"], b["rule"]): {k: b[k] for k in ("in", "out", "count")}
           for b in json.loads(shown.stdout)["buckets"]}
    assert got == expected_counts(everything)
    table = streamlens("history", str(tmp_path / "history.db"), "--since", "1d", "--rule", "across")
    assert table.returncode == 0 and "across" in table.stdout and "left" not in table.stdout, table.stdout


def test_a_locked_database_loses_events_counted_never_a_frame(tmp_path):
    path = pipeline(tmp_path)
    db = store.connect(str(tmp_path / "history.db"))
    store.create(db)
    db.execute("BEGIN EXCLUSIVE")  # another program holds the write lock for the whole run
    try:
        done = streamlens("run", str(path))
    finally:
        db.execute("ROLLBACK")
        db.close()
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    (eos,) = [m for m in frames if m["type"] == "eos"]
    assert eos["reason"] == "end" and eos["frames"] == eos["expected"] == 300  # every frame of the sample
    assert len([m for m in frames if m["type"] == "frame"]) == 300
    assert "runtime.history: cannot write to" in done.stderr and "database is locked" in done.stderr, done.stderr
    lost = len(jsonl_events(tmp_path))
    assert f"runtime.history (history): {lost} message(s) not delivered" in done.stderr, done.stderr
    assert stored(tmp_path) == []


def test_retention_deletes_the_oldest_first(tmp_path):
    db = store.connect(str(tmp_path / "h.db"))
    store.create(db)
    now = 2_000_000_000.0
    messages = [{"type": "event", "stream": "cam", "event": "line_cross", "line": "gate", "direction": "in",
                 "ts": now - days * 86400, "object": {"label": "car"}} for days in (100, 50, 10, 1)]
    store.add_events(db, messages)
    assert store.prune(db, 60, now=now) == 1  # the event of 100 days ago, and its minute's counts
    assert [m["ts"] for _, m in store.events_after(db, 0, 10)] == [m["ts"] for m in messages[1:]]
    assert store.prune(db, 5, now=now) == 2
    assert [b["t"] for b in store.buckets(db)] == [int((now - 86400) // 60) * 60]


def test_a_history_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "history.db").mkdir()  # a folder where the file should be
    done = streamlens("run", "-q", str(pipeline(tmp_path)))
    assert done.returncode == 1
    assert done.stderr.strip().startswith("streamlens: error: runtime.history.path: cannot use"), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_bad_history_arguments_are_one_line_exit_2(tmp_path):
    for args, said in ((["nope.db"], "no such history file"), (["x", "--bucket", "10s"], "at least 1m"),
                       (["x", "--since", "yesterday"], "expected a duration")):
        (tmp_path / "x").write_bytes(b"")
        done = streamlens("history", *[str(tmp_path / a) if a in ("x", "nope.db") else a for a in args])
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done


def get(url: str):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def test_the_api_serves_the_history_and_events_that_outlive_the_run(tmp_path):
    first = pipeline(tmp_path)
    assert streamlens("run", "-q", str(first)).returncode == 0
    before = stored(tmp_path)
    assert before
    # a second run, live and looping with the page's API: its event list starts with the first run's
    path = pipeline(tmp_path, ", http: {port: 0}")
    text = path.read_text().replace("uri: ", "live: true, loop: true, uri: ", 1)
    path.write_text(text.replace("inertia: 2}]", "inertia: 2}]\n  snapshots: {events: [object_start]}", 1))
    from streamlens.config import load_pipeline
    from streamlens.graph.run.pipeline import Pipeline

    with Pipeline(load_pipeline(path)) as p:
        import threading

        runner = threading.Thread(target=p.run, daemon=True)
        runner.start()
        deadline = time.monotonic() + 60
        while p.http_port is None and time.monotonic() < deadline:
            time.sleep(0.1)
        base = f"http://127.0.0.1:{p.http_port}"
        events = get(base + "/api/events")
        assert [e["event"] for e in events[:len(before)]] == before
        assert [e["index"] for e in events] == list(range(1, len(events) + 1))
        history = get(base + "/api/history?rule=across&since=0")["buckets"]
        assert sum(b["in"] + b["out"] for b in history) >= sum(m["event"] == "line_cross" for m in before)
        assert all(e["index"] > len(before) for e in get(base + f"/api/events?since={len(before)}"))
        # this run's events, numbered by the file, with the snapshots the page keeps under its own numbers
        shot = None
        while shot is None and time.monotonic() < deadline + 60:
            shot = next((e for e in get(base + f"/api/events?since={len(before)}") if e["has_snapshot"]), None)
            time.sleep(0.2)
        assert shot is not None, "no event of this run came with a snapshot"
        with urllib.request.urlopen(f"{base}/api/events/{shot['index']}/snapshot.jpg", timeout=30) as r:
            assert r.headers["Content-Type"] == "image/jpeg" and r.read(2) == b"\xff\xd8"
        assert not any(e["has_snapshot"] for e in events[:len(before)])  # the first run's: none kept now
        p.stop()
        runner.join(60)


def _history_file(path, events: int = 2000) -> None:
    """A real history file of `events` line crossings (about 190 pages of 4 KiB), closed."""
    db = store.connect(str(path))
    store.create(db)
    store.add_events(db, [{"type": "event", "stream": "cam1", "event": "line_cross", "line": "gate",
                           "direction": "in", "ts": 1000.0 + i, "object": {"label": "car"}, "note": "x" * 200}
                          for i in range(events)])
    db.close()


def _corrupt_page(path) -> None:
    """The header of a page in the middle of the file flipped, as a torn write or a bad disk leaves it."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 4096 // 2 * 4096
    data[middle:middle + 12] = bytes(b ^ 0xFF for b in data[middle:middle + 12])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["page", "random"])
def test_a_corrupt_history_file_is_refused_by_run_and_validate(tmp_path, damage):
    """A history file with a corrupt page (SQLite's quick_check finds it), or of random bytes, is
    never used: `validate` names the file and key path in one line (exit 2), `run` refuses to start
    with one line (exit 1), no traceback, and the file is left as it was."""
    import os

    path = pipeline(tmp_path)
    history = tmp_path / "history.db"
    if damage == "page":
        _history_file(history)
        _corrupt_page(history)
        assert store.unsound(str(history)).endswith("btreeInitPage() returns error code 11")
    else:
        history.write_bytes(os.urandom(64 << 10))
    before = history.read_bytes()
    checked = streamlens("validate", str(path), timeout=120)
    assert checked.returncode == 2, checked.stderr
    lines = [line for line in checked.stderr.splitlines() if "history" in line]
    assert len(lines) == 1 and lines[0].startswith(f"{path}: runtime.history.path: {history} is not a sound "
                                                   "history database ("), checked.stderr
    ran = streamlens("run", "-q", str(path), timeout=120)
    assert ran.returncode == 1, ran.stderr
    assert ran.stderr.strip().splitlines() == [
        f"streamlens: error: runtime.history.path: {history} is not a sound history database "
        f"({store.unsound(str(history))}); move it aside (a new one is made) or repair it "
        f"(sqlite3 {history} .recover)"], ran.stderr
    assert history.read_bytes() == before  # left for the operator to move aside or repair
    out = tmp_path / "out.jsonl"
    assert not out.exists() or not out.read_text()  # no frame ran


def test_a_clip_lost_event_marks_the_events_of_its_clip():
    """A `clip_lost` event marks the events recorded with its clip's path (its stream's, in the hour
    before it) lost, with the reason, as every later read gives them; the others stay as they were."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    store.create(db)
    crossing = {"type": "event", "stream": "cam1", "event": "line_cross", "line": "gate", "direction": "in",
                "object": {"label": "car"}}
    store.add_events(db, [
        {**crossing, "ts": 100.0, "clip": {"path": "clips/cam1/a.mp4", "start_pts": 1.0, "end_pts": 3.0}},
        {**crossing, "ts": 101.0, "clip": {"path": "clips/cam1/a.mp4", "start_pts": 2.0, "end_pts": 4.0}},
        {**crossing, "ts": 102.0, "clip": {"path": "clips/cam1/b.mp4", "start_pts": 9.0, "end_pts": 11.0}},
        {**crossing, "stream": "cam2", "ts": 102.0, "clip": {"path": "clips/cam1/a.mp4"}}])
    store.add_events(db, [{"type": "event", "stream": "cam1", "event": "clip_lost", "ts": 110.0, "events": [0, 1],
                           "clip": {"path": "clips/cam1/a.mp4", "lost": True, "reason": "No space left on device"}}])
    clips = [m.get("clip") for _, m in store.events_after(db, 0, 10)]
    assert clips[:2] == [{"path": "clips/cam1/a.mp4", "start_pts": s, "end_pts": e, "lost": True,
                          "reason": "No space left on device"} for s, e in ((1.0, 3.0), (2.0, 4.0))]
    assert clips[2] == {"path": "clips/cam1/b.mp4", "start_pts": 9.0, "end_pts": 11.0}
    assert clips[3] == {"path": "clips/cam1/a.mp4"}  # another stream's
    assert store.event(db, 1)["clip"]["lost"] is True
