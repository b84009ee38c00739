"""What this CPU can do that decides which kernels the runtimes take: its flags (/proc/cpuinfo).

`CPU_FLAGS` are the flags the results pages name (issue 47): AVX2 or AVX-512, INT8 dot products
(VNNI), native bfloat16 (AVX-512 BF16, on AMD Zen 4 and Intel from Cooper Lake) and Intel's AMX tiles
(from Sapphire Rapids). Two CPUs of one model name can differ in them (a virtual machine may hide
some), so the runtime reads them rather than the name. `has_bf16()` decides the precision an
OpenVINO model runs in on a CPU by default (`detector.half`, detect/openvino_backend.py).

Example:
    >>> cpu_flags("processor : 0\\nflags : fpu sse avx2 avx512f avx512_bf16\\n")["avx512_bf16"]
    True
    >>> has_bf16({"avx2": True, "avx512_bf16": False, "amx_bf16": False})
    False
"""

from __future__ import annotations

import functools
import os

#: the flags a results page names, present or not
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")
#: the flags that mean native bfloat16 arithmetic
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: str | None = None) -> dict[str, bool] | None:
    """Which of `CPU_FLAGS` this CPU has (the first processor's `flags` line of /proc/cpuinfo, or of
    `cpuinfo`'s text); None where that cannot be read (not Linux).

    >>> sorted(name for name, has in cpu_flags("flags : avx2 amx_tile\\n").items() if has)
    ['amx_tile', 'avx2']
    """
    if cpuinfo is None:
        return _this_cpu()
    line = next((line for line in cpuinfo.splitlines() if line.split(":", 1)[0].strip() == "flags"), None)
    if line is None:
        return None
    found = set(line.split(":", 1)[1].split())
    return {name: name in found for name in CPU_FLAGS}


@functools.cache
def _this_cpu() -> dict[str, bool] | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return cpu_flags(f.read())
    except OSError:
        return None


def has_bf16(flags: dict[str, bool] | None = None) -> bool:
    """Whether the CPU computes bfloat16 natively (one of `BF16_FLAGS`); `flags`: `cpu_flags()`'s
    (default: this CPU's). False where the flags cannot be read."""
    flags = cpu_flags() if flags is None else flags
    return bool(flags) and any(flags.get(name) for name in BF16_FLAGS)


def machine_idle() -> tuple[float, float] | None:
    """The machine's CPU time so far, idle and in all, in clock ticks of every core (/proc/stat's
    first line; I/O wait counts as idle); None where that cannot be read (not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(n) for n in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (float(sum(ticks[3:5])), float(sum(ticks[:8]))) if len(ticks) >= 5 else None


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity: a container's share), at least 1."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def process_cpu_s() -> float:
    """The CPU seconds this process (all its threads) has used so far, user and system."""
    times = os.times()
    return times.user + times.system


__all__ = ["BF16_FLAGS", "CPU_FLAGS", "cpu_flags", "has_bf16", "machine_idle", "process_cpu_s", "usable_cores"]
