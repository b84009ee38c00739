"""Shared test helpers: where the real test data lives, and how to run the CLI as a user does."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
VIDEO = DATA / "video"


#: the analytics of the sample pipelines: a line down the middle of the road and a zone on its left
LINE_AND_ZONE = """  lines: [{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}]
  zones: [{name: left, polygon: [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], inertia: 2}]"""


def sample_pipeline(folder: Path, sinks: str, analytics: str = LINE_AND_ZONE) -> Path:
    """`folder/p.yaml`: the shipped sample through the motion detector (keyframes every 3rd frame)
    with `analytics` (the lines of the section's mapping) and `sinks` (the lines of its list)."""
    path = folder / "p.yaml"
    path.write_text(f"""
sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}}}]
detector: {{backend: motion}}
keyframes: {{interval: 3}}
analytics:
{analytics}
sinks:
{sinks}
""")
    return path


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


@contextlib.contextmanager
def tmpfs(folder: Path, size: str):
    """A tmpfs of `size` (mount's notation: `200k`, `1m`) mounted on `folder` (made here) for the
    block, unmounted after; skips the test where this machine does not let it mount (not root)."""
    folder.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs here ({made.stderr.strip() or 'mount failed'}): needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)
