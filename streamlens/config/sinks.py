"""The `sinks` section: one model per `type`, and `SinkConfig`, their union."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from ..urls import mask_url
from .common import _ENV_NAME, INT_MAX, MAX_HWM, MAX_MS, MAX_SECONDS, PathKey, _Keys, _only
from .problems import invalid


class _Sink(_Keys):
    @property
    def options(self) -> dict[str, Any]:
        """The sink's keys the file gives or defaults, but `type`, by name (None left out)."""
        values = {k: getattr(self, k) for k in type(self).model_fields if k != "type"}
        return {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in values.items() if v is not None}


class JsonlSinkConfig(_Sink):
    """A JSON Lines file of every result."""

    type: Literal["jsonl"]
    path: PathKey = Field(description="the file (relative to the pipeline file)")


#: what a video sink's path holds for each stream's name
STREAM = "{stream}"


def video_path(path: Path, stream: str, first: bool) -> Path:
    """The file a video sink of `path` writes `stream` to: `{stream}` in `path` becomes its name;
    without it, the first stream is written to `path` itself and each other to
    `<stem>-<stream><suffix>` beside it.

    Example:
        >>> [video_path(Path("out/a.mp4"), s, s == "cam1").name for s in ("cam1", "cam2")]
        ['a.mp4', 'a-cam2.mp4']
        >>> str(video_path(Path("out/{stream}/a.mp4"), "cam2", False))
        'out/cam2/a.mp4'
    """
    if STREAM in str(path):
        return Path(str(path).replace(STREAM, stream))
    return path if first else path.with_name(f"{path.stem}-{stream}{path.suffix}")


class VideoSinkConfig(_Sink):
    """Annotated video, one file per stream (`{stream}` in the path: its name)."""

    type: Literal["video"]
    path: PathKey = Field(description="the file; `{stream}` becomes each stream's name")
    codec: str | None = Field(None, description="FFmpeg's encoder (default libx264)")
    preset: str | None = Field(None, description="the encoder's preset")
    crf: int | None = Field(None, ge=0, le=51, description="quality: 0 lossless .. 51 worst")


#: libx264's presets, fastest first
X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")


def rtsp_url(url: str, stream: str) -> str:
    """The URL an rtsp sink of `url` publishes `stream` to: `{stream}` in `url` becomes its name;
    without it, the name is added to the path as its last part (before a query).

    Example:
        >>> rtsp_url("rtsp://127.0.0.1:8554/annotated", "cam1")
        'rtsp://127.0.0.1:8554/annotated/cam1'
        >>> rtsp_url("rtsp://u:p@nvr:8554/{stream}/ai?x=1", "cam2"), rtsp_url("rtsp://nvr/", "cam3")
        ('rtsp://u:p@nvr:8554/cam2/ai?x=1', 'rtsp://nvr/cam3')
    """
    if STREAM in url:
        return url.replace(STREAM, stream)
    base, mark, query = url.partition("?")
    return f"{base.rstrip('/')}/{stream}{mark}{query}"


class RtspSinkConfig(_Sink):
    """The annotated video of each stream published to an RTSP server (see streamlens/sinks/rtsp.py)."""

    type: Literal["rtsp"]
    url: str = Field(description="rtsp://[USER:PASSWORD@]HOST[:PORT]/PATH; each stream at <url>/<stream>, or "
                                 "where `{stream}` in it says")
    transport: Literal["tcp", "udp"] = Field("tcp", description="RTP over the RTSP connection (tcp) or over UDP")
    preset: Literal[X264_PRESETS] = Field("veryfast", description="libx264's preset (tune zerolatency)")
    crf: int = Field(23, ge=0, le=51, description="quality: 0 lossless .. 51 worst")
    bitrate_kbps: int | None = Field(None, ge=16, le=1_000_000,
                                     description="a cap on the bit rate (kbit/s, a one-second buffer)")
    keyframe_s: float = Field(1.0, ge=0.1, le=60, description="seconds between keyframes: the longest a player "
                                                              "that joins waits for a picture")
    queue_size: int = Field(4, ge=1, le=256, description="frames a stream may have waiting for its encoder; "
                                                         "beyond, frames are dropped and counted")
    timeout_s: float = Field(5.0, ge=0.1, le=600, description="the longest a connection or a write waits "
                                                              "for the server")
    retry_max_s: float = Field(10.0, ge=0.1, le=MAX_SECONDS,
                               description="the longest wait between reconnection attempts")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        if not re.match(r"^rtsps?://[^/\s?#]+", url):
            raise invalid(f"expected rtsp://HOST[:PORT]/PATH, got {mask_url(url)!r}")
        if re.search(r"\s", url) or url.count(STREAM) > 1:
            raise invalid(f"expected one URL, with `{STREAM}` at most once, got {mask_url(url)!r}")
        return url


