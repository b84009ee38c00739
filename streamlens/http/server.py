"""The HTTP server of a run, on 127.0.0.1 by default: `/metrics` (Prometheus text), `/healthz`, and
the live page at `/` with the JSON API behind it (`runtime.http`; `page: false` leaves the first two).

Nothing is computed per request that the pipeline does not already keep: counters and latency
histograms live in each stream's `StreamStats`, and a collector turns them into Prometheus
families when scraped, so a scrape costs the pipeline nothing on its hot path.

    streamlens_frames_total{stream="cam1"} 4231
    streamlens_latency_seconds_bucket{stream="cam1",le="0.033"} 4190
    streamlens_stage_seconds_bucket{stage="track",stream="cam1",le="0.0025"} 4228

`/healthz` answers JSON: `{"state": "running", "streams": {"cam1": "running"}}`, with HTTP 200 while
the pipeline is `running` or `degraded` (a stream stalled, reconnecting or failed) and 503 while it
is `starting` or `stopping`.

The page and its API (every answer is JSON unless said; `Cache-Control: no-store`):

- `/` the page (`streamlens/http/page/index.html`), `/page/<file>` its script and style sheet. It
  loads nothing from anywhere else (a Content-Security-Policy of `'self'` says so to the browser).
- `/api/streams`: `{"state", "frames", "note", "preview_fps", "budget_ms", "streams": [...]}`, per
  stream its `name`, `uri` (credentials masked: `rtsp://***@cam/1`), `live`, `state` (starting,
  running, streaming, connecting, backing_off, reconnecting, stalled, ended, truncated, stopped,
  error), `width`/`height`/`seq` of its newest frame (null before it), current `fps`, `frames`,
  and its analytics' `lines` (`{"name", "points"}`) and `zones` (`{"name", "polygon"}`) in source
  pixels as they are applied. `frames` is false, and `note` says why, where no live frames can be
  shown: with `runtime.workers` > 1 the frames stay in the engine processes, the page shows figures.
- `/api/stats[?history_since=N]`: `{"ts", "state", "budget_ms", "streams", "detector", "control",
  "secondary", "history"}`. Per stream: `state`, `fps`, `frames`, `latency_ms` (p50/p95/p99 end to
  end over the last 256 frames), `keyframes` and `keyframe_rate` (detected in time: how many, and
  their share of the last 256 frames), `keyframes_per_s` (sent to the detector, in time or late,
  over the last 10 s), `late_keyframes` (published by motion, their detections applied when back),
  `deferred_keyframes`, `discarded_detections`, `dropped`, `shed`, `lost` (by cause),
  `queue_depth`, `detect_ms` (the detector call per keyframe's batch, p50/p95/p99 of the last 64),
  `control` (the budget controller's `level`, `keyframe_stretch`, `keyframe_wait`,
  `shed_fraction`; null where it does not watch the stream) and `counts` (the newest frame's: per
  line `{"in", "out", "classes"}`, per zone the objects in it now). `detector`: its load over the
  last 10 s, all streams together: `keyframes_per_s`, `detected_share` (the share of frames it ran
  on), and the slowest stream's `detect_ms`. `control`: the controller's `level` and `steps` (null
  without one). `secondary`: the secondary models' figures. `history`: `{"every_s": 1, "next": M,
  "t": [...], "p95": {stream: [...]}}`, a sample a second over the last 10 minutes taken by a
  thread of the server (null: no frame that second); with `history_since=N` only the samples after
  N (M: the newest sample's number).
- `/api/events?since=N`: a list of the events after index N (all streams, the last 500 kept),
  oldest first: `[{"index": 18, "has_snapshot": true, "event": {"type": "event", "stream": "cam1",
  "event": "object_start", ...}}]`; `/api/events/<N>/snapshot.jpg` its snapshot JPEG (404 once no
  longer kept or when it has none).
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

Security. The server listens on `runtime.http.host`, 127.0.0.1 unless the file says otherwise. When
that is not a loopback address, every route but `/healthz` needs the token held by the environment
variable that `runtime.http.token_env` names (STREAMLENS_HTTP_TOKEN): as `Authorization: Bearer
<token>`, or once as `?token=<token>`, which sets an HttpOnly, SameSite=Strict cookie (a digest of
the token, never the token) that the page's own requests carry; `/?token=` then redirects to `/`, so
the token does not stay in the address bar. Without it: 401. Off loopback with that variable unset
or empty, `start()` fails with one line naming `runtime.http.token_env`. Over plain HTTP the token
crosses the network in clear: beyond a trusted network, put a TLS proxy in front. Camera URLs are
shown with their credentials masked, everywhere.

A slow browser never slows the pipeline: the request handlers run on threads of their own and only
read references the preview sink keeps (streamlens/http/preview.py), and encode there.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections import deque
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from ..errors import StreamlensError
from ..urls import is_loopback, mask_url
from ..wire.codec import finite, json_bytes

if TYPE_CHECKING:
    from .run_view import RunView

log = logging.getLogger("streamlens.http")

HEALTHY = ("running", "degraded")
UNHEALTHY_STREAM_STATES = ("stalled", "backing_off", "reconnecting", "connecting", "error", "failed")
#: the states of a stream that delivers frames: a file's (`running`) and a camera's (`streaming`)
DELIVERING_STATES = ("running", "streaming")


def pipeline_state(pipeline: RunView) -> str:
    """starting, running, degraded or stopping, from the streams' states."""
    states = [st.state for st in pipeline.stats.values()]
    if pipeline.stopping:
        return "stopping"
    if all(s == "starting" for s in states):
        return "starting"
    if any(s in UNHEALTHY_STREAM_STATES for s in states):
        return "degraded"
    return "running"


