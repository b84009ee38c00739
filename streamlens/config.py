"""The pipeline file: load, interpolate `${VAR}`, validate, and turn into plain config objects.

Every mistake becomes one line `FILE: key.path: what is wrong`; all of them are gathered before
`ConfigError` is raised, so a user fixes a file in one pass. Relative paths are relative to the
pipeline file's folder.

Every number is checked against its range: integers where a fraction makes no sense, positive
where zero does, finite always (`.inf` and `.nan` are YAML floats too), durations at most a day,
and sizes that hold frames or messages in memory (queues, batches, `imgsz`, `hwm`) bounded so that
a typo cannot exhaust the machine. The file itself is bounded too (`load_pipeline`): at most 1 MiB,
64 levels deep, and 100 000 values once its YAML aliases are expanded.

`preflight_problems(cfg)` checks, without starting anything, what a run needs from the machine:
files to read, folders to write, ports to listen on.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "p.yaml").write_text("sources: [{uri: rtsp://cam/1}]\\ndetector: {backend: motion}\\n")
    >>> cfg = load_pipeline(d / "p.yaml")
    >>> (cfg.sources[0].name, cfg.sources[0].live, cfg.detector.backend)
    ('cam1', True, 'motion')
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .urls import is_url, mask_url

DETECTOR_BACKENDS = ("onnx", "ultralytics", "motion")
TRACKER_MOTIONS = ("kalman", "flow", "mv")
SINK_TYPES = ("jsonl", "video", "zmq")
RESIZE_MODES = ("letterbox", "resize", "bucket")
CHANNEL_ORDERS = ("bgr", "rgb")
PAD_PLACES = ("corner", "center")
#: stream names: ASCII letters, digits, '_' and '-' (they go into ZeroMQ topics and file names)
_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

#: the ceiling of every integer key without one of its own: a C int, what ZeroMQ, OpenCV and FFmpeg take
INT_MAX = 2**31 - 1
#: the longest duration a key takes, in seconds: a day. Every wait stays finite and far inside what
#: threads and FFmpeg's microsecond options accept; no timeout, backoff or budget needs longer.
MAX_SECONDS = 86_400.0
MAX_MS = MAX_SECONDS * 1000
#: bounds on what is held in memory: frames per queue and per batch, model input side, messages
#: queued per ZeroMQ subscriber, onnxruntime threads. Each is far past any working setting (1024
#: 1080p frames are 6 GB per stream) and short of what a typo would ask for.
MAX_QUEUE_SIZE = 1024
MAX_BATCH = 256
MAX_IMGSZ = 8192
MAX_HWM = 100_000
MAX_THREADS = 1024
#: bounds on the pipeline file itself, checked while it is read, before anything walks the tree
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 100_000


@dataclass(slots=True)
class SourceConfig:
    name: str
    uri: str  # an absolute path for files, the URL as written (secrets included) for cameras
    live: bool
    loop: bool = False
    max_fps: float | None = None
    options: dict[str, str] = field(default_factory=dict)
    # Live cameras and streams (URLs and devices): see streamlens/sources/live.py.
    #: RTSP transport: tcp (default), udp, udp_multicast, http, https
    transport: str = "tcp"
    #: FFmpeg's own network timeout (connect and every read), seconds
    timeout_s: float = 5.0
    #: the watchdog: no frame for this long and the connection is dropped and reopened
    stall_s: float = 5.0
    #: the wait after a failed connection attempt: at most max(this, 0.5 s) in an outage's first minute,
    #: then doubling up to backoff_max_s (see sources/backoff.py)
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 5.0
    #: a live frame older than this when it reaches the graph is dropped (counted); None: no limit
    max_staleness_ms: float | None = None
    #: where a live source decodes: "process" (a CPU worker process) or "thread"
    decode: str = "process"

    @property
    def is_file(self) -> bool:
        return not is_url(self.uri) and not self.uri.startswith("/dev/")

    @property
    def display_uri(self) -> str:
        """The URI safe to print: passwords masked."""
        return mask_url(self.uri)


@dataclass(slots=True)
class DetectorConfig:
    backend: str
    model: Path | None = None
    imgsz: tuple[int, int] | None = None
    conf: float = 0.25
    iou: float = 0.45
    classes: list[str | int] | None = None
    names: Path | None = None
    device: str = "auto"
    half: bool = False
    #: letterbox, resize or bucket; None: the model's convention (letterbox; resize for RT-DETR)
    resize: str | None = None
    max_batch: int = 4
    max_wait_ms: float = 10.0
    #: how long a keyframe may take from the engine's inbox to its detections; None: no budget (bulk)
    budget_ms: float | None = 33.0
    max_det: int = 300
    #: onnx only: how the model wants its pixels, when its metadata does not say (channels, mean, std, pad,
    #: pad_value); see streamlens/detect/input_spec.py
    input: dict[str, Any] | None = None
    #: onnx only: onnxruntime's intra-op threads (None: its default)
    threads: int | None = None
    #: backend-specific settings, e.g. the motion detector's min_area
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class KeyframeConfig:
    interval: int = 1
    adaptive: bool = False
    max_interval: int = 15
    #: live streams share one schedule by worth (keyframes.KeyframeChooser); False: each its own
    shared: bool = True
    #: shared: the fewest frames between two keyframes of a stream (1: the detector may take every
    #: frame when it has the time)
    min_interval: int = 1


@dataclass(slots=True)
class TrackerConfig:
    motion: str | None  # None: detections pass through untracked (id -1)
    #: detection scores: confident (matched first, may start tracks), weak floor, and to start a track;
    #: None: the detector's `conf` for high and new, ByteTrack's 0.1 for low (see streamlens/track)
    high_score: float | None = None
    low_score: float | None = None
    new_track_score: float | None = None
    #: seconds a lost track waits to be found again, and a missed track stays on screen; None: defaults
    lost_s: float | None = None
    coast_s: float | None = None


@dataclass(slots=True)
class SinkConfig:
    type: str
    options: dict[str, Any]


@dataclass(slots=True)
class RuntimeConfig:
    queue_size: int = 8
    #: realtime (default) or bulk: archives as fast as possible (see apply_bulk_mode)
    mode: str = "realtime"
    #: `/metrics` and `/healthz` over HTTP: host and port (None: no HTTP server)
    http_host: str = "127.0.0.1"
    http_port: int | None = None
    #: the p95 the budget controller holds for live streams: frame available -> result published (ms)
    budget_ms: float = 33.0
    #: the budget controller on live streams (see streamlens/graph/control.py); off in bulk mode
    control: bool = True
    #: how far the controller may widen keyframe intervals
    max_stretch: float = 4.0


@dataclass(slots=True)
class PipelineConfig:
    path: Path
    sources: list[SourceConfig]
    detector: DetectorConfig
    keyframes: KeyframeConfig
    tracker: TrackerConfig
    sinks: list[SinkConfig]
    runtime: RuntimeConfig
    #: how the file is named in messages (as the user wrote it); "": str(path)
    display: str = ""


# Keys each section accepts; a key outside these is a mistake (a typo, most often).
_TOP_KEYS = ("sources", "detector", "keyframes", "tracker", "sinks", "runtime")
_TRACKER_KEYS = ("motion", "high_score", "low_score", "new_track_score", "lost_s", "coast_s")
_SOURCE_KEYS = ("name", "uri", "live", "loop", "max_fps", "options", "transport", "timeout_s", "stall_s",
                "backoff_initial_s", "backoff_max_s", "max_staleness_ms", "decode")
#: keys only a camera URL or a device takes, and the URL schemes a live source accepts
_LIVE_KEYS = ("transport", "timeout_s", "stall_s", "backoff_initial_s", "backoff_max_s", "decode")
LIVE_SCHEMES = ("rtsp", "rtsps", "http", "https", "rtmp", "rtmps", "rtmpt", "rtmpts", "udp", "tcp", "srt",
                "rtp")
_DETECTOR_COMMON = ("backend", "max_batch", "max_wait_ms", "budget_ms")
_DETECTOR_NEURAL = ("model", "imgsz", "conf", "iou", "classes", "names", "device", "half", "resize", "max_det")
_DETECTOR_ONNX = ("input", "threads")
_INPUT_KEYS = ("channels", "mean", "std", "pad", "pad_value")
_DETECTOR_MOTION = ("min_area", "history", "var_threshold", "work_width", "warmup")
_SINK_KEYS = {
    "jsonl": ("type", "path"),
    "video": ("type", "path", "codec", "preset", "crf"),
    "zmq": ("type", "endpoint", "mode", "format", "hwm", "wait_subscribers", "wait_timeout_s", "frames",
            "jpeg_quality", "annotate", "send_timeout_s", "linger_ms", "curve"),
}


class _Problems:
    """Collects `file: key.path: message` lines."""

    def __init__(self, file: str):
        self.file = file
        self.lines: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.lines.append(f"{self.file}: {path}: {message}" if path else f"{self.file}: {message}")


_KIND_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a mapping"}


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
    text = text.removesuffix("\n...").strip()
    return text if len(text) <= 60 else text[:57] + "..."


def _as_float(value: int) -> float:
    """An integer as a float; one too big for a float (10**400) is infinite."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


