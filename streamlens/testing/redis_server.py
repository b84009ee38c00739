"""A real Redis server for tests and benchmarks: Debian's `redis-server` on 127.0.0.1, a port picked at
run time, no persistence, its files in a folder of the caller's.

`RedisServer` starts it and waits until it answers PING; `stop()` ends it (SIGTERM, then SIGKILL),
`start()` starts it again on the same port, `pause()`/`resume()` freeze and thaw it (a server that
accepts connections and never answers). The process gets SIGKILL if the process that started it
dies, and `close()` (or leaving the `with` block) ends it, so it never outlives a test or a tool. With `password`, it
requires one (`--requirepass`) and `url` holds it.

Example:
    >>> with RedisServer(tmp_path) as server:                 # doctest: +SKIP
    ...     url = server.url                  # redis://127.0.0.1:PORT/0
    ...     server.stop(); server.start()     # the same port, an empty server
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from .rtsp_server import Served, die_with_parent, free_port

REDIS_SERVER = "redis-server"


def redis_missing() -> str | None:
    """Why a Redis server cannot run here, or None."""
    if shutil.which(REDIS_SERVER) is None:
        return "redis-server is not installed (apt-get install redis-server)"
    if importlib.util.find_spec("redis") is None:
        return "the redis Python package is not installed (pip install redis)"
    return None


def redis_ping(port: int, password: str | None = None, timeout: float = 0.5) -> bool:
    """Whether a Redis server on 127.0.0.1:`port` answers PING (in RESP, without redis-py)."""
    request = b"*1\r\n$4\r\nPING\r\n"
    if password:
        secret = password.encode()
        request = b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(secret), secret) + request
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(request)
            answer = b""
            while answer.count(b"\r\n") < (2 if password else 1):
                chunk = s.recv(64)
                if not chunk:
                    break
                answer += chunk
            return answer.endswith(b"+PONG\r\n")
    except OSError:
        return False


class RedisServer(Served):
    """One `redis-server` on 127.0.0.1 (see the module); `folder` holds its log and working directory."""

    def __init__(self, folder: Path, port: int | None = None, password: str | None = None):
        self.folder = Path(folder)
        self.password = password
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.popen: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        """`redis://[:password@]127.0.0.1:PORT/0`."""
        return f"redis://{':' + self.password + '@' if self.password else ''}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> None:
        """Start it (on `self.port`) and wait until it answers PING."""
        if self.popen is not None and self.popen.poll() is None:
            return
        self._log = open(self.folder / "redis-server.log", "ab")
        self.popen = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.folder), "--daemonize", "no", "--loglevel", "warning",
             *(["--requirepass", self.password] if self.password else [])],
            cwd=self.folder, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while not redis_ping(self.port, self.password):
            if self.popen.poll() is not None:
                log = (self.folder / "redis-server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server on port {self.port} exited with {self.popen.returncode}:\n{log}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not answer PING within {timeout} s")
            time.sleep(0.02)

    def stop(self) -> None:
        """End it (SIGTERM, SIGKILL after 5 s) and wait until its port is free."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.resume()
            self.popen.terminate()
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=5)
        self.popen = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def pause(self) -> None:
        """Freeze it (SIGSTOP): connections are accepted, nothing is answered."""
        if self.popen is not None and self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGCONT)

    def close(self) -> None:
        self.stop()

