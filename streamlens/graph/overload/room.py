"""Whether the CPU that shedding freed is being used (the budget controller's room rule, control.py).

A controller that sheds frames expects the cores to stay busy with the frames it keeps. When the run's
process uses much less CPU than it did lately, shedding has freed cores for nothing: what is still
late is not a load that shedding answers (at the top of the ladder, keyframes decoded late against a
trimmed wait limit kept a run shedding 9 in 10 for 20-50 s after a 10 s load had passed; issue 47).

`CpuRoom(cpu)` reads `cpu()` (the process's CPU seconds so far) once a tick: `has_room(shedding)` says
whether the mean over the last `EVIDENCE` ticks is under `SHARE` of the most such mean over the last
`WINDOWS` ticks (a start's burst counts, so a ladder climbed at the start is seen too); `keep(kept)`
is how large a share of frames to keep next, stepping down at once as far as that room allows.

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
#: with room, a step down keeps at most this many times the frames kept now
JUMP = 4.0


class CpuRoom:
    """The room rule's measure (see the module's docstring)."""

    def __init__(self, cpu: Callable[[], float]):
        self.cpu = cpu
        self._last: tuple[float, float] | None = None  # (tick, CPU seconds) at the last tick
        self._used: deque[float] = deque(maxlen=EVIDENCE)  # cores used over each of the last ticks
        self._means: deque[float] = deque(maxlen=WINDOWS)  # their means, tick by tick

    def has_room(self, now: float, shedding: bool) -> bool:
        """Read the CPU at tick `now`; whether, `shedding`, the process uses under `SHARE` of its most."""
        used, last = self.cpu(), self._last
        self._last = (now, used)
        if last is None or now <= last[0]:
            return False
        self._used.append((used - last[1]) / (now - last[0]))
        if len(self._used) < EVIDENCE:
            return False
        self._means.append(self._mean)
        return shedding and self._mean < SHARE * max(self._means)

    def keep(self, kept: float) -> float:
        """The share of frames to keep next, from `kept` now: times the room the CPU shows (the most
        it used lately over what it uses now, halved), at most `JUMP` times."""
        return kept * min(JUMP, SHARE * max(self._means) / max(self._mean, 1e-3))

    @property
    def _mean(self) -> float:
        return sum(self._used) / len(self._used)


__all__ = ["CpuRoom", "EVIDENCE", "JUMP", "SHARE", "WINDOWS"]