class _Section:
    """Reads one mapping of the file, reporting mistakes against its key path."""

    def __init__(self, node: Any, path: str, allowed: tuple[str, ...], problems: _Problems,
                 only_for: dict[str, str] | None = None):
        self.path, self.problems = path, problems
        self.node: dict[str, Any] = node if isinstance(node, dict) else {}
        if node is not None and not isinstance(node, dict):
            problems.add(path, f"wrong type: expected a mapping, got {_show(node)}")
        for key in self.node:
            if key in allowed:
                continue
            where = f"{path}.{key}" if path else str(key)
            if only_for and key in only_for:
                problems.add(where, f"only for {only_for[key]}")
            else:
                problems.add(where, f"unknown key (expected one of: {', '.join(allowed)})")

    def where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, kind: type, default: Any = None, *, required: bool = False,
            minimum: float | None = None, maximum: float | None = None, above: float | None = None,
            below: float | None = None, choices: tuple[str, ...] | None = None) -> Any:
        """The value of `key` if it is of `kind` (an integer is taken for a float), within
        `minimum`..`maximum` (inclusive), `above`..`below` (exclusive) and `choices`; else the
        mistake is reported and `default` returned. A float must be finite; an integer is at most
        `INT_MAX` unless `maximum` says otherwise."""
        if key not in self.node or self.node[key] is None:
            if required:
                self.problems.add(self.where(key), "missing")
            return default
        value = self.node[key]
        ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = _as_float(value), True
        if not ok:
            self.problems.add(self.where(key), f"wrong type: expected {_KIND_WORDS[kind]}, got {_show(value)}")
            return default
        if choices is not None and value not in choices:
            self.problems.add(self.where(key), f"unknown {_show(value)} ({', '.join(choices)})")
            return default
        if kind is int and maximum is None:
            maximum = INT_MAX
        bad = ("must be a finite number" if kind is float and not math.isfinite(value) else
               f"must be >= {minimum}" if minimum is not None and value < minimum else
               f"must be > {above}" if above is not None and value <= above else
               f"must be <= {maximum}" if maximum is not None and value > maximum else
               f"must be < {below}" if below is not None and value >= below else None)
        if bad:
            shown = self.node[key] if kind is float and not math.isfinite(value) else value
            self.problems.add(self.where(key), f"{bad}, got {_show(shown)}")
            return default
        return value


