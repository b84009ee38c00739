"""The keys of a pipeline file, each declared once: its type, default, range and meaning.

These pydantic models are what a run reads (`cfg.detector.conf`), what validation checks, and what
`streamlens schema` publishes as JSON Schema for editors. They are strict: `"5"` is no integer and
`yes please` no boolean; an integer is taken for a number. Every number is checked against its
range: integers where a fraction makes no sense, positive where zero does, finite always (`.inf`
and `.nan` are YAML floats too), durations at most a day, and sizes that hold frames or messages in
memory (queues, batches, `imgsz`, `hwm`) bounded so that a typo cannot exhaust the machine. A key
given as null (`max_fps:` with nothing after it) is a key not given.

Checks that need more than the key's own value (a file that must exist, a key that only a camera
takes, one key bounded by another) are validators here too; they raise `problems.invalid`, whose
message the user reads as it is. Relative paths are resolved against the pipeline file's folder
(`context={"base": folder}`; the working directory without one).

Example:
    >>> KeyframeConfig(interval=5).max_interval
    15
    >>> TrackerConfig(motion="mv").lost_s is None
    True
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, WithJsonSchema,
                      field_validator, model_validator)

from ..urls import is_url, mask_url, port_problem
from .problems import invalid, show

#: the ceiling of every integer key without one of its own: a C int, what ZeroMQ, OpenCV and FFmpeg take
INT_MAX = 2**31 - 1
#: the longest duration a key takes, in seconds: a day. Every wait stays finite and far inside what
#: threads and FFmpeg's microsecond options accept; no timeout, backoff or budget needs longer.
MAX_SECONDS = 86_400.0
MAX_MS = MAX_SECONDS * 1000
#: the default `sources[i].max_pixels`: 8K UHD (7680 x 4320, 33.2 Mpx)
MAX_PIXELS = 7680 * 4320
#: bounds on what is held in memory: frames per queue and per batch, model input side, messages
#: queued per ZeroMQ subscriber, onnxruntime threads. Each is far past any working setting (1024
#: 1080p frames are 6 GB per stream) and short of what a typo would ask for.
MAX_QUEUE_SIZE = 1024
MAX_BATCH = 256
MAX_IMGSZ = 8192
MAX_HWM = 100_000
MAX_THREADS = 1024
MAX_WORKERS = 256
#: the URL schemes a live source accepts
LIVE_SCHEMES = ("rtsp", "rtsps", "http", "https", "rtmp", "rtmps", "rtmpt", "rtmpts", "udp", "tcp", "srt",
                "rtp")
#: stream names: ASCII letters, digits, '_' and '-' (they go into ZeroMQ topics and file names)
_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")

class _Keys(BaseModel):
    """A mapping of the pipeline file: strict, no key outside its fields, null in the file as absent."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, validate_default=False)

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data  # pydantic says what it should be
        if info.context is not None:  # from a file; in code, None is None
            data = {k: v for k, v in data.items() if v is not None}
        return cls._keys_checked(data)

    @classmethod
    def _keys_checked(cls, data: dict) -> dict:
        """`data` with its keys checked before its values are: a mapping whose keys depend on one of
        its values (a source's `uri`, the detector's `backend`) says here which it takes."""
        return data


def _base(info: ValidationInfo) -> Path:
    return Path((info.context or {}).get("base") or os.getcwd())


def resolve(base: Path, text: str) -> Path:
    """A path of the file: `~` expanded, relative to `base`."""
    path = Path(os.path.expanduser(text))
    return path if path.is_absolute() else (base / path).resolve()


def _as_path(value: Any, info: ValidationInfo) -> Any:
    """A path key: a string, resolved against the pipeline file's folder (a `Path` is taken as it is)."""
    if isinstance(value, Path):
        return value
    if not isinstance(value, str):
        raise invalid(f"wrong type: expected a string, got {show(value)}")
    return resolve(_base(info), value)


PathKey = Annotated[Path, BeforeValidator(_as_path), WithJsonSchema({"type": "string"})]


