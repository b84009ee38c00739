"""Real RTSP servers for tests and benchmarks, from Debian's packages, on 127.0.0.1 with ports picked at run
time.

- `GstRtspServer`: GStreamer's RTSP server (gir1.2-gst-rtsp-server-1.0, run by Debian's /usr/bin/python3
  with python3-gi; see gst_rtsp_server.py). RTSP over TCP and UDP. Each mount is fed by an
  `ffmpeg -re -stream_loop -1 ... -f rtp` publisher on a local UDP port, which keeps running while the
  server is killed and restarted, as a camera's encoder would.
- `PerlRtspServer`: rtsp-server-perl (RTSP over UDP only), fed by `ffmpeg -re -stream_loop -1 ... -f rtsp`
  publishers; killing the server ends them too, and `restart()` starts both again.

Every process is started in its own session with a parent-death signal, and `close()` (or leaving the
`with` block) kills them all, so nothing outlives a test or a benchmark, even one that fails or is
interrupted.

Example:
    >>> with GstRtspServer({"cam1": media}, tmp_path) as server:       # doctest: +SKIP
    ...     url = server.url("cam1")          # rtsp://127.0.0.1:PORT/cam1
    ...     server.kill(); time.sleep(4); server.restart()
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

GST_PYTHON = "/usr/bin/python3"
GST_SCRIPT = Path(__file__).with_name("gst_rtsp_server.py")
PERL_SERVER = "rtsp-server-perl"
_PR_SET_PDEATHSIG = 1


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 that nothing uses now (TCP by default, or `socket.SOCK_DGRAM`)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ffmpeg_missing() -> str | None:
    return "ffmpeg is not installed (apt-get install ffmpeg)" if shutil.which("ffmpeg") is None else None


def gst_missing() -> str | None:
    """Why the GStreamer server cannot run here, or None."""
    if shutil.which("ffmpeg") is None:
        return "ffmpeg is not installed (apt-get install ffmpeg)"
    if not os.access(GST_PYTHON, os.X_OK):
        return f"{GST_PYTHON} not found (Debian's python3 with python3-gi runs GStreamer's RTSP server)"
    probe = subprocess.run([GST_PYTHON, "-c", "import gi; gi.require_version('GstRtspServer', '1.0'); "
                            "from gi.repository import GstRtspServer"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        return ("GStreamer's RTSP server is not installed (apt-get install python3-gi gir1.2-gst-rtsp-server-1.0 "
                "gstreamer1.0-plugins-good gstreamer1.0-plugins-bad)")
    return None


def perl_missing() -> str | None:
    if shutil.which("ffmpeg") is None:
        return "ffmpeg is not installed (apt-get install ffmpeg)"
    if shutil.which(PERL_SERVER) is None:
        return "rtsp-server-perl is not installed (apt-get install rtsp-server-perl)"
    return None


def annexb_copy(media: Path, folder: Path, *, scale: tuple[int, int] | None = None) -> Path:
    """`media`'s video as MPEG-TS with SPS/PPS before every keyframe, so an RTP publisher can loop
    it and a receiver can start at any keyframe. With `scale`, re-encoded at that size (libx264)."""
    suffix = f"_{scale[0]}x{scale[1]}" if scale else ""
    out = folder / f"{media.stem}{suffix}.ts"
    if out.exists():
        return out
    codec = (["-vf", f"scale={scale[0]}:{scale[1]}", "-c:v", "libx264", "-preset", "ultrafast", "-g", "30",
              "-bf", "0"] if scale else ["-c:v", "copy"])
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(media), "-an", *codec,
                    "-bsf:v", "h264_mp4toannexb", "-f", "mpegts", str(out)], check=True, timeout=120)
    return out


def die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the process that started it (a test, a tool) dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


class ChildProcess:
    """One child process in its own session (stderr to `log`); `kill()` ends its whole group."""

    def __init__(self, args: list[str], log: Path):
        self.args = args
        self.log = log
        self._log_file = open(log, "ab")
        self.popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=self._log_file, start_new_session=True,
                                      preexec_fn=die_with_parent)

    def readline(self, timeout: float) -> str:
        """The next line of its stdout (empty at its end, or after `timeout`)."""
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(self.popen.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                return ""
        return self.popen.stdout.readline().decode(errors="replace")

    def kill(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.popen.wait(timeout=10)
        if self.popen.stdout:
            self.popen.stdout.close()
        self._log_file.close()

    def pause(self) -> None:
        os.killpg(self.popen.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.popen.pid, signal.SIGCONT)


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def rtsp_ready(url: str, timeout: float = 10.0) -> None:
    """Wait until the server answers DESCRIBE for `url` with 200 (its publisher is in)."""
    host_port = url.split("/")[2].rsplit("@", 1)[-1]
    host, port = host_port.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0) as s:
                s.sendall(f"DESCRIBE {url} RTSP/1.0\r\nCSeq: 1\r\nAccept: application/sdp\r\n\r\n".encode())
                if b" 200 " in s.recv(4096).split(b"\r\n", 1)[0]:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer DESCRIBE with 200 within {timeout} s")


class Served:
    """A test server as a context manager: `start()` on entering (whatever it made is closed if that
    fails), `close()` on leaving."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tree_rss_mb(pid: int) -> float:
    """Resident memory of process `pid` and every process under it, in MiB (from /proc)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


class _RtspServer(Served):
    """What both test servers share: a context manager that starts them and always cleans up, and
    the URL of a mount. Subclasses set `rtsp_port` and define `start()` and `close()`."""

    rtsp_port = 0

    def url(self, name: str, credentials: str = "") -> str:
        return f"rtsp://{credentials + '@' if credentials else ''}127.0.0.1:{self.rtsp_port}/{name}"


class GstRtspServer(_RtspServer):
    """GStreamer's RTSP server serving `media` ({mount name: video file}) on one port."""

    def __init__(self, media: dict[str, Path], folder: Path):
        self.media = dict(media)
        self.folder = Path(folder)
        self.port = 0
        self.ready_at = 0.0
        self.udp_ports = {name: free_port(socket.SOCK_DGRAM) for name in self.media}
        self.publishers: dict[str, ChildProcess] = {}
        self.server: ChildProcess | None = None

    @property
    def rtsp_port(self) -> int:
        return self.port

    def start(self) -> None:
        for name, path in self.media.items():
            self.publishers[name] = ChildProcess(
                ["ffmpeg", "-nostdin", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i",
                 str(annexb_copy(path, self.folder)), "-an", "-c", "copy", "-f", "rtp",
                 f"rtp://127.0.0.1:{self.udp_ports[name]}"], self.folder / f"publisher-{name}.log")
        self.restart()

    def restart(self) -> None:
        """Start the server (again, on the same port) and return once it serves every mount."""
        first = self.port == 0
        mounts = [arg for name, port in self.udp_ports.items() for arg in ("--mount", f"{name}={port}")]
        self.server = ChildProcess([GST_PYTHON, str(GST_SCRIPT), "--port", str(self.port), *mounts],
                               self.folder / "gst-server.log")
        line = self.server.readline(timeout=20)
        #: wall-clock time (time.time()) at which the server served its streams (again): it says
        #: `ready` once it listens and each mount's media runs (after the publisher's first keyframe)
        self.ready_at = time.time()
        if not line.startswith("ready "):
            raise RuntimeError(f"GStreamer RTSP server did not start: {line!r}; see {self.folder / 'gst-server.log'}")
        self.port = int(line.split()[1])
        for name in self.media if first else ():
            rtsp_ready(self.url(name))

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash or a power cut would; publishers go on."""
        if self.server is not None:
            self.server.kill()
            self.server = None

    def close(self) -> None:
        self.kill()
        for publisher in self.publishers.values():
            publisher.kill()
        self.publishers.clear()


class PerlRtspServer(_RtspServer):
    """rtsp-server-perl with one `ffmpeg -f rtsp` publisher per mount (RTSP over UDP)."""

    def __init__(self, media: dict[str, Path], folder: Path):
        self.media = dict(media)
        self.folder = Path(folder)
        self.client_port = free_port()
        self.source_port = free_port()
        self.processes: list[ChildProcess] = []

    @property
    def rtsp_port(self) -> int:
        return self.client_port

    def start(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.processes.append(ChildProcess(
            [PERL_SERVER, "-c", str(self.client_port), "-s", str(self.source_port),
             "--client_listen_address", "127.0.0.1", "--source_listen_address", "127.0.0.1", "-l", "1"],
            self.folder / "perl-server.log"))
        _wait_port(self.client_port, 10)
        _wait_port(self.source_port, 10)
        for name, path in self.media.items():
            self.processes.append(ChildProcess(
                ["ffmpeg", "-nostdin", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i",
                 str(annexb_copy(path, self.folder)), "-an", "-c", "copy", "-f", "rtsp",
                 f"rtsp://127.0.0.1:{self.source_port}/{name}"], self.folder / f"publisher-{name}.log"))
        for name in self.media:
            rtsp_ready(self.url(name))

    def kill(self) -> None:
        """Kill the server and its publishers at once."""
        for process in self.processes:
            process.kill()
        self.processes.clear()

    def close(self) -> None:
        self.kill()