def interpolate(node: Any, path: str, problems: _Problems, env: dict[str, str] | None = None) -> Any:
    """Replace `${VAR}` and `${VAR:-default}` in every string of a loaded YAML tree."""
    env = os.environ if env is None else env
    if isinstance(node, dict):
        return {k: interpolate(v, f"{path}.{k}" if path else str(k), problems, env) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, f"{path}[{i}]", problems, env) for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node

    def substitute(m: re.Match) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        problems.add(path, f"environment variable {name} is not set")
        return ""

    return _VAR_RE.sub(substitute, node)


def _resolve(base: Path, text: str) -> Path:
    p = Path(os.path.expanduser(text))
    return p if p.is_absolute() else (base / p).resolve()


def _sources(node: Any, base: Path, problems: _Problems) -> list[SourceConfig]:
    if not isinstance(node, list) or not node:
        problems.add("sources", "missing" if node is None else "expected a non-empty list of sources")
        return []
    sources, seen = [], set()
    for i, item in enumerate(node):
        sec = _Section(item, f"sources[{i}]", _SOURCE_KEYS, problems)
        uri = sec.get("uri", str, required=True)
        name = sec.get("name", str, f"cam{i + 1}")
        if not _NAME_RE.fullmatch(name):
            problems.add(sec.where("name"), f"{name!r}: use letters, digits, '_' and '-' only")
        elif name in seen:
            problems.add(sec.where("name"), f"{name!r} is used by another source")
        seen.add(name)
        if uri is None:
            continue
        url = is_url(uri) or uri.startswith("/dev/")
        if not url:
            path = _resolve(base, uri)
            if not path.exists():
                problems.add(sec.where("uri"), f"file not found: {path}")
            elif not path.is_file():
                problems.add(sec.where("uri"), f"not a file: {path}")
            uri = str(path)
        options = sec.get("options", dict, {})
        bad = [k for k, v in options.items() if not isinstance(v, (str, int, float)) or isinstance(v, bool)]
        for k in bad:
            problems.add(f"{sec.where('options')}.{k}", "wrong type: expected a string or a number")
        sources.append(SourceConfig(
            name=name, uri=uri,
            live=sec.get("live", bool, url),
            loop=sec.get("loop", bool, False),
            max_fps=sec.get("max_fps", float, None, above=0),  # 1/60: a frame a minute
            options={str(k): str(v) for k, v in options.items() if k not in bad},
        ))
        _live_keys(sec, sources[-1], url)
    return sources


def _live_keys(sec: _Section, cfg: SourceConfig, url: bool) -> None:
    """Read a source's live-camera keys into `cfg`; they are mistakes on a file."""
    for key in _LIVE_KEYS:
        if key in sec.node and not url:
            sec.problems.add(sec.where(key), "only for camera URLs and devices (rtsp://, http://, /dev/videoN, ...)")
    scheme = cfg.uri.split("://", 1)[0].lower() if is_url(cfg.uri) else None
    if scheme is not None and scheme not in LIVE_SCHEMES:
        sec.problems.add(sec.where("uri"), f"unsupported URL scheme {scheme!r} in {cfg.display_uri} "
                                           f"(one of: {', '.join(LIVE_SCHEMES)})")
    if "transport" in sec.node and url and scheme not in ("rtsp", "rtsps"):
        sec.problems.add(sec.where("transport"), "only for rtsp:// and rtsps:// sources")
    cfg.transport = sec.get("transport", str, "tcp", choices=("tcp", "udp", "udp_multicast", "http", "https"))
    cfg.timeout_s = sec.get("timeout_s", float, 5.0, minimum=0.1, maximum=MAX_SECONDS)
    cfg.stall_s = sec.get("stall_s", float, 5.0, minimum=0.1, maximum=MAX_SECONDS)
    cfg.backoff_initial_s = sec.get("backoff_initial_s", float, 0.5, minimum=0.01, maximum=MAX_SECONDS)
    cfg.backoff_max_s = sec.get("backoff_max_s", float, 5.0, minimum=0.01, maximum=MAX_SECONDS)
    if cfg.backoff_max_s < cfg.backoff_initial_s:
        sec.problems.add(sec.where("backoff_max_s"), f"must be >= backoff_initial_s ({cfg.backoff_initial_s:g})")
    cfg.max_staleness_ms = sec.get("max_staleness_ms", float, None, minimum=1, maximum=MAX_MS)
    if cfg.max_staleness_ms is not None and not cfg.live:
        sec.problems.add(sec.where("max_staleness_ms"), "only for live sources (cameras, or files with live: true)")
    cfg.decode = sec.get("decode", str, "process", choices=("process", "thread"))


