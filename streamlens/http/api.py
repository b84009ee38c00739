"""The live page's JSON API over one run (a `RunView`): `Api.route(path, query, client)` answers
each route below `/` but `/metrics` and `/healthz` (every answer is JSON unless said;
`Cache-Control: no-store`). The server calls it off its event loop: a JPEG is encoded here.

- `/` the page (`streamlens/http/page/index.html`), `/page/<file>` its script and style sheet
  (streamlens/http/page_files.py).
- `/api/streams`: `{"state", "preview_fps", "budget_ms", "history", "streams": [...]}`
  (`history`: whether `runtime.history` keeps counts for `/api/history`), per
  stream its `name`, `uri` (credentials masked: `rtsp://***@cam/1`), `live`, `state` (starting,
  running, streaming, connecting, backing_off, reconnecting, stalled, ended, truncated, stopped,
  error), `width`/`height`/`seq` of its newest frame (null before it), current `fps`, `frames`,
  and its analytics' `lines` (`{"name", "points"}`) and `zones` (`{"name", "polygon"}`) in source
  pixels as they are applied. With `runtime.workers` > 1 the frames and what is said of them here
  come from the engine that has the stream (streamlens/scale/preview.py).
- `/api/stats[?history_since=N]`: `{"ts", "state", "budget_ms", "streams", "detector", "control",
  "secondary", "segment", "history"}`. Per stream: `state`, `fps`, `frames`, `latency_ms` (p50/p95/p99 end to
  end over the last 256 frames), `keyframes` and `keyframe_rate` (detected in time: how many, and
  their share of the last 256 frames), `keyframes_per_s` (sent to the detector, in time or late,
  over the last 10 s), `late_keyframes` (published by motion, their detections applied when back),
  `deferred_keyframes`, `displaced_keyframes` (taken back from the detector's queue, their place
  given to a frame worth more: published by motion), `discarded_detections`, `dropped`, `shed`,
  `lost` (by cause), `clips_lost` (`analytics.clips`), `queue_depth`, `detect_ms` (the detector
  call per keyframe's batch, p50/p95/p99 of the last 64), `control` (the budget controller's
  `level`, `keyframe_stretch`, `keyframe_wait`, `shed_fraction`; null where it does not watch the
  stream) and `counts` (the
  newest frame's: per line `{"in", "out", "classes"}`, per zone the objects in it now). `detector`: its load over the
  last 10 s, all streams together: `keyframes_per_s`, `detected_share` (the share of frames it ran
  on), and the slowest stream's `detect_ms`. `control`: the controller's `level` and `steps` (null
  without one). `secondary`: the secondary models' figures; `segment`: the masks' (docs/masks.md).
  `history`: `{"every_s": 1, "next": M,
  "t": [...], "p95": {stream: [...]}}`, a sample a second over the last 10 minutes, taken on the
  server's event loop (null: no frame that second); with `history_since=N` only the samples after
  N (M: the newest sample's number).
- `/api/events?since=N`: a list of the events after index N (all streams, the last 500 kept),
  oldest first: `[{"index": 18, "has_snapshot": true, "event": {"type": "event", "stream": "cam1",
  "event": "object_start", ...}}]`; `/api/events/<N>/snapshot.jpg` its snapshot JPEG (the page's copy,
  else, for the history file's events, the file under `analytics.snapshots.path`; 404 once no
  longer kept or when it has none); `/api/events/<N>/clip.mp4` its clip (`analytics.clips`; 503
  until it is written, 404 when it has none, 410 with one line once it never will be: lost,
  `clip.lost` in the event, or overdue; clip_state.py).
- `/api/streams/<name>/frame.jpg`: the newest frame with its boxes, labels, track ids, lines, zones
  and counts drawn (as the annotated video draws them), a JPEG of the stream's size, for scripts and
  home dashboards; 503 before the first frame.
- `/api/streams/<name>/preview.jpg[?after=SEQ&viewer=ID]`: the newest frame as it is (no drawing,
  at most 1280 pixels wide) for the page's canvas, which draws the boxes itself. Its `seq` is in
  the header `X-Streamlens-Seq` and its frame message (compact JSON, ASCII) in `X-Streamlens-Result`
  when that is under 16 KiB; otherwise read it from `/api/streams/<name>/result?seq=SEQ` (the last
  64 frame messages of each stream are kept; without `seq`, the newest). 204 No Content when there
  is no frame yet or the newest is still `after`. Each viewer (its `viewer` id, else its address)
  gets at most `runtime.http.preview_fps` new frames a second: asked sooner, it gets the frame it
  had. Each frame is encoded once however many viewers ask, and only when one asks.

`/api/search` (search by example over the history's tracks) is answered by http/search.py.

Every number of a query or path (`since`, `seq`, `after`, `bucket_s`, an event's number) is parsed
with bounds (numbers.py): one that is none, or out of its range, is a 400 naming the key and the
range, never a 500 and never a default put in its place.

A slow browser never slows the pipeline: these answers only read references the preview sink keeps
(streamlens/http/preview.py), and encode here, on the server's worker threads (with several engines,
on the engine's answering thread, asked by streamlens/scale/preview.py).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from ..history import store
from ..urls import mask_url
from .clip_state import clip_gone
from .metrics import pipeline_state
from .page_files import page_file
from .numbers import MAX_UNIX_TIME, BadNumber, parse_int, query_float, query_int
from .preview import EVENTS
from .reply import Reply, ascii_json, json_reply, text_reply

log = logging.getLogger("streamlens.http")

if TYPE_CHECKING:
    from .run_view import RunView

#: the latency history: one sample a second, this many kept (10 minutes)
HISTORY_EVERY_S, HISTORY_KEEP = 1.0, 600
#: the window of the detector's figures and of `keyframes_per_s`, in history samples
RATE_SAMPLES = 10
#: a frame message rides in the preview's `X-Streamlens-Result` header up to this size
RESULT_HEADER_MAX = 16 * 1024
#: a viewer asking again within this share of its preview period gets the frame it had
VIEWER_SLACK = 0.8
#: the largest snapshot file `/api/events/<N>/snapshot.jpg` serves (a 4K frame's JPEG is a few MB)
SNAPSHOT_FILE_BYTES = 16 << 20
#: the widest bucket `/api/history` sums, in seconds: 36,500 days (the longest `runtime.history.keep_days`)
MAX_BUCKET_S = 36_500 * 86_400


class History:
    """Once a second, each stream's p95 end to end (None when it published nothing that second)
    with its counters of frames and of keyframes sent to the detector (in time or late): the page's
    latency plot and the rates of `/api/stats`."""

    def __init__(self, pipeline: RunView):
        self.pipeline = pipeline
        self.samples: deque = deque(maxlen=HISTORY_KEEP)  # (number, wall time, {stream: (frames, keyframes, p95)})
        self.count = 0
        self._frames: dict[str, int] = {}

    def sample(self) -> None:
        row = {}
        for st in list(self.pipeline.stats.values()):
            frames = st.frames
            moved = frames != self._frames.get(st.name)
            self._frames[st.name] = frames
            p95 = st.latency_percentiles()["p95"] if moved and frames else None
            row[st.name] = (frames, st.keyframes + st.late_keyframes, p95)
        self.count += 1
        self.samples.append((self.count, time.time(), row))

    def rates(self) -> dict[str, tuple[float, int, int]]:
        """Per stream over the last `RATE_SAMPLES` samples: (seconds, frames, keyframes detected in
        time or late) made in them."""
        recent = list(self.samples)[-(RATE_SAMPLES + 1):]
        if len(recent) < 2:
            return {}
        (_, t0, first), (_, t1, last) = recent[0], recent[-1]
        return {name: (t1 - t0, max(0, f - first[name][0]), max(0, k - first[name][1]))
                for name, (f, k, _) in last.items() if name in first}

    def since(self, number: int) -> dict:
        if number > self.count:  # numbered by another run (the page outlived a restart): all of this one's
            number = 0
        kept = [s for s in list(self.samples) if s[0] > number]
        names = list(self.pipeline.stats)
        return {"every_s": HISTORY_EVERY_S, "next": self.count, "t": [round(t, 3) for _, t, _ in kept],
                "p95": {n: [row.get(n, (0, 0, None))[2] for _, _, row in kept] for n in names}}


class Viewers:
    """Bounds each viewer's preview rate: per (viewer, stream), the frame it was last given and when."""

    def __init__(self, fps: float):
        self.period = 1.0 / fps
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], tuple[float, tuple]] = {}

    def recent(self, key: tuple[str, str]) -> tuple | None:
        """What `key` was given less than a period ago (it gets that again), else None."""
        with self._lock:
            last = self._last.get(key)
        if last is not None and time.monotonic() - last[0] < VIEWER_SLACK * self.period:
            return last[1]
        return None

    def gave(self, key: tuple[str, str], frame: tuple) -> None:
        now = time.monotonic()
        with self._lock:
            self._last[key] = (now, frame)
            if len(self._last) > 1024:  # viewers come and go: forget those gone a minute
                self._last = {k: v for k, v in self._last.items() if now - v[0] < 60}


