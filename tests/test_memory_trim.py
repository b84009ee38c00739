"""What a removed stream leaves in the heap is given back to the system (streamlens/memory.py): a
process that freed frames kept by glibc's heaps shows it in its resident memory after `trim()`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from streamlens.memory import _malloc_trim

SCRIPT = r"""
import json, numpy as np
from streamlens.memory import trim

def anon_mb():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024

big = np.ones(4 << 20, np.uint8); del big        # glibc's mmap threshold follows it: frames come from the heap now
frames = [np.full((720, 1280, 3), i, np.uint8) for i in range(60)]   # a stream's worth of 720p frames
last = frames[-1]                                 # one still held at the top of the heap, as buffers are
del frames
held = anon_mb()
given = trim()
print(json.dumps({"held": held, "after": anon_mb(), "given": given, "last": int(last[0, 0, 0])}))
"""


@pytest.mark.skipif(_malloc_trim() is None, reason="the C library has no malloc_trim (not glibc)")
def test_frames_freed_in_the_heap_go_back_to_the_system():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    figures = json.loads(out.stdout)
    assert figures["given"] is True
    # 59 frames of 2.6 MiB were free in the heap: most of them leave resident memory
    assert figures["held"] - figures["after"] > 100, figures


@pytest.mark.skipif(_malloc_trim() is None, reason="the C library has no malloc_trim (not glibc)")
def test_streams_ending_together_make_one_trim_after_the_last():
    """A hundred streams removed at once: one waiting thread, not a hundred; it trims once, after the
    last request's delay (here long enough that the test reads it before it runs)."""
    import threading

    from streamlens import memory

    def trimmers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "memory-trim"]

    already = len(trimmers())
    for _ in range(100):
        memory.trim_soon(30.0)
    assert len(trimmers()) - already <= 1 and memory._due is not None