def _only(where: str) -> dict:
    """A key that only some mappings of its kind take (`where` says which): kept in the JSON Schema."""
    return {"only_for": where}


def _misplaced_keys(cls: type[BaseModel], data: dict, allowed: set[str]) -> dict[str, str]:
    """{key: why} for the keys of `data` that `cls` has no field for, or that this kind of mapping
    does not take (those outside `allowed`: their schema's `only_for` says which kind does)."""
    found = {}
    for key in data:
        field = cls.model_fields.get(key)
        if field is None:
            found[str(key)] = f"unknown key (expected one of: {', '.join(sorted(allowed, key=list(cls.model_fields).index))})"
        elif key not in allowed:
            found[str(key)] = f"only for {(field.json_schema_extra or {})['only_for']}"
    return found


# -- sources -------------------------------------------------------------------------------------

_CAMERA = "camera URLs and devices (rtsp://, http://, /dev/videoN, ...)"


def _is_camera(uri: Any) -> bool:
    return isinstance(uri, str) and (is_url(uri) or uri.startswith("/dev/"))


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
    """One entry of `sources`: a video file, or a camera URL or device."""

    uri: str = Field(description="a video file (relative to the pipeline file) or a camera URL or device")
    name: str = Field("", description="the stream's name (default cam1, cam2, ... by position): "
                                      "letters, digits, '_' and '-'")
    live: bool | None = Field(None, description="treat as a camera: pace a file at its own rate "
                                                "(default: true for URLs and devices)")
    loop: bool = Field(False, description="a file starts again at its end")
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
    max_pixels: int = Field(MAX_PIXELS, ge=1, le=1 << 31, description=(
        "the largest picture (width x height) the source takes; a larger one is refused, counted and retried "
        "like a lost connection (a file ends with error); default 8K UHD, 7680 x 4320"))

    @classmethod
    def _keys_checked(cls, data: dict) -> dict:
        camera = _is_camera(data.get("uri"))
        misplaced = _misplaced_keys(cls, data, {k for k, f in cls.model_fields.items()
                                                if camera or not f.json_schema_extra})
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
            return uri
        path = resolve(_base(info), uri)
        if not path.exists():
            raise invalid(f"file not found: {path}")
        if not path.is_file():
            raise invalid(f"not a file: {path}")
        return str(path)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
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
        if not (live if live is not None else _is_camera(info.data.get("uri"))):
            raise invalid("only for live sources (cameras, or files with live: true)")
        return value

    @model_validator(mode="after")
    def _defaults(self) -> SourceConfig:
        if self.live is None:
            self.live = _is_camera(self.uri)
        if self.decode is None:
            self.decode = "process" if _is_camera(self.uri) else "thread"
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


# -- detector ------------------------------------------------------------------------------------

_NEURAL = "backend onnx or ultralytics"
_ONNX = "backend onnx"
_MOTION = "backend motion"


def _imgsz(value: Any) -> Any:
    """One side, or [height, width], each 32 to MAX_IMGSZ pixels."""
    sides = value if isinstance(value, (list, tuple)) and len(value) == 2 else [value, value]
    if all(isinstance(v, int) and not isinstance(v, bool) and 32 <= v <= MAX_IMGSZ for v in sides):
        return (sides[0], sides[1])
    raise invalid(f"expected an integer from 32 to {MAX_IMGSZ} or [height, width], got {show(value)}")


def _classes(value: Any) -> Any:
    if isinstance(value, list):
        bad = {f"[{j}]": f"expected a class name or id, got {show(c)}" for j, c in enumerate(value)
               if not isinstance(c, (str, int)) or isinstance(c, bool)}
        if bad:
            raise invalid("bad classes", **bad)
    return value


