"""The `runtime` section: queues, mode, the budget, HTTP, workers and the cluster."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema

from .. import cpu
from .common import _ENV_NAME, MAX_MS, MAX_QUEUE_SIZE, MAX_THREADS, MAX_WORKERS, PathKey, _Keys
from .problems import invalid, show
from .secondary import CacheConfig
from .sources import LIVE_SCHEMES

#: the URL schemes of cameras that a stream added over HTTP may use unless `runtime.http.add_schemes`
#: says otherwise: protocols on which the run only ever connects out (udp, rtp and tcp left out: udp
#: and rtp receive on a local port, tcp may be told to listen)
CAMERA_SCHEMES = ("rtsp", "rtsps", "http", "https", "rtmp", "rtmps", "srt")
#: `runtime.max_streams: auto`: streams per usable CPU core, and never fewer than `MIN_AUTO_STREAMS`.
#: A 720p H.264 camera at 25 fps costs about an eighth of a core to decode (5 ms a frame); four per
#: core leaves half the machine to the detector, the tracker and the sinks
STREAMS_PER_CORE, MIN_AUTO_STREAMS = 4, 8
#: the most streams `runtime.max_streams` may allow
MAX_STREAMS = 4096

#: a host name or a numeric address (IPv6 in brackets), without a port: an entry of `allowed_hosts`
_HOST_NAME = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)$"


class HttpConfig(_Keys):
    """`/metrics`, `/healthz`, the live page at `/` and its JSON API over HTTP (streamlens/http)."""

    host: str = Field("127.0.0.1", description="the address listened on (off loopback, every route but "
                                               "/healthz asks for the token)")
    allowed_hosts: list[Annotated[str, Field(pattern=_HOST_NAME)]] = Field(
        default_factory=list, max_length=64,
        description="host names the server answers for beside its own address (and localhost, 127.0.0.1, [::1] on "
                    "loopback): a name a proxy forwards under; a request naming any other Host gets 403")
    require_token: bool = Field(False, description="ask for the token on loopback too (a server behind a proxy); "
                                                   "off loopback it is always asked for")
    port: int | None = Field(None, ge=0, le=65535, description="the port (0: any free one; default: no HTTP server)")
    page: bool = Field(True, description="serve the live page at / and its API under /api")
    manage: bool = Field(True, description="with the page: streams added (POST /api/streams) and removed "
                                           "(DELETE /api/streams/<name>) while running, with the page's "
                                           "authentication")
    preview_fps: float = Field(5.0, gt=0, le=60, description="frames per second a viewer's preview gets, at most")
    token_env: str = Field("STREAMLENS_HTTP_TOKEN", pattern=_ENV_NAME,
                           description="the environment variable holding the access token, at least 16 characters "
                                       "(host off loopback, or require_token)")
    add_schemes: list[Literal[LIVE_SCHEMES]] = Field(
        list(CAMERA_SCHEMES), max_length=len(LIVE_SCHEMES),
        description="the URL schemes a stream added over HTTP (POST /api/streams) may use; it never listens "
                    "whatever they are (no listen option, no bind address, udp and rtp only from a multicast group)")
    add_folders: list[PathKey] = Field(
        [], max_length=64,
        description="the folders (relative to the pipeline file) whose video files, and devices (/dev/v4l, /dev), "
                    "a stream added over HTTP may read; default none: only camera URLs")


def _workers(value: Any) -> Any:
    if value == "auto" or isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_WORKERS:
        return value
    raise invalid(f"expected an integer from 1 to {MAX_WORKERS} or auto, got {show(value)}")


def _max_streams(value: Any) -> Any:
    if value == "auto" or isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_STREAMS:
        return value
    raise invalid(f"expected an integer from 1 to {MAX_STREAMS} or auto, got {show(value)}")


class ClusterConfig(_Keys):
    """`runtime.cluster`: the engines as Ray actors (see streamlens/scale/ray.py)."""

    address: str | None = Field(None, description="the Ray cluster's address: HOST:PORT of its head, or auto (the "
                                                  "cluster this machine is part of); default: --cluster, else a "
                                                  "cluster of this machine alone, which Ray starts")
    cpus: float = Field(1.0, gt=0, le=MAX_THREADS, description="CPUs each engine asks for")
    gpus: float = Field(0.0, ge=0, le=MAX_THREADS, description="GPUs each engine asks for (a fraction shares one)")


class HistoryConfig(_Keys):
    """`runtime.history`: every event and the counts per minute in SQLite (see streamlens/history)."""

    path: PathKey = Field(description="the SQLite file (relative to the pipeline file); made if missing, "
                                      "kept across runs")
    keep_days: float = Field(90.0, gt=0, le=36500, description="how long events and counts are kept")
    queue_size: int = Field(10_000, ge=1, le=1_000_000, description="events held for writing; when full, "
                                                                        "the oldest is dropped and counted")

    @property
    def type(self) -> str:
        """Written like a sink (the supervisor writes it once, from every engine's events)."""
        return "history"


class RuntimeConfig(_Keys):
    """The `runtime` section."""

    queue_size: int = Field(8, ge=1, le=MAX_QUEUE_SIZE, description="frames queued per stream before the engine")
    mode: Literal["realtime", "bulk"] = Field("realtime", description="bulk: archives as fast as the machine goes")
    http: HttpConfig = Field(default_factory=HttpConfig)
    budget_ms: float = Field(33.0, ge=1, le=MAX_MS, description="the p95 the budget controller holds for live "
                                                                "streams: frame available to result published")
    control: bool = Field(True, description="the budget controller on live streams")
    max_stretch: float = Field(4.0, ge=1, le=16, description="how far the controller may widen keyframe intervals")
    workers: Annotated[int | Literal["auto"], BeforeValidator(_workers), WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_WORKERS}, {"const": "auto"}]})] = Field(
        "auto", description="engine processes the streams are split over, each with its own detector (auto: "
                            "one per CPU core, one per two with the detector on a GPU; at most one per stream); "
                            "see streamlens/scale")
    cluster: ClusterConfig | None = Field(None, description="run the engines as Ray actors on this cluster")
    max_streams: Annotated[int | Literal["auto"], BeforeValidator(_max_streams), WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_STREAMS}, {"const": "auto"}]})] = Field(
        "auto", description=f"streams open at once, the file's and those added (POST /api/streams: 429 past it); "
                            f"auto: {STREAMS_PER_CORE} per usable CPU core, at least {MIN_AUTO_STREAMS}; the file's "
                            f"own sources always start")
    cache: CacheConfig = Field(default_factory=CacheConfig, description="the secondary models' cache")
    history: HistoryConfig | None = Field(None, description="every event and the counts per minute in a SQLite "
                                                            "file, kept across runs (streamlens history, "
                                                            "/api/history)")

    @property
    def stream_limit(self) -> int:
        """`max_streams` as a number: `auto` is `STREAMS_PER_CORE` per usable core, at least
        `MIN_AUTO_STREAMS`."""
        if self.max_streams != "auto":
            return self.max_streams
        return max(MIN_AUTO_STREAMS, STREAMS_PER_CORE * cpu.usable_cores())

    @property
    def http_host(self) -> str:
        return self.http.host

    @property
    def http_port(self) -> int | None:
        return self.http.port