class _Collector:
    """Turns the pipeline's stats into Prometheus metric families at scrape time."""

    def __init__(self, pipeline: RunView):
        self.pipeline = pipeline

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        label = ["stream"]
        frames = CounterMetricFamily("streamlens_frames", "Frames published", labels=label)
        keyframes = CounterMetricFamily("streamlens_keyframes", "Frames the detector ran on", labels=label)
        late = CounterMetricFamily("streamlens_late_keyframes",
                                   "Keyframes published by motion because the detector was late", labels=label)
        objects = CounterMetricFamily("streamlens_objects", "Objects published", labels=label)
        dropped = CounterMetricFamily("streamlens_dropped_frames",
                                      "Frames dropped before publication, anywhere (shed frames included)",
                                      labels=label)
        lost = CounterMetricFamily("streamlens_lost",
                                   "Frames (corrupt: packets) lost, by cause: corrupt, decoder, refused, inbox, stale, "
                                   "shed",
                                   labels=["stream", "cause"])
        ended = GaugeMetricFamily("streamlens_stream_ended",
                                  "1 once the stream has ended, labelled with how: end, truncated, stopped, error",
                                  labels=["stream", "reason"])
        shed = CounterMetricFamily("streamlens_shed_frames", "Frames the budget controller dropped", labels=label)
        deferred = CounterMetricFamily("streamlens_deferred_keyframes",
                                       "Keyframes put off while the detector was busy (a live stream's last one "
                                       "still with it, or its turn not yet come)",
                                       labels=label)
        discarded = CounterMetricFamily("streamlens_discarded_detections",
                                        "Keyframes whose detections came back too late for the tracker to apply",
                                        labels=label)
        stretch = GaugeMetricFamily("streamlens_keyframe_stretch",
                                    "Factor the budget controller puts on the keyframe intervals", labels=label)
        waiting = GaugeMetricFamily("streamlens_keyframe_wait",
                                    "1 while the stream's keyframes wait for their detections (0: published by "
                                    "motion, corrected when they come)", labels=label)
        shed_share = GaugeMetricFamily("streamlens_shed_fraction",
                                       "Share of the stream's frames the budget controller drops now", labels=label)
        depth = GaugeMetricFamily("streamlens_queue_depth", "Frames waiting to be processed", labels=label)
        fps = GaugeMetricFamily("streamlens_fps", "Current frames per second", labels=label)
        up = GaugeMetricFamily("streamlens_stream_up", "1 while the stream delivers frames", labels=label)
        latency = HistogramMetricFamily("streamlens_latency_seconds",
                                        "From a frame becoming available to every sink having published it",
                                        labels=label)
        stages = HistogramMetricFamily("streamlens_stage_seconds",
                                       "Time per stage: decode, queue, batch, detect, track, publish",
                                       labels=["stream", "stage"])
        detect = HistogramMetricFamily("streamlens_detect_seconds", "Detector time per keyframe batch",
                                       labels=label)
        model = ["model"]
        secondary = {"calls": CounterMetricFamily("streamlens_secondary_calls", "Looks a secondary entry answered",
                                                  labels=model),
                     "computed": CounterMetricFamily("streamlens_secondary_computed",
                                                     "Crops a secondary model ran on", labels=model),
                     "cached": CounterMetricFamily("streamlens_secondary_cached",
                                                   "Crops whose outputs the cache had (compute saved)", labels=model),
                     "dropped": CounterMetricFamily("streamlens_secondary_dropped",
                                                    "Crops dropped: the secondary worker's queue was full",
                                                    labels=model)}
        cache = {"hits": CounterMetricFamily("streamlens_cache_hits", "Secondary cache lookups found"),
                 "misses": CounterMetricFamily("streamlens_cache_misses", "Secondary cache lookups not found"),
                 "evictions": CounterMetricFamily("streamlens_cache_evictions", "Outputs the memory cache let go")}
        for name, figures in self.pipeline.secondary_stats().items():
            for key, family in (cache if name == "cache" else secondary).items():
                if isinstance(figures.get(key), (int, float)):
                    family.add_metric([] if name == "cache" else [name], figures[key])
        yield from secondary.values()
        yield from cache.values()
        for st in list(self.pipeline.stats.values()):
            v = [st.name]
            shed.add_metric(v, st.shed)
            deferred.add_metric(v, st.deferred_keyframes)
            discarded.add_metric(v, st.discarded_detections)
            held = self.pipeline.control_of(st.name)
            if held is not None:
                stretch.add_metric(v, held[0])
                waiting.add_metric(v, 1.0 if held[1] else 0.0)
                shed_share.add_metric(v, held[2])
            frames.add_metric(v, st.frames)
            keyframes.add_metric(v, st.keyframes)
            late.add_metric(v, st.late_keyframes)
            objects.add_metric(v, st.objects)
            dropped.add_metric(v, st.dropped)
            depth.add_metric(v, self.pipeline.queue_depth(st.name))
            fps.add_metric(v, st.fps)
            up.add_metric(v, 1.0 if st.state in DELIVERING_STATES else 0.0)
            for cause, n in dict(st.lost).items():
                lost.add_metric([st.name, cause], n)
            if st.reason is not None:
                ended.add_metric([st.name, st.reason], 1.0)
            series = [(latency, v, st.latency), (detect, v, st.stages["detect"])]
            series += [(stages, [st.name, stage], hist) for stage, hist in st.stages.items()]
            for family, labels, hist in series:
                buckets = [(str(b / 1000), c) for b, c in zip(hist.bounds_ms, hist.cumulative())]
                buckets.append(("+Inf", hist.count))
                family.add_metric(labels, buckets, hist.sum_ms / 1000)
        yield from (frames, keyframes, late, objects, dropped, lost, shed, deferred, discarded, depth, fps, up, ended, stretch,
                    waiting, shed_share, latency, stages, detect)
        restarts = getattr(self.pipeline, "engine_restarts", None)  # runtime.workers: the supervisor's
        if restarts is not None:
            family = CounterMetricFamily("streamlens_engine_restarts", "Times an engine was started again after it died",
                                         labels=["engine"])
            for index, n in restarts.items():
                family.add_metric([str(index)], n)
            yield family