def _pixel_triple(positive: bool):
    """`mean`/`std` of detector.input: a number or a list of three numbers (`std`: positive)."""
    def check(value: Any) -> Any:
        values = value if isinstance(value, list) else [value]
        ok = len(values) in (1, 3) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        try:
            ok = ok and all(abs(float(v)) < float("inf") and (not positive or v > 0) for v in values)
        except OverflowError:  # an integer past any float
            ok = False
        if not ok:
            raise invalid(f"expected {'a positive number' if positive else 'a number'} or a list of three, "
                          f"got {show(value)}")
        return [float(v) for v in values] * (3 if len(values) == 1 else 1)
    return check


_TRIPLE = {"anyOf": [{"type": "number"}, {"type": "array", "items": {"type": "number"}, "minItems": 3,
                                          "maxItems": 3}]}


class InputConfig(_Keys):
    """detector.input: how an ONNX model without metadata wants its pixels (see detect/input_spec.py)."""

    channels: Literal["bgr", "rgb"] | None = None
    mean: Annotated[list[float] | None, BeforeValidator(_pixel_triple(False)), WithJsonSchema(_TRIPLE)] = None
    std: Annotated[list[float] | None, BeforeValidator(_pixel_triple(True)), WithJsonSchema(_TRIPLE)] = None
    pad: Literal["corner", "center"] | None = None
    pad_value: int | None = Field(None, ge=0, le=255)


class DetectorConfig(_Keys):
    """The `detector` section. Which keys a backend takes is in each field's schema (`only_for`)."""

    backend: Literal["onnx", "ultralytics", "motion"] = Field(
        description="onnx (onnxruntime), ultralytics (YOLO, RT-DETR and their exports) or motion (no model)")
    max_batch: int = Field(4, ge=1, le=MAX_BATCH, description="keyframes per detector call, at most")
    max_wait_ms: float = Field(10.0, ge=0, le=MAX_MS, description="how long a batch waits to fill")
    budget_ms: float | None = Field(33.0, ge=0, le=MAX_MS, description="how long a keyframe may take from the "
                                    "engine's inbox to its detections (0: no budget)")
    model: PathKey | None = Field(None, json_schema_extra=_only(_NEURAL), description="the model file or folder")
    imgsz: Annotated[tuple[int, int] | None, BeforeValidator(_imgsz), WithJsonSchema(
        {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}, "minItems": 2,
                                         "maxItems": 2}]})] = Field(
        None, json_schema_extra=_only(_NEURAL), description="the model input: one side, or [height, width]")
    conf: float = Field(0.25, ge=0, le=1, json_schema_extra=_only(_NEURAL), description="the least score kept")
    iou: float = Field(0.45, ge=0, le=1, json_schema_extra=_only(_NEURAL), description="NMS overlap")
    classes: Annotated[list[str | int] | None, BeforeValidator(_classes)] = Field(
        None, json_schema_extra=_only(_NEURAL), description="the classes kept, by name or id (default: all)")
    names: PathKey | None = Field(None, json_schema_extra=_only(_NEURAL),
                                  description="a file of class names, when the model has none")
    device: str = Field("auto", json_schema_extra=_only(_NEURAL), description="auto, cpu, cuda or cuda:N")
    half: bool = Field(False, json_schema_extra=_only(_NEURAL), description="FP16 (CUDA)")
    resize: Literal["letterbox", "resize", "bucket"] | None = Field(
        None, json_schema_extra=_only(_NEURAL), description="how a frame fits the input "
                                                             "(default: letterbox; resize for RT-DETR)")
    agnostic_nms: bool = Field(False, json_schema_extra=_only(_NEURAL),
                               description="NMS across classes: one box where the model sees one object as two "
                                           "classes (a van as car and truck), so it is tracked and counted once")
    max_det: int = Field(300, ge=1, le=INT_MAX, json_schema_extra=_only(_NEURAL),
                         description="detections per frame, at most")
    input: InputConfig | None = Field(None, json_schema_extra=_only(_ONNX),
                                      description="how the model wants its pixels, when its metadata does not say")
    threads: int | None = Field(None, ge=1, le=MAX_THREADS, json_schema_extra=_only(_ONNX),
                                description="onnxruntime's intra-op threads (default: its own)")
    min_area: float | None = Field(None, ge=0, lt=1, json_schema_extra=_only(_MOTION),
                                   description="the least blob, as a fraction of the frame")
    history: int | None = Field(None, ge=1, le=INT_MAX, json_schema_extra=_only(_MOTION),
                                description="frames the background model remembers")
    var_threshold: float | None = Field(None, gt=0, json_schema_extra=_only(_MOTION),
                                        description="how far a pixel must differ from the background")
    work_width: int | None = Field(None, ge=16, le=INT_MAX, json_schema_extra=_only(_MOTION),
                                   description="the width frames are shrunk to first")
    warmup: int | None = Field(None, ge=1, le=INT_MAX, json_schema_extra=_only(_MOTION),
                               description="frames before the first detections")

    @classmethod
    def _keys_checked(cls, data: dict) -> dict:
        backend = data.get("backend")
        if backend not in ("onnx", "ultralytics", "motion"):
            return {"backend": backend} if "backend" in data else {}  # the backend alone is the mistake
        allowed = {k for k, f in cls.model_fields.items() if not f.json_schema_extra
                   or backend in f.json_schema_extra["only_for"].removeprefix("backend ").split(" or ")}
        misplaced = _misplaced_keys(cls, data, allowed)
        if misplaced:
            raise invalid("misplaced keys", **misplaced)
        return data

    @field_validator("model")
    @classmethod
    def _model(cls, path: Path) -> Path:
        if not path.exists():
            raise invalid(f"file not found: {path}")
        return path

    @field_validator("names")
    @classmethod
    def _names(cls, path: Path) -> Path:
        if not path.is_file():
            raise invalid(f"file not found: {path}")
        return path

    @field_validator("budget_ms")
    @classmethod
    def _budget(cls, value: float | None) -> float | None:
        return value or None  # 0: no budget

    @model_validator(mode="after")
    def _needs_model(self) -> DetectorConfig:
        if self.backend != "motion" and self.model is None:
            raise invalid("missing", model="missing")
        return self

    @property
    def options(self) -> dict[str, Any]:
        """The motion detector's settings that the file gives (`MotionDetector(**options)`)."""
        return {k: getattr(self, k) for k, f in type(self).model_fields.items()
                if f.json_schema_extra == _only(_MOTION) and getattr(self, k) is not None}


