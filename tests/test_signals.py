"""Ctrl-C is acted on outside the signal handler (streamlens/signals.py): a signal that lands while
the main thread holds a lock the stop needs no longer waits for that lock for ever, and a burst of
signals (what `timeout` sends: the process and its group) ends a real run with exit 130."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from .conftest import REPO, need_video


#: the two tests below run in a child process of their own: they raise real signals, and a test
#: worker that such a signal ended would take every test after it down with it (pytest-xdist)
_LOCK = """
import signal, threading
from streamlens.signals import SignalRelay
stop, done = threading.Event(), threading.Event()
relay = SignalRelay(lambda presses: (stop.set(), done.set()), (signal.SIGUSR1,))
with stop._cond:  # as inside Event.set(), where Python may run a handler between bytecodes
    signal.raise_signal(signal.SIGUSR1)  # the handler runs here, on this thread, now
    print("set inside the lock:", stop.is_set())  # acted on elsewhere: the relay's thread waits for the lock
print("acted on:", done.wait(30) and stop.is_set())
relay.close()
print("presses:", relay.presses)
"""

_ORDER = """
import signal, threading
from streamlens.signals import SignalRelay
seen, third = [], threading.Event()
relay = SignalRelay(lambda presses: (seen.append(presses), presses == 3 and third.set()), (signal.SIGUSR1,))
for _ in range(3):
    signal.raise_signal(signal.SIGUSR1)
print("third acted on:", third.wait(30))
relay.close()
print("seen:", seen)
"""


def _child(code: str) -> list[str]:
    """Run `code` in a Python process of its own; its lines of output (it must exit 0)."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-3000:])
    return done.stdout.splitlines()


def test_a_signal_landing_while_the_main_thread_holds_the_stops_lock_does_not_deadlock():
    assert _child(_LOCK) == ["set inside the lock: False", "acted on: True", "presses: 1"]


def test_presses_are_counted_and_acted_on_in_order():
    assert _child(_ORDER) == ["third acted on: True", "seen: [1, 2, 3]"]


def test_a_burst_of_signals_ends_a_run_of_many_streams_with_130(tmp_path):
    """Two signals back to back, as `timeout -s INT` sends them, on a run of 24 live streams: the
    second used to land inside the first's stop, which then waited for a lock it held itself."""
    clip = need_video("highway_320x240.avi")
    sources = ", ".join(f"{{name: s{i}, uri: {clip}, live: true, loop: true}}" for i in range(24))
    path = tmp_path / "p.yaml"
    path.write_text(f"sources: [{sources}]\ndetector: {{backend: motion}}\n"
                    f"sinks: [{{type: jsonl, path: {tmp_path / 'out.jsonl'}}}]\n")
    proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out = tmp_path / "out.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 10_000):
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)  # a deadlock never ends: this only bounds the test
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
