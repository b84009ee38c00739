"""What `/metrics` and `/healthz` say of a run: the run's state (`pipeline_state`), the Prometheus
families made from its statistics at scrape time (`Collector`), and `/metrics` itself, written by
prometheus-client's own exposition (`Exposition`: its WSGI app, so the text format or OpenMetrics as
the scraper's `Accept` asks, gzip when it accepts it, and `name[]` to pick families).

Nothing is computed per request that the pipeline does not already keep: counters and latency
histograms live in each stream's `StreamStats`, and the collector turns them into families when
scraped, so a scrape costs the pipeline nothing on its hot path.

    streamlens_frames_total{stream="cam1"} 4231
    streamlens_latency_seconds_bucket{stream="cam1",le="0.033"} 4190
    streamlens_stage_seconds_bucket{stage="track",stream="cam1",le="0.0025"} 4228
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .reply import Reply

if TYPE_CHECKING:
    from .run_view import RunView

HEALTHY = ("running", "degraded")
UNHEALTHY_STREAM_STATES = ("stalled", "backing_off", "reconnecting", "connecting", "error", "failed")
#: the states of a stream that delivers frames: a file's (`running`) and a camera's (`streaming`)
DELIVERING_STATES = ("running", "streaming")


def pipeline_state(pipeline: RunView) -> str:
    """starting, running, degraded or stopping, from the streams' states."""
    states = [st.state for st in list(pipeline.stats.values())]
    if pipeline.stopping:
        return "stopping"
    if all(s == "starting" for s in states):
        return "starting"
    if any(s in UNHEALTHY_STREAM_STATES for s in states):
        return "degraded"
    return "running"