# -- keyframes and tracker -----------------------------------------------------------------------

class KeyframeConfig(_Keys):
    """The `keyframes` section: how often the detector runs on a stream."""

    interval: int = Field(1, ge=1, le=INT_MAX, description="a keyframe every this many frames")
    adaptive: bool = Field(False, description="lengthen the interval of a stream whose keyframes find nothing new")
    max_interval: int | None = Field(None, ge=1, le=INT_MAX, description="how long adaptive may make it "
                                                                          "(default: 15, or interval if longer)")
    shared: bool = Field(True, description="live streams share one schedule by worth; false: each its own")
    min_interval: int = Field(1, ge=1, le=INT_MAX, description="shared: the fewest frames between two "
                                                               "keyframes of a stream")

    @field_validator("max_interval")
    @classmethod
    def _max(cls, value: int, info: ValidationInfo) -> int:
        interval = info.data.get("interval")
        if interval is not None and value < interval:
            raise invalid(f"must be >= keyframes.interval ({interval})")
        return value

    @field_validator("min_interval")
    @classmethod
    def _min(cls, value: int, info: ValidationInfo) -> int:
        interval = info.data.get("interval")
        if interval is not None and value > interval:
            raise invalid(f"must be <= keyframes.interval ({interval})")
        return value

    @model_validator(mode="after")
    def _defaults(self) -> KeyframeConfig:
        if self.max_interval is None:
            self.max_interval = max(15, self.interval)
        return self


TRACKER_MOTIONS = ("kalman", "flow", "mv")