class CurveConfig(_Keys):
    """CurveZMQ for a zmq sink: its secret key, and the subscribers' public keys it admits."""

    server_secret: PathKey = Field(description="the sink's secret key file (streamlens keygen)")
    authorized: PathKey | None = Field(None, description="a folder of public keys admitted (default: any client "
                                                         "that knows the server's public key)")


class PeersConfig(_Keys):
    """What the peers of a zmq sink's socket may do (see streamlens/wire/peers.py): past a bound, a
    peer is refused at its handshake or disconnected, and counted."""

    max_peers: int = Field(512, ge=1, le=65536, description="connections at once; one more is refused")
    subscriptions: int = Field(256, ge=1, le=65536,
                               description="subscriptions one peer may send (its byte allowance); past "
                                           "them it is disconnected and its address refused for cooldown_s")
    topics: int = Field(4096, ge=1, le=1 << 20,
                        description="distinct topics passed on to the engines (several engines) or counted")
    cooldown_s: float = Field(10.0, ge=0, le=MAX_SECONDS,
                              description="how long an address that flooded is refused (doubled each time "
                                          "again, up to 300 s)")


class ZmqSinkConfig(_Sink):
    """Results over ZeroMQ (see streamlens/sinks/zmq.py)."""

    type: Literal["zmq"]
    endpoint: str = Field(description="tcp://HOST:PORT or ipc://PATH, bound")
    mode: Literal["pub", "push"] = Field("pub", description="pub: subscribers by topic; push: a pull consumer")
    format: Literal["json", "msgpack"] = "json"
    hwm: int = Field(1000, ge=1, le=MAX_HWM, description="messages queued per subscriber before they drop")
    wait_subscribers: int = Field(0, ge=0, le=INT_MAX, description="wait for this many subscribers at start")
    wait_timeout_s: float = Field(30.0, ge=0.001, le=MAX_SECONDS, description="how long to wait for them")
    frames: Literal["none", "jpeg"] = Field("none", description="send each frame as JPEG, after its result")
    jpeg_quality: int = Field(80, ge=1, le=100)
    annotate: bool = Field(True, description="draw the boxes on the JPEG frames")
    send_timeout_s: float | None = Field(None, gt=0, le=MAX_SECONDS, json_schema_extra=_only("mode push"),
                                         description="push: how long a send may wait for the consumer")
    linger_ms: int | None = Field(None, ge=0, le=int(MAX_MS), description="how long closing waits to deliver")
    curve: CurveConfig | None = None
    peers: PeersConfig = Field(default_factory=PeersConfig, description="bounds on the socket's peers")

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, endpoint: str) -> str:
        if not re.match(r"^(tcp|ipc|inproc)://.+", endpoint):
            raise invalid(f"expected tcp://HOST:PORT or ipc://PATH, got {endpoint!r}")
        return endpoint

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        if value == "msgpack":
            try:
                import msgpack  # noqa: F401 - only whether it is there
            except ImportError:
                raise invalid("msgpack needs the msgpack package (pip install msgpack)") from None
        return value

    @field_validator("send_timeout_s")
    @classmethod
    def _push_only(cls, value: float | None, info: ValidationInfo) -> float | None:
        if info.data.get("mode") != "push":
            raise invalid("only for mode push")
        return value

    @field_validator("curve")
    @classmethod
    def _curve(cls, curve: CurveConfig) -> CurveConfig:
        from ..wire.keys import KeyFileError, curve_available, read_secret_key

        if not curve_available():
            raise invalid("this libzmq has no CurveZMQ support (built without libsodium)")
        problems = {}
        try:
            read_secret_key(curve.server_secret)
        except KeyFileError as e:
            problems["server_secret"] = str(e)
        if curve.authorized is not None and not curve.authorized.is_dir():
            problems["authorized"] = f"folder not found: {curve.authorized}"
        if problems:
            raise invalid("curve", **problems)
        return curve