#: the page's files: served at `/` (index.html) and `/page/<file>`
PAGE_DIR = Path(__file__).resolve().parent / "page"
_CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                  ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}
#: what the page may load: its own files and the API, nothing from anywhere else
_PAGE_POLICY = ("default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'; "
                "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
#: the latency history: one sample a second, this many kept (10 minutes)
HISTORY_EVERY_S, HISTORY_KEEP = 1.0, 600
#: the window of the detector's figures and of `keyframes_per_s`, in history samples
RATE_SAMPLES = 10
#: a frame message rides in the preview's `X-Streamlens-Result` header up to this size
RESULT_HEADER_MAX = 16 * 1024
#: a viewer asking again within this share of its preview period gets the frame it had
VIEWER_SLACK = 0.8
#: idle keep-alive connections are closed after this many seconds
IDLE_TIMEOUT_S = 15


class _History:
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

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(HISTORY_EVERY_S):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a figure missed now is taken again in a second
                log.debug("latency history", exc_info=True)

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


class _Viewers:
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


class _Reply:
    """An answer: status, content type, body and extra headers."""

    __slots__ = ("code", "ctype", "body", "headers")

    def __init__(self, code: int, ctype: str = "application/json", body: bytes = b"", headers: dict | None = None):
        self.code, self.ctype, self.body, self.headers = code, ctype, body, headers or {}


def _json(value, code: int = 200) -> _Reply:
    return _Reply(code, "application/json", json_bytes(value))


def _text(code: int, line: str) -> _Reply:
    return _Reply(code, "text/plain; charset=utf-8", (line + "\n").encode())


def _ascii_json(value) -> str:
    """Compact JSON in ASCII (fit for a header), NaN and infinities as null."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(finite(value), separators=(",", ":"))


def _int(query: dict, key: str, default: int | None = None) -> int | None:
    try:
        return int(query[key][0])
    except (KeyError, IndexError, ValueError):
        return default


class _Api:
    """The page and its API over one pipeline (a `Pipeline` or a `Supervisor`): each route's answer."""

    def __init__(self, pipeline: RunView, preview_fps: float):
        self.pipeline = pipeline
        self.preview_fps = preview_fps
        self.history = _History(pipeline)
        self.viewers = _Viewers(preview_fps)

    # -- what the page is made of ---------------------------------------------------------------

    def page_file(self, name: str) -> _Reply:
        path = PAGE_DIR / name
        ctype = _CONTENT_TYPES.get(path.suffix)
        if ctype is None or name not in _page_files():
            return _text(404, f"not found: /page/{name}")
        return _Reply(200, ctype, path.read_bytes(), {"Content-Security-Policy": _PAGE_POLICY,
                                                      "Cache-Control": "no-cache"})

    # -- /api/streams ---------------------------------------------------------------------------

    def _frames_note(self) -> str | None:
        """Why this run shows no live frames, or None where it does."""
        if self.pipeline.shows_frames:
            return None
        return "live frames are not available with several engines (runtime.workers > 1): figures only"

    def streams(self) -> _Reply:
        p = self.pipeline
        preview = getattr(p, "preview", None)
        sources = {s.name: s for s in p.config.sources}
        out = []
        for name, st in list(p.stats.items()):
            newest = preview.newest(name) if preview is not None else None
            message = newest[1] if newest is not None else None
            lines, zones = preview.geometry(name) if preview is not None else ([], [])
            source = sources.get(name)
            out.append({"name": name, "uri": mask_url(st.uri), "live": bool(getattr(source, "live", False)),
                        "state": st.state, "width": message["width"] if message else None,
                        "height": message["height"] if message else None,
                        "seq": message["seq"] if message else None, "fps": round(st.fps, 2), "frames": st.frames,
                        "lines": lines, "zones": zones})
        note = self._frames_note()
        return _json({"state": pipeline_state(p), "frames": note is None, "note": note,
                      "preview_fps": self.preview_fps, "budget_ms": p.config.runtime.budget_ms, "streams": out})

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

    def stats(self, query: dict) -> _Reply:
        p = self.pipeline
        preview = getattr(p, "preview", None)
        rates = self.history.rates()
        streams, detect, seconds, frames, keyframes = {}, {"p50": 0.0, "p95": 0.0, "p99": 0.0}, 0.0, 0, 0
        for name, st in list(p.stats.items()):
            report = st.report(p.queue_depth(name))
            newest = preview.newest(name) if preview is not None else None
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
                "discarded_detections": st.discarded_detections, "dropped": st.dropped, "shed": st.shed,
                "lost": dict(st.lost), "queue_depth": report["queue_depth"], "detect_ms": ms,
                "control": self._control(name),
                "counts": newest[1].get("counts") if newest is not None else None}
        controller = getattr(p, "controller", None)
        return _json({
            "ts": round(time.time(), 3), "state": pipeline_state(p), "budget_ms": p.config.runtime.budget_ms,
            "streams": streams,
            "detector": {"keyframes_per_s": round(keyframes / seconds, 2) if seconds > 0 else 0.0,
                         "detected_share": round(keyframes / frames, 4) if frames else 0.0, "detect_ms": detect},
            "control": None if controller is None else {"level": controller.level, "steps": controller.steps},
            "secondary": p.secondary_stats(),
            "history": self.history.since(_int(query, "history_since", 0))})

    # -- /api/events ----------------------------------------------------------------------------

    def events(self, query: dict) -> _Reply:
        preview = getattr(self.pipeline, "preview", None)
        found = preview.events_since(_int(query, "since", 0)) if preview is not None else []
        return _json([{"index": i, "has_snapshot": shot, "event": m} for i, m, shot in found])

    def snapshot(self, index: int) -> _Reply:
        preview = getattr(self.pipeline, "preview", None)
        jpeg = preview.snapshot(index) if preview is not None else None
        if jpeg is None:
            return _text(404, f"no snapshot kept for event {index}")
        return _Reply(200, "image/jpeg", jpeg)

    # -- a stream's frames ----------------------------------------------------------------------

    def _preview_of(self, name: str):
        if name not in self.pipeline.stats:
            return None, _text(404, f"no stream named {name!r}")
        preview = getattr(self.pipeline, "preview", None)
        note = self._frames_note()
        if note is not None:
            return None, _text(404, note)
        return preview, None  # None: not made yet

    def frame_jpeg(self, name: str) -> _Reply:
        preview, refused = self._preview_of(name)
        if refused is not None:
            return refused
        made = preview.annotated_jpeg(name) if preview is not None else None
        if made is None:
            return _Reply(503, "text/plain; charset=utf-8", b"no frame yet\n", {"Retry-After": "1"})
        seq, jpeg = made
        return _Reply(200, "image/jpeg", jpeg, {"X-Streamlens-Seq": str(seq)})

    def preview_jpeg(self, name: str, query: dict, client: str) -> _Reply:
        preview, refused = self._preview_of(name)
        if refused is not None:
            return refused
        key = ((query.get("viewer") or [client])[0][:64], name)
        frame = self.viewers.recent(key)  # asked again too soon: what it had
        if frame is None:
            frame = preview.preview_jpeg(name) if preview is not None else None
            if frame is None:
                return _Reply(204)
            self.viewers.gave(key, frame)
        seq, jpeg, message = frame
        if seq == _int(query, "after"):
            return _Reply(204)
        headers = {"X-Streamlens-Seq": str(seq)}
        header = _ascii_json(message)
        if len(header) <= RESULT_HEADER_MAX:
            headers["X-Streamlens-Result"] = header
        return _Reply(200, "image/jpeg", jpeg, headers)

    def result(self, name: str, query: dict) -> _Reply:
        preview, refused = self._preview_of(name)
        if refused is not None:
            return refused
        seq = _int(query, "seq")
        if preview is None:
            message = None
        elif seq is None:
            newest = preview.newest(name)
            message = newest[1] if newest is not None else None
        else:
            message = preview.message(name, seq)
        if message is None:
            return _text(404, f"{name}: no frame message kept for seq {seq}")
        return _json(message)