class Collector:
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
        clips_lost = CounterMetricFamily("streamlens_clips_lost", "Clips (analytics.clips) lost: not written, or "
                                         "never recorded", labels=label)
        deferred = CounterMetricFamily("streamlens_deferred_keyframes",
                                       "Keyframes put off while the detector was busy (a live stream's last one "
                                       "still with it, or its turn not yet come)",
                                       labels=label)
        displaced = CounterMetricFamily("streamlens_displaced_keyframes",
                                        "Keyframes taken back from the detector's queue, their place given to a "
                                        "frame worth more (published by motion)",
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
        yield from self._segment()
        for st in list(self.pipeline.stats.values()):
            v = [st.name]
            shed.add_metric(v, st.shed)
            clips_lost.add_metric(v, st.clips_lost)
            deferred.add_metric(v, st.deferred_keyframes)
            displaced.add_metric(v, st.displaced_keyframes)
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
        yield from (frames, keyframes, late, objects, dropped, lost, shed, deferred, displaced, discarded, depth, fps, up,
                    ended, stretch, waiting, shed_share, latency, stages, detect, clips_lost)
        refused = CounterMetricFamily("streamlens_zmq_refused",
                                      "Peers of a zmq sink refused at their handshake or disconnected, and topics "
                                      "a relay did not pass on, by reason: flood, peers, cooldown, key, topics",
                                      labels=["sink", "reason"])
        for where, reasons in self.pipeline.peer_refusals().items():
            for reason, n in reasons.items():
                refused.add_metric([where, reason], n)
        yield refused
        sink_lost = CounterMetricFamily(
            "streamlens_sink_dropped", "Messages a sink could not deliver (a slow push consumer, a server away, "
            "a full queue), by the sink's entry in the pipeline file", labels=["sink"])
        for where, n in self.pipeline.sink_losses().items():
            sink_lost.add_metric([where], n)
        yield sink_lost
        restarts = getattr(self.pipeline, "engine_restarts", None)  # runtime.workers: the supervisor's
        if restarts is not None:
            family = CounterMetricFamily("streamlens_engine_restarts", "Times an engine was started again after it died",
                                         labels=["engine"])
            for index, n in restarts.items():
                family.add_metric([str(index)], n)
            yield family

    def _segment(self):
        """The masks' figures (streamlens/segment), where this process makes them."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        figures = getattr(self.pipeline, "segment_stats", dict)()
        for key, what in (("encoded", "Keyframes SAM's image encoder ran on"),
                          ("cached", "Keyframes whose image embedding the cache had (an encoder run saved)"),
                          ("decoded", "Masks SAM's prompt decoder made"), ("masks", "Masks a -seg detector gave"),
                          ("dropped", "Keyframes the mask worker's queue had no room for"),
                          ("late", "Masks that came after their keyframe's result had gone out")):
            if isinstance(figures.get(key), (int, float)):
                family = CounterMetricFamily(f"streamlens_segment_{key}", what)
                family.add_metric([], figures[key])
                yield family
        if isinstance(figures.get("lag_s"), dict):  # from a keyframe coming to its masks applied
            family = GaugeMetricFamily("streamlens_segment_lag_seconds", "Mask lag, keyframe to masks applied",
                                       labels=["quantile"])
            for quantile, key in (("0.5", "p50"), ("0.95", "p95")):
                family.add_metric([quantile], figures["lag_s"][key])
            yield family

def health(pipeline: RunView) -> Reply:
    """`/healthz`: `{"state": ..., "streams": {name: state}}`, 200 while the run is `running` or
    `degraded`, 503 while `starting` or `stopping`."""
    state = pipeline_state(pipeline)
    body = {"state": state, "streams": {n: st.state for n, st in list(pipeline.stats.items())}}
    return Reply(200 if state in HEALTHY else 503, "application/json", json.dumps(body).encode())


class ServerCollector:
    """The HTTP server's own figures: connections open now, those it closed, by why (`over_limit`:
    to make room for a newcomer past its bound; `late`: no whole request head within its deadline),
    and the CPU time its threads used (`cpu_seconds()`)."""

    def __init__(self, connections, cpu_seconds):
        self.connections, self.cpu_seconds = connections, cpu_seconds

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        c = self.connections
        opened = GaugeMetricFamily("streamlens_http_connections", "HTTP connections open now")
        opened.add_metric([], c.open_now)
        closed = CounterMetricFamily("streamlens_http_connections_closed",
                                     "HTTP connections the server closed: over_limit (room made for a newcomer), "
                                     "late (no whole request head within the deadline)", labels=["why"])
        closed.add_metric(["over_limit"], c.closed_over_limit)
        closed.add_metric(["late"], c.closed_late)
        yield opened
        yield closed
        seconds = self.cpu_seconds()
        if seconds is not None:
            cpu = CounterMetricFamily("streamlens_http_cpu_seconds", "CPU time the HTTP server's threads used")
            cpu.add_metric([], seconds)
            yield cpu


class Exposition:
    """`/metrics` of one run through prometheus-client's WSGI app over a registry of its own (with
    the HTTP server's figures, `server`, when given). `reply()` runs the collectors: call it off the
    server's event loop."""

    def __init__(self, pipeline: RunView, server: ServerCollector | None = None):
        from prometheus_client import CollectorRegistry, make_wsgi_app

        self.registry = CollectorRegistry()
        self.registry.register(Collector(pipeline))
        if server is not None:
            self.registry.register(server)
        self._app = make_wsgi_app(self.registry)

    def reply(self, query_string: str, accept: str, accept_encoding: str) -> Reply:
        """The scrape's answer (a HEAD is asked as a GET: the server leaves its body out)."""
        said: list = []
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": query_string,
                   "HTTP_ACCEPT": accept, "HTTP_ACCEPT_ENCODING": accept_encoding}
        body = b"".join(self._app(environ, lambda status, headers: said.extend((status, headers))))
        status, headers = said
        headers = dict(headers)
        ctype = headers.pop("Content-Type", "text/plain; charset=utf-8")
        return Reply(int(status.split()[0]), ctype, body, headers)