#: the analytics' event kinds (`event` of an event message), and `clip_lost` (graph/publish/clips.py)
EVENT_KINDS = ("line_cross", "zone_enter", "zone_exit", "loiter", "object_start", "object_update", "object_end",
               "clip_lost")


class MqttSinkConfig(_Sink):
    """Events, counts, stats and snapshots to an MQTT broker (see streamlens/sinks/mqtt.py)."""

    type: Literal["mqtt"]
    host: str = Field("127.0.0.1", min_length=1, description="the broker's host")
    port: int = Field(1883, ge=1, le=65535, description="the broker's port (8883 is usual with tls)")
    topic: str = Field("streamlens", pattern=r"^[^#+\s]+$", description="the prefix of every topic")
    qos: Literal[0, 1, 2] = Field(0, description="MQTT quality of service of every message")
    client_id: str | None = Field(None, description="the client id (default: streamlens-<host>-<pid>)")
    keepalive_s: int = Field(30, ge=5, le=3600, description="seconds between keepalive pings")
    tls: bool = Field(False, description="connect over TLS (system CA store unless ca_file)")
    ca_file: PathKey | None = Field(None, description="the CA certificates that sign the broker's (tls)")
    username_env: str = Field("STREAMLENS_MQTT_USERNAME", pattern=_ENV_NAME,
                              description="the environment variable holding the user name (unset: none)")
    password_env: str = Field("STREAMLENS_MQTT_PASSWORD", pattern=_ENV_NAME,
                              description="the environment variable holding the password")
    queue_size: int = Field(10_000, ge=1, le=1_000_000, description="messages held while the broker is slow or "
                                                                    "away; beyond, the oldest are dropped and counted")
    retain: bool = Field(True, description="counts, availability and stream states as retained messages")
    frames: bool = Field(False, description="also every frame message, on <topic>/<stream>/frame")
    stats: bool = Field(True, description="each stream's stats about once a second, on <topic>/<stream>/stats")
    snapshots: bool = Field(True, description="events' snapshots as JPEG, on <topic>/<stream>/<label>/snapshot")
    discovery: bool = Field(False, description="Home Assistant MQTT discovery: each stream a device, each line's "
                                               "in and out and each zone's count a sensor (retained configs)")
    discovery_prefix: str = Field("homeassistant", pattern=r"^[^#+\s]+$",
                                  description="Home Assistant's discovery prefix (its MQTT settings)")

    @field_validator("discovery")
    @classmethod
    def _discovery(cls, on: bool, info: ValidationInfo) -> bool:
        if on and info.data.get("retain") is False:
            raise invalid("needs retain: true (Home Assistant reads its configs, the counts and the availability "
                          "as retained messages)")
        return on

    @field_validator("ca_file")
    @classmethod
    def _ca(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        if path is not None and not info.data.get("tls"):
            raise invalid("only with tls: true")
        if path is not None and not path.is_file():
            raise invalid(f"file not found: {path}")
        return path


class WebhookSinkConfig(_Sink):
    """Each event as an HTTP POST of its JSON message (see streamlens/sinks/webhook.py)."""

    type: Literal["webhook"]
    url: str = Field(description="http:// or https:// URL the events are posted to")
    events: list[Literal[EVENT_KINDS]] | None = Field(None, description="the event kinds posted (default: all)")
    cooldown_s: float = Field(0.0, ge=0, le=MAX_SECONDS, description="at most one post per stream, rule and "
                                                                     "event kind in this time; the rest are counted")
    timeout_s: float = Field(5.0, gt=0, le=600, description="how long one request may take")
    retries: int = Field(3, ge=0, le=100, description="tries after a failed request (timeouts, 5xx, refused)")
    queue_size: int = Field(1000, ge=1, le=1_000_000, description="events held for posting; beyond, the oldest "
                                                                  "are dropped and counted")
    token_env: str | None = Field(None, pattern=_ENV_NAME, description="the environment variable whose value "
                                                                       "is sent as `Authorization: Bearer`")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        if not re.match(r"^https?://[^/\s]+", url):
            raise invalid(f"expected an http:// or https:// URL, got {mask_url(url)!r}")
        return url


SinkConfig = Annotated[Union[JsonlSinkConfig, VideoSinkConfig, ZmqSinkConfig, MqttSinkConfig, WebhookSinkConfig,
                             RtspSinkConfig], Field(discriminator="type")]
