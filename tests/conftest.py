"""Shared test helpers: where the real test data lives, and how to run the CLI as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: run by Debian's /usr/bin/python3 (it needs python3-gi), never imported by pytest
collect_ignore = ["gst_rtsp_server.py"]

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
VIDEO = DATA / "video"


def need_video(name: str) -> Path:
    """The path of a real clip in ../shared/data/video, or skip the test saying why."""
    path = VIDEO / name
    if not path.is_file():
        pytest.skip(f"{path} not found: the real test clips live in ../shared/data outside the repository")
    return path


def streamlens(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300):
    """Run the `streamlens` command in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "streamlens", *args], cwd=cwd or REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
