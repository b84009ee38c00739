"""The `sources` section: video files, and camera URLs and devices."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from .. import cpu
from ..urls import is_url, mask_url, port_problem
from .common import MAX_MS, MAX_SECONDS, _base, _Keys, _misplaced_keys, _only, resolve
from .problems import invalid

#: the default `sources[i].max_pixels`: 8K UHD (7680 x 4320, 33.2 Mpx)
MAX_PIXELS = 7680 * 4320
#: the URL schemes a live source accepts
LIVE_SCHEMES = ("rtsp", "rtsps", "http", "https", "rtmp", "rtmps", "rtmpt", "rtmpts", "udp", "tcp", "srt",
                "rtp")
#: stream names: ASCII letters, digits, '_' and '-' (they go into ZeroMQ topics, where '.' separates
#: the type from the stream, and into file names, where '.' and '..' are no names), at most `MAX_NAME`
_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")
#: the longest stream name: it is a folder and a part of every clip's and snapshot's file name
MAX_NAME = 64

_CAMERA = "camera URLs and devices (rtsp://, http://, /dev/videoN, ...)"
_FILES = "video files"


def _is_camera(uri: Any) -> bool:
    """A URL, or a device: a path under /dev/ once normalised (`/dev/../etc/passwd` is a file's path)."""
    return isinstance(uri, str) and (is_url(uri) or is_device(uri))


def is_device(uri: str) -> bool:
    """Whether `uri` is a path under /dev/ once normalised (`..`, `.` and repeated slashes taken out).

        >>> is_device("/dev/video0"), is_device("/dev//./video0"), is_device("/dev/../etc/passwd")
        (True, True, False)
    """
    return not is_url(uri) and os.path.normpath(uri).startswith("/dev/")


def _camera(uri: Any, context: dict | None) -> bool:
    """Whether a source is taken as a camera: its `uri` is one, or a `LiveSource` makes it."""
    return _is_camera(uri) or (context or {}).get("source") == "live"


def _options(value: Any) -> Any:
    """`options`: FFmpeg's, every value a string (a number is written as one)."""
    if not isinstance(value, dict):
        return value
    bad = {str(k): "wrong type: expected a string or a number" for k, v in value.items()
           if not isinstance(v, (str, int, float)) or isinstance(v, bool)}
    if bad:
        raise invalid("wrong values", **bad)
    return {str(k): str(v) for k, v in value.items()}


class SourceConfig(_Keys):
    """One entry of `sources`: a video file, or a camera URL or device.

    Made in code by a source from its keyword arguments (`FileSource(name, uri, **keys)`), the
    validation context names that source (`{"source": "file"}` or `"live"`): the source opens the
    file and says itself what is wrong with it, and a `LiveSource` takes the camera keys whatever
    its `uri`."""

    uri: str = Field(description="a video file (relative to the pipeline file) or a camera URL or device")
    name: str = Field("", description="the stream's name (default cam1, cam2, ... by position): "
                                      f"letters, digits, '_' and '-', at most {MAX_NAME}")
    live: bool | None = Field(None, description="treat as a camera: pace a file at its own rate "
                                                "(default: true for URLs and devices)")
    loop: bool = Field(False, description="a file starts again at its end")
    start_s: float = Field(0.0, ge=0, le=MAX_SECONDS, json_schema_extra=_only(_FILES), description=(
        "a file begins this many seconds in (decoded from the keyframe before; frames before it are not "
        "delivered); a looping file's later passes begin at its start"))
    max_fps: float | None = Field(None, gt=0, description="at most this many frames a second (decided on pts)")
    options: Annotated[dict[str, str], BeforeValidator(_options)] = Field(
        default_factory=dict, description="FFmpeg options for the demuxer and decoder")
    transport: Literal["tcp", "udp", "udp_multicast", "http", "https"] = Field(
        "tcp", description="RTSP transport", json_schema_extra=_only(_CAMERA))
    timeout_s: float = Field(5.0, ge=0.1, le=MAX_SECONDS, json_schema_extra=_only(_CAMERA),
                             description="FFmpeg's network timeout (connect and every read)")
    stall_s: float = Field(5.0, ge=0.1, le=MAX_SECONDS, json_schema_extra=_only(_CAMERA),
                           description="no frame for this long and the connection is reopened")
    backoff_initial_s: float = Field(0.5, ge=0.01, le=MAX_SECONDS, json_schema_extra=_only(_CAMERA),
                                     description="the first wait after a failed connection")
    backoff_max_s: float = Field(5.0, ge=0.01, le=MAX_SECONDS, json_schema_extra=_only(_CAMERA),
                                 description="the longest wait between connection attempts")
    max_staleness_ms: float | None = Field(None, ge=1, le=MAX_MS, description="a live frame older than this "
                                           "when it reaches the graph is dropped (counted)")
    decode: Literal["process", "thread"] | None = Field(
        None, description="where the source decodes: a CPU worker process, or a thread of the engine's process "
                          "(default: process for cameras, thread for files)")
    fast_decode: bool | None = Field(None, description=(
        "skip the H.264/HEVC decoder's loop (deblocking) filter: decoding costs 17-31% less on 720p and "
        "1080p H.264, pictures are slightly blockier (the detector's boxes agree with full decoding at F1 "
        "0.97 on the shared highway clips, tools/results/fast_decode.md): for cores that decoding fills. "
        "Unset: on for a live source when the run has at least 5 live streams per usable CPU core "
        "(`fast_decode_default`), off otherwise and for files read as files"))
    max_pixels: int = Field(MAX_PIXELS, ge=1, le=1 << 31, description=(
        "the largest picture (width x height) the source takes; a larger one is refused, counted and retried "
        "like a lost connection (a file ends with error); default 8K UHD, 7680 x 4320"))

    @classmethod
    def _keys_checked(cls, data: dict, context: dict) -> dict:
        camera = _camera(data.get("uri"), context)
        kind = _CAMERA if camera else _FILES
        misplaced = _misplaced_keys(cls, data, {k for k, f in cls.model_fields.items()
                                                if (f.json_schema_extra or {}).get("only_for", kind) == kind})
        if misplaced:
            raise invalid("misplaced keys", **misplaced)
        return data

    @field_validator("uri")
    @classmethod
    def _uri(cls, uri: str, info: ValidationInfo) -> str:
        if _is_camera(uri):
            scheme = uri.split("://", 1)[0].lower() if is_url(uri) else None
            if scheme is not None and scheme not in LIVE_SCHEMES:
                raise invalid(f"unsupported URL scheme {scheme!r} in {mask_url(uri)} "
                              f"(one of: {', '.join(LIVE_SCHEMES)})")
            if scheme is not None and (problem := port_problem(uri)):  # FFmpeg would retry it for ever
                raise invalid(problem)
            return uri if scheme is not None else os.path.normpath(uri)
        path = Path(os.path.normpath(resolve(_base(info), uri)))
        if (info.context or {}).get("source"):  # made by a source, which opens it
            return str(path)
        if not path.exists():
            raise invalid(f"file not found: {path}")
        if not path.is_file():
            raise invalid(f"not a file: {path}")
        return str(path)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if len(name) > MAX_NAME:
            raise invalid(f"at most {MAX_NAME} characters, got {len(name)}")
        if not _NAME_RE.fullmatch(name):
            raise invalid(f"{name!r}: use letters, digits, '_' and '-' only")
        return name

    @field_validator("transport")
    @classmethod
    def _transport(cls, transport: str, info: ValidationInfo) -> str:
        if not str(info.data.get("uri", "rtsp")).lower().startswith(("rtsp://", "rtsps://")):
            raise invalid("only for rtsp:// and rtsps:// sources")
        return transport

    @field_validator("backoff_max_s")
    @classmethod
    def _backoff(cls, value: float, info: ValidationInfo) -> float:
        initial = info.data.get("backoff_initial_s", 0.5)
        if value < initial:
            raise invalid(f"must be >= backoff_initial_s ({initial:g})")
        return value

    @field_validator("max_staleness_ms")
    @classmethod
    def _staleness(cls, value: float, info: ValidationInfo) -> float:
        live = info.data.get("live")
        if not (live if live is not None else _camera(info.data.get("uri"), info.context)):
            raise invalid("only for live sources (cameras, or files with live: true)")
        return value

    @model_validator(mode="after")
    def _defaults(self, info: ValidationInfo) -> SourceConfig:
        camera = _camera(self.uri, info.context)
        if self.live is None:
            self.live = camera
        if self.decode is None:
            self.decode = "process" if camera else "thread"
        return self

    @property
    def is_file(self) -> bool:
        return not _is_camera(self.uri)

    @property
    def display_uri(self) -> str:
        """The URI safe to print: passwords masked."""
        return mask_url(self.uri)


def _named_sources(value: Any) -> Any:
    """Each source without a name is named by its place: cam1, cam2, ..."""
    if not isinstance(value, list):
        return value
    return [{**item, "name": item.get("name") or f"cam{i + 1}"} if isinstance(item, dict) and item.get("name") is None
            else item for i, item in enumerate(value)]


#: live streams per usable core from which `fast_decode` is on by default: where decoding takes most
#: of the cores (720p30 H.264 on 2 cores: from K=12 it raised the worst stream's F1 by 0.02-0.06,
#: at K=8 it cost about 0.015; tools/results/capacity.md, fast_decode.md)
FAST_DECODE_STREAMS_PER_CORE = 5


def fast_decode_default(live_streams: int) -> bool:
    """Whether a live source whose `fast_decode` is unset skips the loop filter, in a run of
    `live_streams` live streams on this machine's usable cores."""
    return live_streams >= FAST_DECODE_STREAMS_PER_CORE * cpu.usable_cores()


def resolve_fast_decode(source: SourceConfig, live_streams: int) -> None:
    """Set an unset `fast_decode` (see `fast_decode_default`; off for a file read as a file),
    leaving the key as the user wrote it: a copy made from the file's keys (the bench's) still
    resolves it for its own run."""
    if source.fast_decode is None:
        object.__setattr__(source, "fast_decode", bool(source.live) and fast_decode_default(live_streams))