def _tracker_short(value: Any) -> Any:
    """`tracker: none` (or false): no tracking; `tracker: mv`: that motion with its defaults."""
    if value == "none" or value is False:
        return TrackerConfig(motion=None)  # a model, not a mapping: a null in a mapping is a key not given
    if isinstance(value, str):
        if value not in TRACKER_MOTIONS:
            raise invalid(f"unknown {value!r} (none, or a mapping with motion: {', '.join(TRACKER_MOTIONS)})")
        return {"motion": value}
    return value


class TrackerConfig(_Keys):
    """The `tracker` section (or `none`, or a motion's name: `tracker: mv`)."""

    motion: Literal["kalman", "flow", "mv"] | None = Field(
        "kalman", description="how boxes move between keyframes: kalman, flow (optical flow), mv (the decoder's "
                              "motion vectors); null: detections pass through untracked")
    high_score: float | None = Field(None, ge=0, le=1, description="confident detections (matched first); "
                                                                   "default: the detector's conf")
    low_score: float | None = Field(None, ge=0, le=1, description="the weakest detection matched (default 0.1)")
    new_track_score: float | None = Field(None, ge=0, le=1, description="the least score to start a track")
    lost_s: float | None = Field(None, gt=0, le=MAX_SECONDS, description="how long a lost track waits to be found")
    coast_s: float | None = Field(None, ge=0, le=MAX_SECONDS, description="how long a missed track stays "
                                                                          "on screen (0: never)")

    @field_validator("low_score")
    @classmethod
    def _low(cls, value: float | None, info: ValidationInfo) -> float | None:
        high = info.data.get("high_score")
        if value is not None and high is not None and value > high:
            raise invalid(f"must be <= tracker.high_score ({high})")
        return value

    @field_validator("coast_s")
    @classmethod
    def _coast(cls, value: float | None, info: ValidationInfo) -> float | None:
        lost = info.data.get("lost_s")
        if value is not None and lost is not None and value > lost:
            raise invalid(f"must be <= tracker.lost_s ({lost})")
        return value


# -- sinks ---------------------------------------------------------------------------------------

class _Sink(_Keys):
    @property
    def options(self) -> dict[str, Any]:
        """The sink's settings the file gives or defaults, as its constructor takes them."""
        values = {k: getattr(self, k) for k in type(self).model_fields if k != "type"}
        return {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in values.items() if v is not None}


class JsonlSinkConfig(_Sink):
    """A JSON Lines file of every result."""

    type: Literal["jsonl"]
    path: PathKey = Field(description="the file (relative to the pipeline file)")


class VideoSinkConfig(_Sink):
    """Annotated video, one file per stream (`{stream}` in the path: its name)."""

    type: Literal["video"]
    path: PathKey = Field(description="the file; `{stream}` becomes each stream's name")
    codec: str | None = Field(None, description="FFmpeg's encoder (default libx264)")
    preset: str | None = Field(None, description="the encoder's preset")
    crf: int | None = Field(None, ge=0, le=51, description="quality: 0 lossless .. 51 worst")


class CurveConfig(_Keys):
    """CurveZMQ for a zmq sink: its secret key, and the subscribers' public keys it admits."""

    server_secret: PathKey = Field(description="the sink's secret key file (streamlens keygen)")
    authorized: PathKey | None = Field(None, description="a folder of public keys admitted (default: any client "
                                                         "that knows the server's public key)")


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


#: the analytics' event kinds (`event` of an event message)
EVENT_KINDS = ("line_cross", "zone_enter", "zone_exit", "loiter", "object_start", "object_update", "object_end")
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


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


SinkConfig = Annotated[Union[JsonlSinkConfig, VideoSinkConfig, ZmqSinkConfig, MqttSinkConfig, WebhookSinkConfig],
                       Field(discriminator="type")]


# -- analytics -----------------------------------------------------------------------------------

