"""Health and metrics over HTTP, on 127.0.0.1 by default: `/metrics` (Prometheus text) and `/healthz`.

Nothing is computed per request that the pipeline does not already keep: counters and latency
histograms live in each stream's `StreamStats`, and a collector turns them into Prometheus
families when scraped, so a scrape costs the pipeline nothing on its hot path.

    streamlens_frames_total{stream="cam1"} 4231
    streamlens_latency_seconds_bucket{stream="cam1",le="0.033"} 4190
    streamlens_stage_seconds_bucket{stage="track",stream="cam1",le="0.0025"} 4228

`/healthz` answers JSON: `{"state": "running", "streams": {"cam1": "running"}}`, with HTTP 200 while
the pipeline is `running` or `degraded` (a stream stalled, reconnecting or failed) and 503 while it
is `starting` or `stopping`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from ..errors import StreamlensError

if TYPE_CHECKING:
    from ..graph.runtime import Pipeline

HEALTHY = ("running", "degraded")
UNHEALTHY_STREAM_STATES = ("stalled", "backing_off", "reconnecting", "connecting", "error", "failed")
#: the states of a stream that delivers frames: a file's (`running`) and a camera's (`streaming`)
DELIVERING_STATES = ("running", "streaming")


def pipeline_state(pipeline: Pipeline) -> str:
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

    def __init__(self, pipeline: Pipeline):
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
                                   "Frames (corrupt: packets) lost, by cause: corrupt, decoder, inbox, stale, shed",
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


class MetricsServer:
    """Serves `/metrics` and `/healthz` for one pipeline on a thread of its own.

    `port=0` picks a free port (read `.port` after `start()`)."""

    def __init__(self, pipeline: Pipeline, host: str = "127.0.0.1", port: int = 9464):
        from prometheus_client import CollectorRegistry

        self.pipeline = pipeline
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(pipeline))
        self.host, self.port = host, port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        server_self = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(server_self.registry))
                elif path == "/healthz":
                    p = server_self.pipeline
                    state = pipeline_state(p)
                    body = {"state": state, "streams": {n: st.state for n, st in p.stats.items()}}
                    self._send(200 if state in HEALTHY else 503, "application/json", json.dumps(body).encode())
                else:
                    self._send(404, "text/plain", b"not found: try /metrics or /healthz\n")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

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

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