def _imgsz(sec: _Section) -> tuple[int, int] | None:
    """detector.imgsz: one side, or [height, width], each 32 to MAX_IMGSZ pixels."""
    value = sec.node.get("imgsz")
    if value is None:
        return None
    sides = value if isinstance(value, list) and len(value) == 2 else [value, value]
    if all(isinstance(v, int) and not isinstance(v, bool) and 32 <= v <= MAX_IMGSZ for v in sides):
        return (sides[0], sides[1])
    sec.problems.add(sec.where("imgsz"), f"expected an integer from 32 to {MAX_IMGSZ} or [height, width], "
                                         f"got {_show(value)}")
    return None


def _detector(node: Any, base: Path, problems: _Problems) -> DetectorConfig:
    if node is None:
        problems.add("detector", "missing")
        return DetectorConfig(backend="motion")
    backend = node.get("backend") if isinstance(node, dict) else None
    neural = backend in ("onnx", "ultralytics")
    allowed = _DETECTOR_COMMON + (_DETECTOR_NEURAL if neural else _DETECTOR_MOTION if backend == "motion" else ())
    allowed += _DETECTOR_ONNX if backend == "onnx" else ()
    only_for = {k: "backend onnx or ultralytics" for k in _DETECTOR_NEURAL}
    only_for.update({k: "backend onnx" for k in _DETECTOR_ONNX})
    only_for.update({k: "backend motion" for k in _DETECTOR_MOTION})
    if backend not in DETECTOR_BACKENDS:  # report the backend alone, not every key it would allow
        allowed, only_for = tuple(node) if isinstance(node, dict) else (), None
    sec = _Section(node, "detector", allowed, problems, only_for)
    backend = sec.get("backend", str, "motion", required=True, choices=DETECTOR_BACKENDS)
    cfg = DetectorConfig(
        backend=backend,
        max_batch=sec.get("max_batch", int, 4, minimum=1, maximum=MAX_BATCH),
        max_wait_ms=sec.get("max_wait_ms", float, 10.0, minimum=0, maximum=MAX_MS),
        budget_ms=sec.get("budget_ms", float, 33.0, minimum=0, maximum=MAX_MS) or None,  # 0: no budget
    )
    if backend == "motion":  # the ranges streamlens/detect/motion.py takes
        cfg.options = {
            "min_area": sec.get("min_area", float, None, minimum=0, below=1),  # a fraction of the frame
            "history": sec.get("history", int, None, minimum=1),
            "var_threshold": sec.get("var_threshold", float, None, above=0),
            "work_width": sec.get("work_width", int, None, minimum=16),
            "warmup": sec.get("warmup", int, None, minimum=1),
        }
        cfg.options = {k: v for k, v in cfg.options.items() if v is not None}
        return cfg
    model = sec.get("model", str, required=True)
    if model is not None:
        cfg.model = _resolve(base, model)
        if not cfg.model.exists():
            problems.add("detector.model", f"file not found: {cfg.model}")
    names = sec.get("names", str)
    if names is not None:
        cfg.names = _resolve(base, names)
        if not cfg.names.is_file():
            problems.add("detector.names", f"file not found: {cfg.names}")
    cfg.imgsz = _imgsz(sec)
    cfg.conf = sec.get("conf", float, 0.25, minimum=0, maximum=1)
    cfg.iou = sec.get("iou", float, 0.45, minimum=0, maximum=1)
    cfg.device = sec.get("device", str, "auto")
    cfg.half = sec.get("half", bool, False)
    cfg.resize = sec.get("resize", str, None, choices=RESIZE_MODES)  # None: the model's own convention
    cfg.max_det = sec.get("max_det", int, 300, minimum=1)
    if backend == "onnx":
        cfg.threads = sec.get("threads", int, None, minimum=1, maximum=MAX_THREADS)
        cfg.input = _detector_input(sec.node.get("input"), problems)
    classes = sec.get("classes", list)
    if classes is not None:
        for j, c in enumerate(classes):
            if not isinstance(c, (str, int)) or isinstance(c, bool):
                problems.add(f"detector.classes[{j}]", f"expected a class name or id, got {_show(c)}")
        cfg.classes = classes
    return cfg


def _pixel_triple(sec: _Section, key: str, minimum: float | None) -> list[float] | None:
    """`mean`/`std` of detector.input: a number or a list of three numbers."""
    value = sec.node.get(key)
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    ok = len(values) in (1, 3) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                       and math.isfinite(_as_float(v) if isinstance(v, int) else v) for v in values)
    if not ok or (minimum is not None and any(v <= minimum for v in values)):
        need = "a positive number" if minimum is not None else "a number"
        sec.problems.add(sec.where(key), f"expected {need} or a list of three, got {_show(value)}")
        return None
    return [float(v) for v in values] * (3 if len(values) == 1 else 1)