def _points(count: int | None):
    """Points of a line (`count` 2), a ground rectangle (4) or a zone (None: at least 3): [[x, y], ...],
    numbers; in source pixels, or every one in 0..1 (fractions of the frame)."""
    def check(value: Any) -> Any:
        ok = isinstance(value, list) and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                        and abs(v) < 1e9 for v in p) for p in value)
        ok = ok and (len(value) == count if count else len(value) >= 3)
        if not ok:
            want = ({2: "two points [[x, y], [x, y]]", 4: "four points [[x, y], ...]"}[count] if count
                    else "at least three points [[x, y], ...]")
            raise invalid(f"expected {want}, got {show(value)}")
        return [(float(x), float(y)) for x, y in value]
    return check


_POINTS = {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}}


class _Rule(_Keys):
    name: str = Field(description="the rule's name in counts, zones and events")
    classes: list[str] | None = Field(None, description="the labels it watches (default: all)")
    streams: list[str] | None = Field(None, description="the streams it applies to (default: all)")


class LineConfig(_Rule):
    """A line that counts the tracks crossing it, by direction (in: from its left to its right,
    seen from its first point towards its second)."""

    points: Annotated[list[tuple[float, float]], BeforeValidator(_points(2)), WithJsonSchema(_POINTS)] = Field(
        description="two points, source pixels or fractions of the frame")
    margin_px: float = Field(4.0, ge=0, le=10_000, description="a box within this many pixels of the line has "
                                                              "not crossed it yet (jitter on the line counts once)")
    min_frames: int = Field(2, ge=1, le=10_000, description="frames in a row on the other side before a crossing "
                                                          "counts (a box put back by the next keyframe crosses nothing)")


class ZoneConfig(_Rule):
    """A polygon that says who is in it, for how long, and who loiters."""

    polygon: Annotated[list[tuple[float, float]], BeforeValidator(_points(None)), WithJsonSchema(_POINTS)] = Field(
        description="at least three points, source pixels or fractions of the frame")
    inertia: int = Field(3, ge=1, le=10_000, description="frames in a row inside (outside) before an object "
                                                        "enters (leaves)")
    loiter_s: float | None = Field(None, gt=0, le=MAX_SECONDS, description="a `loiter` event once an object "
                                                                            "has stayed this long")


class GroundConfig(_Keys):
    """Speed from the ground plane: four image points, the corners of a rectangle on the ground (in
    order around it, the first two along its width), and that rectangle's size in metres."""

    points: Annotated[list[tuple[float, float]], BeforeValidator(_points(4)), WithJsonSchema(_POINTS)] = Field(
        description="four points, source pixels or fractions of the frame")
    width_m: float = Field(gt=0, le=1e5, description="the ground distance from the first point to the second")
    length_m: float = Field(gt=0, le=1e5, description="the ground distance from the second point to the third")


class SnapshotConfig(_Keys):
    """A JPEG of the object for some events: to a folder, and attached to the event on the sinks."""

    events: list[Literal["object_start", "object_end"]] = Field(
        ["object_start", "object_end"], min_length=1, description="the events that get one")
    kind: Literal["crop", "frame"] = Field("crop", description="crop: the object's box (its best-scoring view "
                                                               "for object_end); frame: the annotated frame")
    padding: float = Field(0.15, ge=0, le=2, description="crop margin, as a share of the box's size")
    quality: int = Field(85, ge=1, le=100, description="JPEG quality")
    path: PathKey | None = Field(None, description="a folder: <stream>/<event>-<id>-<seq>.jpg in it (default: "
                                                   "attached to the events only)")
    classes: list[str] | None = Field(None, description="the labels that get one (default: all)")