def _page_files() -> set[str]:
    try:
        return {p.name for p in PAGE_DIR.iterdir() if p.is_file()}
    except OSError:
        return set()


def _http_config(pipeline: RunView):
    """The pipeline's `runtime.http` section (defaults where it has none)."""
    from ..config.model import HttpConfig

    runtime = getattr(getattr(pipeline, "config", None), "runtime", None)
    return getattr(runtime, "http", None) or HttpConfig()


class MetricsServer:
    """Serves `/metrics`, `/healthz`, and the live page and its API (`runtime.http.page`), for one
    pipeline on a thread of its own; see the module's docstring for the routes and the token.

    `port=0` picks a free port (read `.port` after `start()`)."""

    def __init__(self, pipeline: RunView, host: str = "127.0.0.1", port: int = 9464):
        from prometheus_client import CollectorRegistry

        self.pipeline = pipeline
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(pipeline))
        self.host, self.port = host, port
        http = _http_config(pipeline)
        self.token_env = http.token_env
        self._api = _Api(pipeline, http.preview_fps) if http.page else None
        self._token: str | None = None  # None: on loopback, no token asked
        self._cookie = ""  # the cookie's name and value (a digest of the token)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False  # set once closed: connections still kept alive get their last answer

    def _read_token(self) -> None:
        if is_loopback(self.host):
            return
        token = os.environ.get(self.token_env, "")
        if not token:
            raise StreamlensError(
                f"runtime.http.token_env: {self.token_env} is not set: listening on {self.host or 'every address'} "
                f"(not a loopback address), every route but /healthz needs the access token it holds; set it, "
                f"or listen on 127.0.0.1")
        self._token = token
        self._cookie = hmac.new(token.encode(), b"streamlens page cookie", hashlib.sha256).hexdigest()

    def _allowed(self, headers, query: dict) -> tuple[bool, bool]:
        """(whether the request carries the token, whether it came as `?token=`)."""
        if self._token is None:
            return True, False
        token = self._token
        auth = headers.get("Authorization", "")
        if auth[:7].lower() == "bearer " and hmac.compare_digest(auth[7:].strip().encode(), token.encode()):
            return True, False
        try:
            jar = SimpleCookie(headers.get("Cookie", ""))
        except CookieError:
            jar = SimpleCookie()
        morsel = jar.get(self._cookie_name)
        if morsel is not None and hmac.compare_digest(morsel.value.encode(), self._cookie.encode()):
            return True, False
        given = (query.get("token") or [""])[0]
        if given and hmac.compare_digest(given.encode(), token.encode()):
            return True, True
        return False, False

    @property
    def _cookie_name(self) -> str:
        return f"streamlens_{self.port}"  # cookies ignore ports: each server its own

    def _route(self, path: str, query: dict, client: str) -> _Reply:
        api = self._api
        if api is None:
            return _text(404, "not found: try /metrics or /healthz")
        if path in ("/", "/index.html"):
            return api.page_file("index.html")
        if path.startswith("/page/"):
            return api.page_file(path[len("/page/"):])
        if path == "/api/streams":
            return api.streams()
        if path == "/api/stats":
            return api.stats(query)
        if path == "/api/events":
            return api.events(query)
        parts = path.split("/")
        if len(parts) == 5 and parts[:3] == ["", "api", "events"] and parts[4] == "snapshot.jpg" and parts[3].isdigit():
            return api.snapshot(int(parts[3]))
        if len(parts) == 5 and parts[:3] == ["", "api", "streams"]:
            name, what = parts[3], parts[4]
            if what == "frame.jpg":
                return api.frame_jpeg(name)
            if what == "preview.jpg":
                return api.preview_jpeg(name, query, client)
            if what == "result":
                return api.result(name, query)
        return _text(404, "not found: try /, /api/streams, /api/stats, /api/events, /metrics or /healthz")

    def start(self) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        self._read_token()
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: a viewer's requests reuse one connection
            timeout = IDLE_TIMEOUT_S

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                try:
                    self._get()
                except (BrokenPipeError, ConnectionResetError, TimeoutError):
                    self.close_connection = True  # the viewer went away
                except Exception as e:  # noqa: BLE001 - one request fails, never the server
                    log.debug("http %s", self.path, exc_info=True)
                    self._send(_text(500, f"internal error: {type(e).__name__}: {e}"))

            def _get(self) -> None:
                url = urlsplit(self.path)
                path, query = url.path, parse_qs(url.query)
                if server_self._closed:  # a connection kept alive past the end: this answer is its last
                    self.close_connection = True
                    if path not in ("/healthz", "/metrics"):
                        self._send(_text(503, "the run has ended"))
                        return
                if path == "/healthz":
                    p = server_self.pipeline
                    state = pipeline_state(p)
                    body = {"state": state, "streams": {n: st.state for n, st in p.stats.items()}}
                    self._send(_Reply(200 if state in HEALTHY else 503, "application/json", json.dumps(body).encode()))
                    return
                allowed, by_query = server_self._allowed(self.headers, query)
                if not allowed:
                    self._send(_Reply(401, "text/plain; charset=utf-8",
                                      b"unauthorized: this server asks for its access token: send it as "
                                      b"Authorization: Bearer <token>, or open /?token=<token> once\n",
                                      {"WWW-Authenticate": 'Bearer realm="streamlens"'}))
                    return
                cookie = {}
                if by_query:
                    cookie = {"Set-Cookie": f"{server_self._cookie_name}={server_self._cookie}; HttpOnly; "
                                            f"SameSite=Strict; Path=/"}
                    if path in ("/", "/index.html"):  # the token leaves the address bar
                        self._send(_Reply(303, headers={"Location": "/", **cookie}))
                        return
                if path == "/metrics":
                    reply = _Reply(200, CONTENT_TYPE_LATEST, generate_latest(server_self.registry))
                else:
                    reply = server_self._route(path, query, self.client_address[0])
                reply.headers.update(cookie)
                self._send(reply)

            def _send(self, reply: _Reply) -> None:
                self.send_response(reply.code)
                if reply.code not in (204, 304):
                    self.send_header("Content-Type", reply.ctype)
                    self.send_header("Content-Length", str(len(reply.body)))
                if reply.ctype.startswith(("application/json", "image/")) or reply.code == 204:
                    self.send_header("Cache-Control", "no-store")
                self.send_header("X-Content-Type-Options", "nosniff")
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if reply.code not in (204, 304):
                    self.wfile.write(reply.body)

            def log_message(self, *args) -> None:  # quiet: no line per request
                pass

        try:
            self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        except OSError as e:
            raise StreamlensError(f"http.port: cannot listen on {self.host}:{self.port}: {e.strerror}") from None
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)
        self._thread.start()
        if self._api is not None:
            threading.Thread(target=self._api.history.run, args=(self._stop,), name="http-history",
                             daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        if self._server is not None:
            server, self._server = self._server, None
            server.shutdown()
            server.server_close()
            self._closed = True