def _detector_input(node: Any, problems: _Problems) -> dict[str, Any] | None:
    """detector.input: how an ONNX model without metadata wants its pixels."""
    if node is None:
        return None
    sec = _Section(node, "detector.input", _INPUT_KEYS, problems)
    found = {
        "channels": sec.get("channels", str, None, choices=CHANNEL_ORDERS),
        "mean": _pixel_triple(sec, "mean", None),
        "std": _pixel_triple(sec, "std", 0.0),
        "pad": sec.get("pad", str, None, choices=PAD_PLACES),
        "pad_value": sec.get("pad_value", int, None, minimum=0, maximum=255),
    }
    return {k: v for k, v in found.items() if v is not None}


def _keyframes(node: Any, problems: _Problems) -> KeyframeConfig:
    sec = _Section(node, "keyframes", ("interval", "adaptive", "max_interval", "shared", "min_interval"),
                   problems)
    cfg = KeyframeConfig(
        interval=sec.get("interval", int, 1, minimum=1),
        adaptive=sec.get("adaptive", bool, False),
        shared=sec.get("shared", bool, True),
    )
    cfg.max_interval = sec.get("max_interval", int, max(15, cfg.interval), minimum=1)
    if cfg.max_interval < cfg.interval:
        problems.add("keyframes.max_interval", f"must be >= keyframes.interval ({cfg.interval})")
    cfg.min_interval = sec.get("min_interval", int, 1, minimum=1)
    if cfg.min_interval > cfg.interval:
        problems.add("keyframes.min_interval", f"must be <= keyframes.interval ({cfg.interval})")
    return cfg


def _tracker(node: Any, problems: _Problems) -> TrackerConfig:
    if node is None or node == "none" or node is False:
        return TrackerConfig(motion=None) if node is not None else TrackerConfig(motion="kalman")
    if isinstance(node, str):
        if node in TRACKER_MOTIONS:
            return TrackerConfig(motion=node)
        problems.add("tracker", f"unknown {node!r} (none, or a mapping with motion: {', '.join(TRACKER_MOTIONS)})")
        return TrackerConfig(motion=None)
    sec = _Section(node, "tracker", _TRACKER_KEYS, problems)
    cfg = TrackerConfig(motion=sec.get("motion", str, "kalman", choices=TRACKER_MOTIONS))
    for key in ("high_score", "low_score", "new_track_score"):
        setattr(cfg, key, sec.get(key, float, None, minimum=0, maximum=1))
    cfg.lost_s = sec.get("lost_s", float, None, above=0, maximum=MAX_SECONDS)  # a rate divides by it
    cfg.coast_s = sec.get("coast_s", float, None, minimum=0, maximum=MAX_SECONDS)  # 0: never coast
    if cfg.low_score is not None and cfg.high_score is not None and cfg.low_score > cfg.high_score:
        problems.add("tracker.low_score", f"must be <= tracker.high_score ({cfg.high_score})")
    if cfg.coast_s is not None and cfg.lost_s is not None and cfg.coast_s > cfg.lost_s:
        problems.add("tracker.coast_s", f"must be <= tracker.lost_s ({cfg.lost_s})")
    return cfg


def _sinks(node: Any, base: Path, problems: _Problems) -> list[SinkConfig]:
    if node is None:
        return []
    if not isinstance(node, list):
        problems.add("sinks", f"wrong type: expected a list, got {_show(node)}")
        return []
    sinks = []
    for i, item in enumerate(node):
        kind = item.get("type") if isinstance(item, dict) else None
        path = f"sinks[{i}]"
        if kind not in SINK_TYPES:
            sec = _Section(item, path, tuple(item) if isinstance(item, dict) else (), problems)
            sec.get("type", str, required=True, choices=SINK_TYPES)
            continue
        sec = _Section(item, path, _SINK_KEYS[kind], problems)
        options: dict[str, Any] = {}
        if kind in ("jsonl", "video"):
            target = sec.get("path", str, required=True)
            if target is not None:
                options["path"] = _resolve(base, target)
        if kind == "video":
            for key, typ, lo, hi in (("codec", str, None, None), ("preset", str, None, None),
                                     ("crf", int, 0, 51)):
                value = sec.get(key, typ, None, minimum=lo, maximum=hi)
                if value is not None:
                    options[key] = value
        if kind == "zmq":  # the keys are explained in streamlens/sinks/zmq.py
            endpoint = sec.get("endpoint", str, required=True)
            if endpoint is not None and not re.match(r"^(tcp|ipc|inproc)://.+", endpoint):
                problems.add(sec.where("endpoint"), f"expected tcp://HOST:PORT or ipc://PATH, got {endpoint!r}")
            options["endpoint"] = endpoint
            options["mode"] = mode = sec.get("mode", str, "pub", choices=("pub", "push"))
            options["format"] = sec.get("format", str, "json", choices=("json", "msgpack"))
            if options["format"] == "msgpack":
                try:
                    import msgpack  # noqa: F401
                except ImportError:
                    problems.add(sec.where("format"), "msgpack needs the msgpack package (pip install msgpack)")
            options["hwm"] = sec.get("hwm", int, 1000, minimum=1, maximum=MAX_HWM)
            options["wait_subscribers"] = sec.get("wait_subscribers", int, 0, minimum=0)
            options["wait_timeout_s"] = sec.get("wait_timeout_s", float, 30.0, minimum=0.001, maximum=MAX_SECONDS)
            options["frames"] = sec.get("frames", str, "none", choices=("none", "jpeg"))
            options["jpeg_quality"] = sec.get("jpeg_quality", int, 80, minimum=1, maximum=100)
            options["annotate"] = sec.get("annotate", bool, True)
            if mode != "push" and "send_timeout_s" in sec.node:
                problems.add(sec.where("send_timeout_s"), "only for mode push")
            options["send_timeout_s"] = sec.get("send_timeout_s", float, None, above=0, maximum=MAX_SECONDS)
            options["linger_ms"] = sec.get("linger_ms", int, None, minimum=0, maximum=int(MAX_MS))
            if sec.get("curve", dict) is not None:
                curve = _Section(sec.node["curve"], sec.where("curve"), ("server_secret", "authorized"), problems)
                secret, authorized = curve.get("server_secret", str, required=True), curve.get("authorized", str)
                options["curve"] = {"server_secret": secret and _resolve(base, secret),
                                    "authorized": authorized and _resolve(base, authorized)}
                from .wire.keys import KeyFileError, curve_available, read_secret_key

                if not curve_available():
                    problems.add(sec.where("curve"), "this libzmq has no CurveZMQ support (built without libsodium)")
                elif secret is not None:
                    try:
                        read_secret_key(options["curve"]["server_secret"])
                    except KeyFileError as e:
                        problems.add(curve.where("server_secret"), str(e))
                if authorized is not None and not options["curve"]["authorized"].is_dir():
                    problems.add(curve.where("authorized"), f"folder not found: {options['curve']['authorized']}")
        sinks.append(SinkConfig(type=kind, options=options))
    return sinks


