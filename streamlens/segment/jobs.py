"""The mask stage's waiting jobs: one slot per stream, the worker served the longest-waiting first.

A job is one keyframe's pixels and the tracks due a mask on it. `JobSlots` holds at most one job
per stream: a newer keyframe of the same stream takes the slot (the newest keyframe wins: its boxes
are where the tracks are now) and the job it replaces is handed back, so that its tracks can come
along in the newer one. The worker takes the job whose tracks have waited longest (`since`: when
the first of them began to wait for a mask), so no camera is starved by a busier one: each has one
job at most, and a camera whose job waits grows older than one served since.

Used by two threads: the engine's puts (`put`) and the worker takes (`take`); a `threading.Condition`
guards the slots and tells a waiter when a job was answered (`answered`, `wait_for`).

Example:
    >>> slots = JobSlots()
    >>> slots.put(Job("cam1", 3, None, [1], None, None, 0.0, 5.0)) is None
    True
    >>> slots.put(Job("cam2", 4, None, [7], None, None, 0.0, 2.0)) is None
    True
    >>> slots.put(Job("cam1", 9, None, [1, 2], None, None, 0.0, 5.0)).frame   # cam1's older job replaced
    3
    >>> [(job.stream, job.frame) for job in (slots.take(0.0), slots.take(0.0))]   # cam2's waited longest
    [('cam2', 4), ('cam1', 9)]
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class Job:
    stream: str
    frame: int  # the keyframe's index
    image: np.ndarray | None
    tracks: list[int]
    prompts: np.ndarray | None  # the detector's boxes, one per track (source pixels)
    boxes: np.ndarray | None  # the tracked boxes on the keyframe, one per track: where each mask is pinned
    clock: float  # the keyframe's `Frame.clock` (time.monotonic()): what `lag_s` is measured from
    since: float  # time.monotonic() when the longest-waiting of its tracks began to wait


class JobSlots:
    """At most one waiting job per stream (see the module's docstring)."""

    def __init__(self):
        self._jobs: dict[str, Job] = {}
        self._turn = threading.Condition()

    def put(self, job: Job) -> Job | None:
        """Wait `job` in its stream's slot; the job it replaced (None: the slot was free)."""
        with self._turn:
            old = self._jobs.pop(job.stream, None)
            self._jobs[job.stream] = job
            self._turn.notify_all()
        return old

    def pop(self, stream: str) -> Job | None:
        """Take `stream`'s waiting job back (its stream ended), None when none waits."""
        with self._turn:
            return self._jobs.pop(stream, None)

    def take(self, timeout: float) -> Job | None:
        """The job whose tracks waited longest, taken out; None when none came within `timeout` s."""
        with self._turn:
            if not self._jobs:
                self._turn.wait(timeout)
            if not self._jobs:
                return None
            job = min(self._jobs.values(), key=lambda j: j.since)
            del self._jobs[job.stream]
            return job

    def answered(self) -> None:
        """The worker answered a job: wake whoever waits for it."""
        with self._turn:
            self._turn.notify_all()

    def wait_for(self, done, timeout: float) -> bool:
        """Wait until `done()` (checked under the lock the worker's `answered` takes), at most `timeout` s."""
        with self._turn:
            return self._turn.wait_for(done, timeout)

    def __len__(self) -> int:
        return len(self._jobs)


__all__ = ["Job", "JobSlots"]
