"""What a pipeline changes in its whole process, and undoes: Python's thread switch interval while
live streams run (`live_switch_interval`), and the garbage collection PyAV's side data may need
(`CycleCollector`); and, in the supervisor of several engines, the cyclic collector kept off what
was built before the run (`settle_heap`). They concern every thread of the process, not one node
of the graph.

Example:
    >>> import sys
    >>> before = sys.getswitchinterval()
    >>> with live_switch_interval(True):
    ...     sys.getswitchinterval() == LIVE_SWITCH_S
    True
    >>> sys.getswitchinterval() == before
    True
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Python's thread switch interval while a pipeline with live streams runs (seconds)
LIVE_SWITCH_S = 0.001
#: where PyAV's side data cycle could not be broken, a full garbage collection after this many
#: published frames (see `CycleCollector`)
COLLECT_EVERY_FRAMES = 24

_switch_lock = threading.Lock()
_switch_holders = 0
_switch_found = 0.005


@contextmanager
def live_switch_interval(live: bool) -> Iterator[None]:
    """While a live pipeline runs, its threads hand the GIL over every LIVE_SWITCH_S, not every 5 ms: a
    frame waiting on a thread that holds it costs latency (p95 on 3 paced 720p streams with
    YOLOX-Nano on 2 cores: 57 ms at 5 ms, 18 ms at 1 ms). The interval is the process's: the first
    live pipeline to start sets it, the last to end restores the value it found. `live` False:
    nothing changes."""
    global _switch_holders, _switch_found
    if not live:
        yield
        return
    with _switch_lock:
        if _switch_holders == 0:
            _switch_found = sys.getswitchinterval()
            sys.setswitchinterval(LIVE_SWITCH_S)
        _switch_holders += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switch_holders -= 1
            if _switch_holders == 0:
                sys.setswitchinterval(_switch_found)


class CycleCollector:
    """The fallback for a PyAV whose side data cycle `release_side_data` does not know how to break:
    a decoded picture whose motion vectors were read is then freed only by a full collection,
    which Python starts too rarely for pictures of megabytes. The engine then runs one after every
    `every` published frames (each takes milliseconds: a cost paid only on such a PyAV)."""

    def __init__(self, every: int = COLLECT_EVERY_FRAMES):
        self.every = every
        self._since = 0
        self.collections = 0

    def published(self) -> None:
        self._since += 1
        if self._since < self.every:
            return
        self._since = 0
        mvs = sys.modules.get("streamlens.sources.motion_vectors")  # imported once a source reads vectors
        if mvs is not None and mvs.SIDE_DATA_CYCLE:
            self.collections += 1
            gc.collect()


def settle_heap() -> bool:
    """Collect once, then keep every object made so far out of the cyclic collector's full passes
    (`gc.freeze`): the modules, the config, the sockets. A full pass holds the GIL while it walks
    every object the collector tracks, and the supervisor of several engines, whose forwarders
    hand each engine's results on to the subscribers, ran one every 2-3 s of 45-94 ms at indoor
    K=64 (every forwarded message waited), 2-14 ms once what was built is left out. Objects made
    later are collected as before; one frozen here that becomes garbage in a cycle is freed only
    after `release_heap`, which the run calls at its end. Returns whether the run is to give the
    heap back: not when something else in the process (a program embedding streamlens) had
    frozen objects already, since Python gives back only all of them at once."""
    thaw = gc.get_freeze_count() == 0
    gc.collect()
    gc.freeze()
    return thaw


def release_heap() -> None:
    """Hand what `settle_heap` froze back to the cyclic collector (a process that runs pipelines one
    after another would otherwise keep each finished run's cycles); only where `settle_heap` said
    so. Python unfreezes per process: anything frozen in it since is handed back too, which costs
    collections their time again, never an object."""
    gc.unfreeze()