RUNTIME_MODES = ("realtime", "bulk")
BULK_MAX_BATCH = 32


def apply_bulk_mode(cfg: PipelineConfig, data: dict, problems: _Problems) -> None:
    """`runtime.mode: bulk` (or `streamlens run --bulk`): archives as fast as the machine goes.

    Files only, never paced or looped; the detector on every frame (keyframes.interval 1), no
    latency budget, batches of `max_batch` (32 unless the file says), and room in the inbox for
    two batches per stream, so decoding runs ahead of inference (and so does preprocessing, on the
    source threads, when the detector runs on an accelerator: `Detector.prepare_ahead`).
    """
    for i, src in enumerate(cfg.sources):
        if not src.is_file:
            problems.add(f"sources[{i}].uri", "runtime.mode bulk reads files; a camera or URL is live")
        if src.loop:
            problems.add(f"sources[{i}].loop", "runtime.mode bulk reads each file once; remove loop")
        src.live = False
    cfg.keyframes.interval, cfg.keyframes.adaptive, cfg.keyframes.min_interval = 1, False, 1
    detector = data.get("detector") if isinstance(data.get("detector"), dict) else {}
    if "max_batch" not in detector:
        cfg.detector.max_batch = BULK_MAX_BATCH
    cfg.detector.budget_ms = None
    cfg.runtime.control = False
    cfg.runtime.queue_size = max(cfg.runtime.queue_size, 2 * cfg.detector.max_batch)


def parse_pipeline(data: Any, path: Path, display: str | None = None,
                   env: dict[str, str] | None = None) -> PipelineConfig:
    """Validate an already-loaded YAML tree. `display` is how the file is named in messages."""
    problems = _Problems(display or str(path))
    base = path.resolve().parent
    if not isinstance(data, dict):
        problems.add("", "expected a mapping with sources, detector, keyframes, tracker and sinks")
        raise ConfigError(problems.lines)
    data = interpolate(data, "", problems, env)
    _Section(data, "", _TOP_KEYS, problems)
    runtime = _Section(data.get("runtime"), "runtime",
                       ("queue_size", "mode", "http", "budget_ms", "control", "max_stretch"), problems)
    http = _Section(runtime.node.get("http"), "runtime.http", ("host", "port"), problems)
    cfg = PipelineConfig(
        path=path,
        display=problems.file,
        sources=_sources(data.get("sources"), base, problems),
        detector=_detector(data.get("detector"), base, problems),
        keyframes=_keyframes(data.get("keyframes"), problems),
        tracker=_tracker(data.get("tracker"), problems),
        sinks=_sinks(data.get("sinks"), base, problems),
        runtime=RuntimeConfig(queue_size=runtime.get("queue_size", int, 8, minimum=1, maximum=MAX_QUEUE_SIZE),
                              mode=runtime.get("mode", str, "realtime", choices=RUNTIME_MODES),
                              http_host=http.get("host", str, "127.0.0.1"),
                              http_port=http.get("port", int, None, minimum=0, maximum=65535),
                              budget_ms=runtime.get("budget_ms", float, 33.0, minimum=1, maximum=MAX_MS),
                              control=runtime.get("control", bool, True),
                              max_stretch=runtime.get("max_stretch", float, 4.0, minimum=1, maximum=16)),
    )
    if cfg.runtime.mode == "bulk":
        apply_bulk_mode(cfg, data, problems)
    if problems.lines:
        raise ConfigError(problems.lines)
    return cfg