class AnalyticsConfig(_Keys):
    """The `analytics` section: rules run on every frame's tracked objects (streamlens/analytics)."""

    anchor: Literal["bottom_center", "center", "top_center", "bottom_left", "bottom_right"] = Field(
        "bottom_center", description="the point of a box the rules watch")
    pixels_per_metre: float | None = Field(None, gt=0, le=1e6, description="speed in km/h from anchor motion")
    ground: GroundConfig | None = Field(None, description="speed in km/h on the ground plane (instead of "
                                                          "pixels_per_metre)")
    snapshots: SnapshotConfig | None = Field(None, description="JPEG snapshots of objects for their events")
    end_after_s: float = Field(2.0, gt=0, le=MAX_SECONDS, description="a track not seen this long has ended "
                                                                      "(object_end)")
    lines: list[LineConfig] = Field(default_factory=list)
    zones: list[ZoneConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> AnalyticsConfig:
        names = [r.name for r in [*self.lines, *self.zones]]
        again = sorted({n for n in names if names.count(n) > 1})
        if again:
            raise invalid(f"rule names must differ: {', '.join(again)} used twice")
        if self.pixels_per_metre is not None and self.ground is not None:
            raise invalid("pixels_per_metre and ground both give speed: keep one")
        return self


# -- secondary models ----------------------------------------------------------------------------

class SecondaryConfig(_Keys):
    """One entry of `secondary`: a model run on the crops of tracked objects, a few times per track
    (see streamlens/secondary)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$", description="the attribute's name in each object's "
                                                               "`attributes` (classify) or the embedding's (embed)")
    kind: Literal["classify", "embed"] = Field(description="classify: labels and scores; embed: a vector per track")
    model: PathKey = Field(description="an ONNX model (or an Ultralytics classification .pt)")
    output: int | str | None = Field(None, description="which of the model's outputs (index or name; default "
                                                       "the first): entries of one model share one run per crop")
    labels: list[str] | PathKey | None = Field(None, description="the class names, or a file of them, one per "
                                                                 "line (default: the model's metadata)")
    classes: list[str] | None = Field(None, description="the object labels it runs on (default: all)")
    min_size: int = Field(24, ge=1, le=MAX_IMGSZ, description="the least side of a box it runs on, in pixels")
    imgsz: int | None = Field(None, ge=8, le=MAX_IMGSZ, description="the model's input side (default: the "
                                                                    "model's own, else 224)")
    padding: float = Field(0.1, ge=0, le=2, description="crop margin, as a share of the box's size")
    regrow: float = Field(0.2, gt=0, le=100, description="run again when the box has grown by this share of "
                                                         "its area")
    every_s: float | None = Field(None, gt=0, le=MAX_SECONDS, description="run again after this long")
    max_attempts: int = Field(3, ge=1, le=1000, description="runs per track, at most; the answer is the "
                                                            "score-weighted vote over them")
    max_batch: int = Field(8, ge=1, le=MAX_BATCH, description="crops per model call, at most")
    max_wait_ms: float = Field(20.0, ge=0, le=MAX_MS, description="how long a batch waits to fill")
    threads: int | None = Field(None, ge=1, le=MAX_THREADS, description="onnxruntime's intra-op threads "
                                                                        "(default 1)")
    cache: bool = Field(True, description="look its outputs up by the crop's pixel hash (runtime.cache)")

    @field_validator("model")
    @classmethod
    def _model(cls, path: Path) -> Path:
        if not path.is_file():
            raise invalid(f"file not found: {path}")
        if path.suffix.lower() not in (".onnx", ".pt"):
            raise invalid(f"expected an .onnx or .pt model, got {path.name}")
        return path

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            path = resolve(_base(info), value)
            if not path.is_file():
                raise invalid(f"file not found: {path}")
            return path
        return value


def _unique_secondary(entries: list[SecondaryConfig]) -> list[SecondaryConfig]:
    names = [e.name for e in entries]
    again = sorted({n for n in names if names.count(n) > 1})
    if again:
        raise invalid(f"names must differ: {', '.join(again)} used twice")
    return entries


class CacheConfig(_Keys):
    """`runtime.cache`: the secondary models' outputs by the pixel hash of their crops."""

    items: int = Field(10_000, ge=0, le=10_000_000, description="outputs kept in memory (LRU; 0: none)")
    redis: str | None = Field(None, description="redis://HOST:PORT/DB shared by pipelines and engines "
                                                "(default: memory only)")
    ttl_s: float | None = Field(86_400.0, gt=0, le=MAX_SECONDS * 365, description="how long Redis keeps an output")

    @field_validator("redis")
    @classmethod
    def _redis(cls, url: str) -> str:
        if not re.match(r"^(redis|rediss|unix)://.+", url):
            raise invalid(f"expected redis://HOST:PORT/DB, got {mask_url(url)!r}")
        try:
            import redis  # noqa: F401 - only whether it is there
        except ImportError:
            raise invalid("needs the redis package (pip install 'streamlens[redis]')") from None
        return url


# -- runtime -------------------------------------------------------------------------------------

class HttpConfig(_Keys):
    """`/metrics`, `/healthz`, the live page at `/` and its JSON API over HTTP (streamlens/http)."""

    host: str = Field("127.0.0.1", description="the address listened on (off loopback, every route but "
                                               "/healthz asks for the token)")
    port: int | None = Field(None, ge=0, le=65535, description="the port (0: any free one; default: no HTTP server)")
    page: bool = Field(True, description="serve the live page at / and its API under /api")
    preview_fps: float = Field(5.0, gt=0, le=60, description="frames per second a viewer's preview gets, at most")
    token_env: str = Field("STREAMLENS_HTTP_TOKEN", pattern=_ENV_NAME,
                           description="the environment variable holding the access token (host off loopback)")


def _workers(value: Any) -> Any:
    if value == "auto" or isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_WORKERS:
        return value
    raise invalid(f"expected an integer from 1 to {MAX_WORKERS} or auto, got {show(value)}")


class ClusterConfig(_Keys):
    """`runtime.cluster`: the engines as Ray actors (see streamlens/scale/ray.py)."""

    address: str | None = Field(None, description="the Ray cluster's address: HOST:PORT of its head, or auto (the "
                                                  "cluster this machine is part of); default: --cluster, else a "
                                                  "cluster of this machine alone, which Ray starts")
    cpus: float = Field(1.0, gt=0, le=MAX_THREADS, description="CPUs each engine asks for")
    gpus: float = Field(0.0, ge=0, le=MAX_THREADS, description="GPUs each engine asks for (a fraction shares one)")


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
        1, description="engine processes the streams are split over, each with its own detector (auto: one per "
                       "two CPU cores, at most one per stream); see streamlens/scale")
    cluster: ClusterConfig | None = Field(None, description="run the engines as Ray actors on this cluster")
    cache: CacheConfig = Field(default_factory=CacheConfig, description="the secondary models' cache")

    @property
    def http_host(self) -> str:
        return self.http.host

    @property
    def http_port(self) -> int | None:
        return self.http.port


