"""What a run needs from this machine, checked before it starts: files to read, folders to
write, ports to listen on (`preflight_problems`); what `streamlens validate` checks beside: each
input file opened as its source opens it (`input_problems`), and what may fail but need not, as a
warning (`preflight_warnings`: a camera whose host does not resolve now)."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..http.auth import needs_token, token_problem
from ..models.cache import model_problem
from ..urls import RESOLVE_TIMEOUT_S, host_problem, is_loopback
from .model import PipelineConfig, SinkConfig, SourceConfig
from .problems import Problems
from .sinks import STREAM, video_path


def preflight_problems(cfg: PipelineConfig) -> list[str]:
    """What a run of `cfg` needs from this machine, checked now without starting anything: one line
    `FILE: key.path: what is wrong` per problem, [] when nothing is.

    - every file source is a readable file, the detector's model (a file or an export's folder)
      and names file exist, and a zmq sink's CurveZMQ secret key and `authorized` folder are there;
    - every output file (jsonl and video sinks; a video path's `{stream}` taken for each source)
      can be written: it is not a folder, its folder exists or can be made and is writable, it is
      not a source's file, and no other sink writes it;
    - the metrics HTTP port and the tcp port of every zmq sink bound on `*` or a numeric address
      are free now, and no two of them are the same. Each is tried as ZeroMQ and the HTTP server
      listen (bind with SO_REUSEADDR, then close), so a port that a finished run's connections
      hold in TIME_WAIT counts as free, as it is to them; ephemeral ports (0, `*`) are not tried.
    - the environment variables that hold tokens are set: the HTTP server's when it listens off
      loopback or `require_token` says so (and it holds at least 16 characters), and each webhook
      sink's `token_env`.

    `streamlens validate` prints these lines, and a run checks them before any sink opens (a sink
    truncates its file on open). A port or a folder may still change between the check and the run.

    Example:
        >>> import tempfile, pathlib
        >>> from streamlens.config import load_pipeline
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "p.yaml").write_text("sources: [{uri: rtsp://cam/1}]\\ndetector: {backend: motion}\\n"
        ...                               "sinks: [{type: jsonl, path: p.yaml/out.jsonl}]\\n")
        >>> [line.split(": ")[1:3] for line in preflight_problems(load_pipeline(d / "p.yaml"))]  # doctest: +ELLIPSIS
        [['sinks[0].path', 'cannot make folder .../p.yaml']]
    """
    problems = Problems(cfg.display or str(cfg.path))
    inputs: dict[str, str] = {}
    for i, src in enumerate(cfg.sources):
        if src.is_file:
            _check_readable(Path(src.uri), f"sources[{i}].uri", problems)
            inputs.setdefault(os.path.realpath(src.uri), f"sources[{i}]")
    if cfg.detector.model is not None:  # in the words the key's own check uses (models/cache.py)
        problem = model_problem(cfg.detector.model)
        if problem is not None:
            problems.add("detector.model", problem)
    if cfg.detector.names is not None:
        _check_readable(cfg.detector.names, "detector.names", problems)
    listeners: list[tuple[socket.AddressFamily, str, int, str]] = []
    http_host = {"": "0.0.0.0", "localhost": "127.0.0.1"}.get(cfg.runtime.http_host, cfg.runtime.http_host)
    if cfg.runtime.http_port and _is_ipv4(http_host):  # other host names are not looked up
        _check_port((socket.AF_INET, http_host, cfg.runtime.http_port), "runtime.http.port", listeners, problems)
    http = cfg.runtime.http
    if http.port is not None and needs_token(http.host, http.require_token):
        why = (f"listening on {http.host or 'every address'} (not a loopback address), every route but /healthz "
               "needs the access token it holds; set it, or listen on 127.0.0.1" if not is_loopback(http.host) else
               "runtime.http.require_token: every route but /healthz needs the access token it holds")
        problem = token_problem(os.environ.get(http.token_env), http.token_env, why)
        if problem is not None:
            problems.add("runtime.http.token_env", problem)
    outputs: dict[str, str] = {}
    for i, sink in enumerate(cfg.sinks):
        where = f"sinks[{i}]"
        if sink.options.get("token_env"):
            _check_env(sink.options["token_env"], f"{where}.token_env", problems, "the webhook's token is read from it")
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


def input_problems(cfg: PipelineConfig) -> list[str]:
    """Each file source opened as a run opens it (`sources.file_passes.open_file`: FFmpeg with the source's
    `options`, a video stream needed), one line `FILE: sources[i].uri: ...` for each that the run
    would refuse, in the run's own words: `/x/tone.m4a: has no video stream`, `/x/noise.mp4: not a
    video FFmpeg can read (Invalid data found when processing input)`, `/x/a.mp4: cannot open
    (Input/output error)`. A file that is missing or unreadable is left to `preflight_problems`.
    An existing `runtime.history` file is checked as the run checks it (`history.store.unsound`:
    SQLite's `quick_check`): one that is corrupt, or no database, is a line
    `FILE: runtime.history.path: ...`.

    `streamlens validate` prints these beside `preflight_problems`' lines; a run finds the same
    when it opens its sources (`streamlens: error: /x/tone.m4a: has no video stream`, exit 1), so
    this is not run twice.
    """
    problems = Problems(cfg.display or str(cfg.path))
    for i, src in enumerate(cfg.sources):
        path = Path(src.uri)
        if src.is_file and path.is_file() and os.access(path, os.R_OK):
            _check_opens(src, f"sources[{i}].uri", problems)
    history = cfg.runtime.history
    if history is not None:  # an existing file checked as the run checks it (history/sink.py)
        from ..history.store import unsound

        problem = unsound(str(history.path))
        if problem is not None:
            problems.add("runtime.history.path", f"{history.path} is not a sound history database ({problem}); "
                                                 f"move it aside (a new one is made) or repair it")
    return problems.lines


def preflight_warnings(cfg: PipelineConfig, timeout: float = RESOLVE_TIMEOUT_S) -> list[str]:
    """What may make a run of `cfg` fail but need not, as lines `FILE: key.path: warning: ...`.

    A camera whose host does not resolve now (`urls.host_problem`, all cameras looked up at once,
    at most `timeout` seconds in all): the name may resolve by the time the camera is up, and DNS
    may be what is down, so this is no mistake in the file, and a run retries the camera as it
    retries one that does not answer. `streamlens validate` prints these and still ends with 0.
    """
    problems = Problems(cfg.display or str(cfg.path))
    cameras = [(i, src.uri) for i, src in enumerate(cfg.sources) if not src.is_file]
    if not cameras:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(cameras)), thread_name_prefix="resolve") as pool:
        found = list(pool.map(lambda uri: host_problem(uri, timeout), [uri for _, uri in cameras]))
    for (i, _), problem in zip(cameras, found):
        if problem is not None:
            problems.add(f"sources[{i}].uri", f"warning: {problem} (a run retries the camera until it connects)")
    return problems.lines


def _check_readable(path: Path, where: str, problems: Problems) -> None:
    """Report `path` unless it is a readable file."""
    if not path.exists():
        problems.add(where, f"file not found: {path}")
    elif not path.is_file():
        problems.add(where, f"not a file: {path}")
    elif not os.access(path, os.R_OK):
        problems.add(where, f"cannot read {path}: permission denied")


def _check_opens(src: SourceConfig, where: str, problems: Problems) -> None:
    """Open a file source as a run opens it (`sources.file_passes.open_file`: FFmpeg with the source's
    `options`, a video stream needed) and report what the run would refuse it for, in its words."""
    from ..errors import SourceError
    from ..sources.file_passes import FileSpec, open_file

    try:
        open_file(FileSpec(src.uri, src.display_uri, dict(src.options))).close()
    except SourceError as e:
        problems.add(where, str(e))


def _output_files(sink: SinkConfig, sources: list[SourceConfig]) -> list[Path]:
    """The files a jsonl or video sink writes: a video path's `{stream}` becomes each source's
    name (other streams of a path without it go beside it, in the same folder)."""
    path: Path = sink.options["path"]
    if sink.type != "video":
        return [path]
    named = sources if STREAM in str(path) else sources[:1]
    return list(dict.fromkeys(video_path(path, s.name, i == 0) for i, s in enumerate(named)))


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


def _check_env(name: str, where: str, problems: Problems, why: str) -> None:
    if not os.environ.get(name):
        problems.add(where, f"the environment variable {name} is not set: {why}")


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
                listeners: list[tuple[socket.AddressFamily, str, int, str]], problems: Problems) -> None:
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