class _Refused(yaml.MarkedYAMLError):
    """YAML that is valid but no pipeline file: nested too deep, an alias inside itself, too big."""


class _PipelineLoader(yaml.SafeLoader):
    """PyYAML's safe loader, bounded while it composes the file (before anything walks the tree).

    Anchors and aliases work (`defaults: &cam {...}`, then `<<: *cam` in each source), but an
    alias may not sit inside the node it names (`&a [*a]`: a tree without end), no node may hold
    more than `MAX_VALUES` values with its aliases expanded (a "billion laughs" file of 250 bytes
    holds billions), and nothing may nest deeper than `MAX_DEPTH`. Each is refused at its line.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        self._open: list[str | None] = []  # the anchor (or None) of each node being composed
        self._values: dict[int, int] = {}  # id(node) -> values it holds, aliases expanded

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise _Refused(None, None, f"alias *{event.anchor} is inside the node it names", event.start_mark)
            return super().compose_node(parent, index)  # the node composed (and counted) at its anchor
        if len(self._open) == MAX_DEPTH:
            raise _Refused(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        self._open.append(event.anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._open.pop()
        children = (node.value if isinstance(node, yaml.SequenceNode) else
                    [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
        values = 1 + sum(self._values[id(child)] for child in children)
        if values > MAX_VALUES:
            raise _Refused(None, None, f"more than {MAX_VALUES} values here once aliases are expanded",
                           node.start_mark)
        self._values[id(node)] = values
        return node


def read_yaml(path: str | Path, display: str | None = None) -> Any:
    """The YAML tree of a pipeline file (or another YAML file a pipeline names: a class names
    file), read with the bounds of `_PipelineLoader` and at most `MAX_FILE_BYTES` long; raises
    `ConfigError` with one line naming the file (and line)."""
    display = str(path) if display is None else display
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise ConfigError([f"{display}: larger than {MAX_FILE_BYTES >> 20} MiB: not a pipeline file"])
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{display}: file not found"]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError([f"{display}: cannot read: {getattr(e, 'strerror', None) or e}"]) from None
    loader = _PipelineLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        if isinstance(e, _Refused):
            raise ConfigError([f"{display}: {where}{e.problem}"]) from None
        reason = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError([f"{display}: {where}invalid YAML: {reason}"]) from None
    finally:
        loader.dispose()


def load_pipeline(path: str | Path, env: dict[str, str] | None = None,
                  overrides: dict[str, dict | list] | None = None) -> PipelineConfig:
    """Read and validate a pipeline file; raises `ConfigError` listing every mistake.

    `overrides` replaces keys of top-level sections, as command-line flags do (`--bulk`:
    `{"runtime": {"mode": "bulk"}}`); a list replaces a whole section (`{"sinks": [...]}`)."""
    display = str(path)
    path = Path(path)
    data = read_yaml(path, display)
    if overrides and isinstance(data, dict):
        for section, values in overrides.items():
            current = data.get(section)
            if isinstance(values, list):
                data[section] = values
            else:
                data[section] = {**(current if isinstance(current, dict) else {}), **values}
    return parse_pipeline(data, path, display, env)


def preflight_problems(cfg: PipelineConfig) -> list[str]:
    """What a run of `cfg` needs from this machine, checked now without starting anything: one line
    `FILE: key.path: what is wrong` per problem, [] when nothing is.

    - every file source is a readable file, the detector's model (a file or an export's folder)
      and names file exist, and a zmq sink's CurveZMQ secret key and `authorized` folder are there;
    - every output file (jsonl and video sinks; a video path's `{stream}` taken for each source)
      can be written: it is not a folder, its folder exists or can be made and is writable, it is
      not a source's file, and no other sink writes it;
    - the metrics HTTP port and the tcp port of every zmq sink bound on `*` or a numeric address
      are free now, and no two of them are the same. Each is tried as ZeroMQ and http.server
      listen (bind with SO_REUSEADDR, then close), so a port that a finished run's connections
      hold in TIME_WAIT counts as free, as it is to them; ephemeral ports (0, `*`) are not tried.

    `streamlens validate` prints these lines, and a run checks them before any sink opens (a sink
    truncates its file on open). A port or a folder may still change between the check and the run.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "p.yaml").write_text("sources: [{uri: rtsp://cam/1}]\\ndetector: {backend: motion}\\n"
        ...                               "sinks: [{type: jsonl, path: p.yaml/out.jsonl}]\\n")
        >>> [line.split(": ")[1:3] for line in preflight_problems(load_pipeline(d / "p.yaml"))]  # doctest: +ELLIPSIS
        [['sinks[0].path', 'cannot make folder .../p.yaml']]
    """
    problems = _Problems(cfg.display or str(cfg.path))
    inputs: dict[str, str] = {}
    for i, src in enumerate(cfg.sources):
        if src.is_file:
            _check_readable(Path(src.uri), f"sources[{i}].uri", problems)
            inputs.setdefault(os.path.realpath(src.uri), f"sources[{i}]")
    if cfg.detector.model is not None:
        _check_readable(cfg.detector.model, "detector.model", problems, folder_ok=True)
    if cfg.detector.names is not None:
        _check_readable(cfg.detector.names, "detector.names", problems)
    listeners: list[tuple[socket.AddressFamily, str, int, str]] = []
    http_host = {"": "0.0.0.0", "localhost": "127.0.0.1"}.get(cfg.runtime.http_host, cfg.runtime.http_host)
    if cfg.runtime.http_port and _is_ipv4(http_host):  # other host names are not looked up
        _check_port((socket.AF_INET, http_host, cfg.runtime.http_port), "runtime.http.port", listeners, problems)
    outputs: dict[str, str] = {}
    for i, sink in enumerate(cfg.sinks):
        where = f"sinks[{i}]"
        if "path" in sink.options:
            for target in _output_files(sink, cfg.sources):
                why = _unwritable(target)
                real = os.path.realpath(target)
                if why is None and real in inputs:
                    why = f"{target} is the input of {inputs[real]}: the sink would overwrite it"
                elif why is None and real in outputs and outputs[real] != where:
                    why = f"{target} is also written by {outputs[real]}"
                if why is not None:
                    problems.add(f"{where}.path", why)
                outputs.setdefault(real, where)
        address = _tcp_listen_address(sink.options.get("endpoint") or "")
        if address is not None:
            _check_port(address, f"{where}.endpoint", listeners, problems)
        curve = sink.options.get("curve") or {}
        if curve.get("server_secret") is not None:
            _check_readable(curve["server_secret"], f"{where}.curve.server_secret", problems)
        if curve.get("authorized") is not None and not curve["authorized"].is_dir():
            problems.add(f"{where}.curve.authorized", f"folder not found: {curve['authorized']}")
    return problems.lines


def _check_readable(path: Path, where: str, problems: _Problems, *, folder_ok: bool = False) -> None:
    """Report `path` unless it is a readable file (or, with `folder_ok`, a folder)."""
    if not path.exists():
        problems.add(where, f"file not found: {path}")
    elif not (path.is_file() or folder_ok and path.is_dir()):
        problems.add(where, f"not a file: {path}")
    elif not os.access(path, os.R_OK):
        problems.add(where, f"cannot read {path}: permission denied")


def _output_files(sink: SinkConfig, sources: list[SourceConfig]) -> list[Path]:
    """The files a jsonl or video sink writes: a video path's `{stream}` becomes each source's
    name (other streams of a path without it go beside it, in the same folder)."""
    path: Path = sink.options["path"]
    if sink.type == "video" and "{stream}" in str(path):
        return list(dict.fromkeys(Path(str(path).replace("{stream}", s.name)) for s in sources))
    return [path]


def _unwritable(target: Path) -> str | None:
    """Why a sink could not write `target`, making its folder first as sinks do; None if it can."""
    if target.is_dir():
        return f"is a folder: {target}"
    if target.exists():
        return None if os.access(target, os.W_OK) else f"cannot write {target}: permission denied"
    folder = target.parent
    while not folder.exists():  # "/" exists: this ends
        folder = folder.parent
    if not folder.is_dir():
        return f"cannot make folder {target.parent}: {folder} is a file"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write in folder {folder}: permission denied"
    return None


def _is_ipv4(host: str) -> bool:
    """Whether `host` is a numeric IPv4 address."""
    try:
        return ipaddress.ip_address(host).version == 4
    except ValueError:
        return False


def _tcp_listen_address(endpoint: str) -> tuple[socket.AddressFamily, str, int] | None:
    """(family, address, port) that binding `tcp://HOST:PORT` listens on, for HOST `*` or a numeric
    address (`[...]` for IPv6); None for any other endpoint (ipc, an interface name, port `*`)."""
    m = re.fullmatch(r"tcp://(\*|\[[0-9A-Fa-f:.]+\]|[0-9.]+):([0-9]+)", endpoint)
    if m is None:
        return None
    if m.group(1) == "*":
        return socket.AF_INET, "0.0.0.0", int(m.group(2))
    try:
        address = ipaddress.ip_address(m.group(1).strip("[]"))
    except ValueError:
        return None
    return (socket.AF_INET6 if address.version == 6 else socket.AF_INET), str(address), int(m.group(2))


def _check_port(address: tuple[socket.AddressFamily, str, int], where: str,
                listeners: list[tuple[socket.AddressFamily, str, int, str]], problems: _Problems) -> None:
    """Report `address` if another listener of this pipeline has its port, or nothing can listen on it now."""
    family, host, port = address
    shown = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
    for other_family, other_host, other_port, other in listeners:
        wildcard = ipaddress.ip_address(host).is_unspecified or ipaddress.ip_address(other_host).is_unspecified
        if (other_family, other_port) == (family, port) and (wildcard or other_host == host):
            problems.add(where, f"port {port} is also listened on by {other}")
            return
    listeners.append((family, host, port, where))
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ and http.server bind
        try:
            probe.bind((host, port))
        except (OSError, OverflowError) as e:  # OverflowError: a port past 65535
            problems.add(where, f"cannot listen on {shown}: {getattr(e, 'strerror', None) or e}")


__all__ = ["PipelineConfig", "SourceConfig", "DetectorConfig", "KeyframeConfig", "TrackerConfig",
           "SinkConfig", "RuntimeConfig", "load_pipeline", "parse_pipeline", "preflight_problems",
           "interpolate", "mask_url"]
