"""Whether the CPU that shedding freed is being used (the budget controller's room rule, control.py).

A controller that sheds frames expects the cores to stay busy with the frames it keeps. When the run's
process uses much less CPU than it did lately, shedding has freed cores for nothing: what is still
late is not a load that shedding answers (at the top of the ladder, keyframes decoded late against a
trimmed wait limit kept a run shedding 9 in 10 for 20-50 s after a 10 s load had passed; issue 47).

`CpuRoom(cpu)` reads `cpu()` (the process's CPU seconds so far) once a tick: `has_room(shedding)` says
whether the mean over the last `EVIDENCE` ticks is under `SHARE` of the most such mean over the last
`WINDOWS` ticks (a start's burst counts, so a ladder climbed at the start is seen too); `keep(kept)`
is how large a share of frames to keep next, stepping down at once as far as that room allows.

`busy` is the other side: whether the process uses at least `BUSY` of that most, or the machine
(`machine`: its idle and all CPU time so far, cpu.py `machine_idle`) has less than `1 - BUSY` of its
cores idle, as under a load that more shedding would answer; the controller sheds more only then.
Frames late with cores idle are a burst: copies of one clip in step decode every keyframe at once,
and shedding each group's end (decode.py `DecodeShare`) kept every stream's start of group, the
burst, and idled the cores after it, so the frames stayed late and the controller climbed on
(highway K=21 on 2 cores: to 3 in 4 shed, p95 35 ms, worst stream F1 0.27-0.44). Then the controller
holds its rung and sheds whole groups, keyframe and all, each stream at its own phase: a share of
the streams skips each group, and the burst thins with the load (tools/results/capacity.md).

Example:
    >>> t, used = [0.0], [0.0]
    >>> room = CpuRoom(lambda: used[0])
    >>> def tick(cores, shedding):
    ...     t[0] += 1.0; used[0] += cores
    ...     return room.has_room(t[0], shedding)
    >>> [tick(1.0, False) for _ in range(4)], [tick(0.1, True) for _ in range(4)]
    ([False, False, False, False], [False, True, True, True])
    >>> round(room.keep(0.1), 2)
    0.4
    >>> room.busy   # the machine not read: it may be another program that holds the cores
    True
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

#: the room: the process uses less than this share of the most CPU it used lately
SHARE = 0.5
#: ... each measured over this many ticks
EVIDENCE = 3
#: ... the most taken over this many ticks
WINDOWS = 60
#: busy: the process uses at least this share of the most CPU it used lately
BUSY = 0.9
#: with room, a step down keeps at most this many times the frames kept now
JUMP = 4.0


class CpuRoom:
    """The room rule's measure (see the module's docstring)."""

    def __init__(self, cpu: Callable[[], float], machine: Callable[[], tuple[float, float] | None] | None = None):
        self.cpu, self.machine = cpu, machine
        self._last: tuple[float, float] | None = None  # (tick, CPU seconds) at the last tick
        self._idle: deque[tuple[float, float] | None] = deque(maxlen=EVIDENCE + 1)  # the machine's, tick by tick
        self._used: deque[float] = deque(maxlen=EVIDENCE)  # cores used over each of the last ticks
        self._means: deque[float] = deque(maxlen=WINDOWS)  # their means, tick by tick

    def has_room(self, now: float, shedding: bool) -> bool:
        """Read the CPU at tick `now`; whether, `shedding`, the process uses under `SHARE` of its most."""
        used, last = self.cpu(), self._last
        self._last = (now, used)
        if self.machine is not None:
            self._idle.append(self.machine())
        if last is None or now <= last[0]:
            return False
        self._used.append((used - last[1]) / (now - last[0]))
        if len(self._used) < EVIDENCE:
            return False
        self._means.append(self._mean)
        return shedding and self._mean < SHARE * max(self._means)

    @property
    def busy(self) -> bool:
        """Whether, over the last `EVIDENCE` ticks, the process used at least `BUSY` of the most it
        used lately or the machine had under `1 - BUSY` of its cores idle (True until both measured)."""
        if not self._means or self._mean >= BUSY * max(self._means):
            return True
        first, last = (self._idle[0], self._idle[-1]) if len(self._idle) > EVIDENCE else (None, None)
        return first is None or last is None or last[1] <= first[1] or (
            (last[0] - first[0]) / (last[1] - first[1]) < 1.0 - BUSY)

    def keep(self, kept: float) -> float:
        """The share of frames to keep next, from `kept` now: times the room the CPU shows (the most
        it used lately over what it uses now, halved), at most `JUMP` times."""
        return kept * min(JUMP, SHARE * max(self._means) / max(self._mean, 1e-3))

    @property
    def _mean(self) -> float:
        return sum(self._used) / len(self._used)


__all__ = ["BUSY", "CpuRoom", "EVIDENCE", "JUMP", "SHARE", "WINDOWS"]