# -- the file ------------------------------------------------------------------------------------

class PipelineFile(_Keys):
    """A pipeline file: what `streamlens schema` describes."""

    model_config = ConfigDict(title="streamlens pipeline")

    sources: Annotated[list[SourceConfig], BeforeValidator(_named_sources)] = Field(
        min_length=1, description="files and cameras")
    detector: DetectorConfig
    keyframes: KeyframeConfig = Field(default_factory=KeyframeConfig)
    tracker: Annotated[TrackerConfig, BeforeValidator(_tracker_short),
                       WithJsonSchema({"anyOf": [{"enum": ["none", *TRACKER_MOTIONS]},
                                                 TrackerConfig.model_json_schema()]})] = Field(
        default_factory=TrackerConfig)
    sinks: list[SinkConfig] = Field(default_factory=list, description="where results go")
    analytics: AnalyticsConfig | None = Field(None, description="lines, zones and speed on tracked objects")
    secondary: Annotated[list[SecondaryConfig], AfterValidator(_unique_secondary)] = Field(
        default_factory=list, description="models run on the crops of tracked objects")
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, sources: list[SourceConfig]) -> list[SourceConfig]:
        seen, again = set(), {}
        for i, source in enumerate(sources):
            if source.name in seen:
                again[f"[{i}].name"] = f"{source.name!r} is used by another source"
            seen.add(source.name)
        if again:
            raise invalid("names used twice", **again)
        return sources


class PipelineConfig(PipelineFile):
    """A validated pipeline file, with where it came from: `path`, and `display`, how messages name it."""

    path: Path
    display: str = ""
