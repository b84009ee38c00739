"""A real RTSP server that takes published streams, for the rtsp sink's tests and tools: GStreamer's
RTSP server in record mode (see gst_record_server.py), on 127.0.0.1 with ports picked at run time.

Publishers send to `publish_url(name)`, players read `play_url(name)`; `kill()` ends the server at
once (SIGKILL, as a crash would) and `restart()` starts it again on the same ports. Needs what
`GstRtspServer` needs (`gst_missing()`).

Example:
    >>> with RecordServer(["cam1"], tmp_path) as server:                 # doctest: +SKIP
    ...     sink_url = server.publish_url("cam1")   # rtsp://127.0.0.1:PORT/cam1
    ...     player_url = server.play_url("cam1")    # rtsp://127.0.0.1:PLAY_PORT/cam1
    ...     server.kill(); server.restart()
"""

from __future__ import annotations

import socket
from pathlib import Path

from .rtsp_server import GST_PYTHON, ChildProcess, Served, free_port

RECORD_SCRIPT = Path(__file__).with_name("gst_record_server.py")


class RecordServer(Served):
    """GStreamer's RTSP server taking one published stream per name of `names` (see the module docs)."""

    def __init__(self, names: list[str], folder: Path):
        self.names = list(names)
        self.folder = Path(folder)
        self.port = self.play_port = 0
        self.udp_ports = {name: free_port(socket.SOCK_DGRAM) for name in self.names}
        self.server: ChildProcess | None = None

    def start(self) -> None:
        self.restart()

    def publish_url(self, name: str = "", credentials: str = "") -> str:
        """Where a publisher sends `name` (no name: the server's root, for a sink's `url`)."""
        return f"rtsp://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}/{name}".rstrip("/")

    def play_url(self, name: str) -> str:
        """Where a player reads `name`."""
        return f"rtsp://127.0.0.1:{self.play_port}/{name}"

    def restart(self) -> None:
        """Start the server (again, on the same ports); returns once both listen."""
        mounts = [arg for name, port in self.udp_ports.items() for arg in ("--mount", f"{name}={port}")]
        self.server = ChildProcess([GST_PYTHON, str(RECORD_SCRIPT), "--port", str(self.port),
                                    "--play-port", str(self.play_port), *mounts], self.folder / "record-server.log")
        line = self.server.readline(timeout=20)
        if not line.startswith("ready "):
            raise RuntimeError(f"GStreamer's RTSP record server did not start: {line!r}; "
                               f"see {self.folder / 'record-server.log'}")
        self.port, self.play_port = (int(part) for part in line.split()[1:3])

    def kill(self) -> None:
        """End the server at once (SIGKILL): its publishers and players lose their connections."""
        if self.server is not None:
            self.server.kill()
            self.server = None

    def close(self) -> None:
        self.kill()


__all__ = ["RecordServer", "RECORD_SCRIPT"]