class Api:
    """The page and its API over one pipeline (a `Pipeline` or a `Supervisor`): each route's answer."""

    def __init__(self, pipeline: RunView, preview_fps: float):
        self.pipeline = pipeline
        self.preview_fps = preview_fps
        self.history = History(pipeline)
        self.viewers = Viewers(preview_fps)

    # -- what the page is made of ---------------------------------------------------------------

    # -- /api/streams ---------------------------------------------------------------------------

    def streams(self) -> Reply:
        p = self.pipeline
        preview = getattr(p, "preview", None)
        sources = p.source_configs()
        out = []
        for name, st in list(p.stats.items()):
            message = preview.newest_message(name) if preview is not None else None
            lines, zones = preview.geometry(name) if preview is not None else ([], [])
            source = sources.get(name)
            out.append({"name": name, "uri": mask_url(st.uri), "live": bool(getattr(source, "live", False)),
                        "state": st.state, "width": message["width"] if message else None,
                        "height": message["height"] if message else None,
                        "seq": message["seq"] if message else None, "fps": round(st.fps, 2), "frames": st.frames,
                        "lines": lines, "zones": zones})
        return json_reply({"state": pipeline_state(p), "preview_fps": self.preview_fps,
                           "budget_ms": p.config.runtime.budget_ms, "history": p.config.runtime.history is not None,
                           "streams": out})

    # -- /api/stats -----------------------------------------------------------------------------

    def _control(self, name: str) -> dict | None:
        controller = getattr(self.pipeline, "controller", None)
        if controller is not None and name in controller.shedders:
            state = controller.state(name)
            return {k: state[k] for k in ("level", "keyframe_stretch", "keyframe_wait", "shed_fraction")}
        held = self.pipeline.control_of(name)
        if held is None:
            return None
        stretch, wait, shed = held
        return {"level": None, "keyframe_stretch": stretch, "keyframe_wait": bool(wait), "shed_fraction": shed}

    def stats(self, query: dict) -> Reply:
        p = self.pipeline
        preview = getattr(p, "preview", None)
        rates = self.history.rates()
        streams, detect, seconds, frames, keyframes = {}, {"p50": 0.0, "p95": 0.0, "p99": 0.0}, 0.0, 0, 0
        for name, st in list(p.stats.items()):
            report = st.report(p.queue_depth(name))
            newest = preview.newest_message(name) if preview is not None else None
            s, f, k = rates.get(name, (0.0, 0, 0))
            seconds, frames, keyframes = max(seconds, s), frames + f, keyframes + k
            ms = report["stages_ms"]["detect"]
            if ms["p95"] > detect["p95"]:
                detect = ms
            streams[name] = {
                "state": st.state, "fps": report["fps"], "frames": st.frames, "latency_ms": report["latency_ms"],
                "keyframes": st.keyframes, "keyframe_rate": report["keyframe_rate"],
                "keyframes_per_s": round(k / s, 2) if s > 0 else 0.0,
                "late_keyframes": st.late_keyframes, "deferred_keyframes": st.deferred_keyframes,
                "displaced_keyframes": st.displaced_keyframes, "discarded_detections": st.discarded_detections,
                "dropped": st.dropped, "shed": st.shed, "lost": dict(st.lost), "queue_depth": report["queue_depth"], "detect_ms": ms,
                "clips_lost": st.clips_lost,
                "control": self._control(name),
                "counts": newest.get("counts") if newest is not None else None}
        controller = getattr(p, "controller", None)
        return json_reply({
            "ts": round(time.time(), 3), "state": pipeline_state(p), "budget_ms": p.config.runtime.budget_ms,
            "streams": streams,
            "detector": {"keyframes_per_s": round(keyframes / seconds, 2) if seconds > 0 else 0.0,
                         "detected_share": round(keyframes / frames, 4) if frames else 0.0, "detect_ms": detect},
            "control": None if controller is None else {"level": controller.level, "steps": controller.steps,
                                                         "room_steps": controller.room_steps,
                                                         "whole_groups": controller.whole_groups},
            "secondary": p.secondary_stats(), "segment": p.segment_stats(),
            "history": self.history.since(query_int(query, "history_since", 0))})

    # -- /api/events ----------------------------------------------------------------------------

    def events(self, query: dict) -> Reply:
        preview = getattr(self.pipeline, "preview", None)
        since = query_int(query, "since", 0)
        stored = self._stored_events(since)
        if stored is not None:  # runtime.history: the file's, which outlive the run
            return json_reply([{"index": i, "has_snapshot": preview is not None and preview.shot_of(m) is not None
                                or self._snapshot_path(m) is not None, "event": m} for i, m in stored])
        found = preview.events_since(since) if preview is not None else []
        return json_reply([{"index": i, "has_snapshot": shot, "event": m} for i, m, shot in found])

    def _stored(self, read):
        """`read(db)` on the history file; None without one, or while it cannot be read."""
        history = self.pipeline.config.runtime.history
        if history is None:
            return None
        try:
            with contextlib.closing(store.connect(str(history.path), readonly=True)) as db:
                return read(db)
        except sqlite3.Error as e:
            log.debug("history %s: %s", history.path, e)
            return None

    def _stored_events(self, since: int) -> list[tuple[int, dict]] | None:
        """The events after id `since` in the history file, the newest `EVENTS`."""
        return self._stored(lambda db: store.events_after(db, since, EVENTS))

    def stored_counts(self, query: dict) -> Reply:
        config = self.pipeline.config.runtime.history
        if config is None:
            return text_reply(404, "no history: set runtime.history in the pipeline file")
        numbers = {key: query_float(query, key, None, 0.0, MAX_UNIX_TIME) for key in ("since", "until")}
        bucket = query_int(query, "bucket_s", 60, 60, MAX_BUCKET_S)
        stream, rule = (query.get("stream") or [None])[0], (query.get("rule") or [None])[0]
        found = self._stored(lambda db: store.buckets(db, stream=stream, rule=rule, bucket_s=bucket, **numbers))
        if found is None:
            return text_reply(503, "the history file cannot be read now", {"Retry-After": "1"})
        return json_reply({"buckets": found})

    def _event(self, index: int) -> tuple[dict | None, bool]:
        """Event `index` as `/api/events` numbers it: (its message or None, whether it came from the
        history file, whose ids those are while it can be read; else the page's own numbers)."""
        stored = self._stored(lambda db: (store.event(db, index),))
        if stored is not None:
            return stored[0], True
        preview = getattr(self.pipeline, "preview", None)
        return (preview.event(index) if preview is not None else None), False

    def clip(self, index: int) -> Reply:
        """Event `index`'s clip (`analytics.clips`), once written: from the history file's events when
        there is one, else from those the page keeps; only files under the clips folder are served."""
        analytics = self.pipeline.config.analytics
        folder = analytics.clips.path if analytics is not None and analytics.clips is not None else None
        if folder is None:
            return text_reply(404, "no clips: set analytics.clips in the pipeline file")
        message, _ = self._event(index)
        clip = (message or {}).get("clip")
        if not clip:
            return text_reply(404, f"no clip for event {index}")
        path = Path(clip["path"])
        if not path.resolve().is_relative_to(Path(folder).resolve()):
            return text_reply(404, f"no clip for event {index}")
        try:
            body = path.read_bytes()
        except FileNotFoundError:
            gone = clip_gone(message, time.time())
            if gone is not None:  # lost (its event says so), or long overdue: it will never come
                return text_reply(410, f"clip of event {index}: {gone}")
            return Reply(503, "text/plain; charset=utf-8", b"not written yet: a clip is whole once post_s has passed\n",
                         {"Retry-After": "2"})
        except OSError as e:
            return text_reply(404, f"clip of event {index}: {e.strerror or e}")
        return Reply(200, "video/mp4", body)

    def snapshot(self, index: int) -> Reply:
        """Event `index`'s snapshot: the one the page keeps, else (an event of the history file) the
        JPEG written under `analytics.snapshots.path`, which outlives the run."""
        preview = getattr(self.pipeline, "preview", None)
        message, stored = self._event(index)
        kept = index if not stored else (preview.shot_of(message) if preview is not None and message else None)
        jpeg = preview.snapshot(kept) if preview is not None and kept is not None else None
        if jpeg is None and stored and message is not None:
            jpeg = self._snapshot_file(message)
        if jpeg is None:
            return text_reply(404, f"no snapshot kept for event {index}")
        return Reply(200, "image/jpeg", jpeg)

    def _snapshot_file(self, message: dict) -> bytes | None:
        """The JPEG `message`'s snapshot was written to (`_snapshot_path`), or None."""
        path = self._snapshot_path(message)
        try:
            return None if path is None else path.read_bytes()
        except OSError:
            return None

    def _snapshot_path(self, message: dict) -> Path | None:
        """The file `message`'s snapshot was written to, when it is there, under
        `analytics.snapshots.path` and at most `SNAPSHOT_FILE_BYTES`; else None."""
        analytics = self.pipeline.config.analytics
        shots = analytics.snapshots if analytics is not None else None
        path = (message.get("snapshot") or {}).get("path")
        if shots is None or shots.path is None or not isinstance(path, str):
            return None
        path = Path(path)
        try:
            inside = path.resolve().is_relative_to(Path(shots.path).resolve())
            return path if inside and path.stat().st_size <= SNAPSHOT_FILE_BYTES else None
        except (OSError, ValueError):
            return None

    # -- a stream's frames ----------------------------------------------------------------------

    def _preview_of(self, name: str):
        if name not in self.pipeline.stats:
            return None, text_reply(404, f"no stream named {name!r}")
        return getattr(self.pipeline, "preview", None), None  # None: not made yet

    def frame_jpeg(self, name: str) -> Reply:
        preview, refused = self._preview_of(name)
        if refused is not None:
            return refused
        made = preview.annotated_jpeg(name) if preview is not None else None
        if made is None:
            return Reply(503, "text/plain; charset=utf-8", b"no frame yet\n", {"Retry-After": "1"})
        seq, jpeg = made
        return Reply(200, "image/jpeg", jpeg, {"X-Streamlens-Seq": str(seq)})

    def preview_jpeg(self, name: str, query: dict, client: str) -> Reply:
        preview, refused = self._preview_of(name)
        if refused is not None:
            return refused
        key = ((query.get("viewer") or [client])[0][:64], name)
        frame = self.viewers.recent(key)  # asked again too soon: what it had
        if frame is None:
            frame = preview.preview_jpeg(name) if preview is not None else None
            if frame is None:
                return Reply(204)
            self.viewers.gave(key, frame)
        seq, jpeg, message = frame
        if seq == query_int(query, "after", None):
            return Reply(204)
        headers = {"X-Streamlens-Seq": str(seq)}
        header = ascii_json(message)
        if len(header) <= RESULT_HEADER_MAX:
            headers["X-Streamlens-Result"] = header
        return Reply(200, "image/jpeg", jpeg, headers)

    def result(self, name: str, query: dict) -> Reply:
        preview, refused = self._preview_of(name)
        if refused is not None:
            return refused
        seq = query_int(query, "seq", None)
        if preview is None:
            message = None
        elif seq is None:
            message = preview.newest_message(name)
        else:
            message = preview.message(name, seq)
        if message is None:
            return text_reply(404, f"{name}: no frame message kept for seq {seq}")
        return json_reply(message)

    def route(self, path: str, query: dict, client: str) -> Reply:
        """The answer to `path` (`query` as `parse_qs` makes it; `client`: the viewer's address); a
        number in either that is none or out of its range is a 400 (numbers.py)."""
        try:
            return self._route(path, query, client)
        except BadNumber as error:
            return text_reply(400, str(error))

    def _route(self, path: str, query: dict, client: str) -> Reply:
        if path in ("/", "/index.html"):
            return page_file("index.html")
        if path.startswith("/page/"):
            return page_file(path[len("/page/"):])
        if path == "/api/streams":
            return self.streams()
        if path == "/api/stats":
            return self.stats(query)
        if path == "/api/events":
            return self.events(query)
        if path == "/api/history":
            return self.stored_counts(query)
        parts = path.split("/")
        if len(parts) == 5 and parts[:3] == ["", "api", "events"] and parts[4] in ("snapshot.jpg", "clip.mp4") \
                and parts[3].isascii() and parts[3].isdigit():  # '²'.isdigit() too, and int() refuses it
            return (self.snapshot if parts[4] == "snapshot.jpg" else self.clip)(parse_int(parts[3], "event"))
        if len(parts) == 5 and parts[:3] == ["", "api", "streams"]:
            name, what = parts[3], parts[4]
            if what == "frame.jpg":
                return self.frame_jpeg(name)
            if what == "preview.jpg":
                return self.preview_jpeg(name, query, client)
            if what == "result":
                return self.result(name, query)
        return text_reply(404, "not found: try /, /api/streams, /api/stats, /api/events, /api/search, /metrics or "
                               "/healthz")
