"""When the supervisor starts engines: how many (`worker_count`, `supervised`), which streams each
runs (`deal`), how long after a death it starts one again (`restart_delay`), when the engines built
start their streams (`to_start`), and the overload rung each must hold while they share a machine
(`ladder_floors`)."""

from __future__ import annotations

import os
from pathlib import Path

from ..config import PipelineConfig

#: how long after a death an engine is started again: the first wait, doubling at each death up to
#: the longest, and back to the first once an engine has run `HEALTHY_RUN_S` without dying
RESTART_DELAY_S = 1.0
RESTART_MAX_S = 30.0
HEALTHY_RUN_S = 60.0
#: how long the supervisor waits for an engine to end after telling it to
END_WAIT_S = 15.0


def restart_delay(last_s: float, ran_s: float) -> float:
    """The wait before an engine that died after running `ran_s` seconds is started again, when the
    wait before its last restart was `last_s` (0: none yet): the first wait, doubled at each death up
    to the longest, and the first again once it ran `HEALTHY_RUN_S`.

    Example:
        >>> [restart_delay(last, 5.0) for last in (0.0, 1.0, 2.0, 16.0, 30.0)]
        [1.0, 2.0, 4.0, 30.0, 30.0]
        >>> restart_delay(30.0, 61.0)
        1.0
    """
    if not last_s or ran_s >= HEALTHY_RUN_S:
        return RESTART_DELAY_S
    return min(RESTART_MAX_S, 2 * last_s)


def ladder_floors(rungs: dict[int, tuple[str, int]]) -> dict[int, int]:
    """Each engine's floor on the overload ladder (graph/overload/ladder.py): the highest rung that
    the other engines of its machine have climbed on their own (`rungs`: engine -> (host, its own
    rung)). Engines on other machines share no cores, so they count for nothing.

    Example:
        >>> ladder_floors({0: ("box", 6), 1: ("box", 0), 2: ("box", 2), 3: ("other", 9)})
        {0: 2, 1: 6, 2: 6, 3: 0}
    """
    return {engine: max((level for other, (where, level) in rungs.items() if other != engine and where == host),
                        default=0)
            for engine, (host, _) in rungs.items()}


def to_start(engines: dict[int, str], starting: bool) -> list[int]:
    """The engines to tell "go" now (engine.py `EngineSpec.start_together`): `engines` maps each
    engine to its state ("built": it said "ready" and waits; "loading": running, not built yet;
    "going": its streams run; "ended": not running). While the run is `starting` (no engine told
    yet), the built ones go together once none is loading; after that, one built goes at once (an
    engine started again after a death does not wait for the others).

    Example:
        >>> to_start({0: "built", 1: "loading"}, starting=True), to_start({0: "built", 1: "ended"}, True)
        ([], [0])
        >>> to_start({0: "going", 1: "built"}, starting=False)
        [1]
    """
    if starting and "loading" in engines.values():
        return []
    return [engine for engine, state in engines.items() if state == "built"]


def worker_count(config: PipelineConfig) -> int:
    """How many engines `runtime.workers` asks for, at most one per source. `auto` (the default):
    one per CPU core when the detector runs on the CPU; one per two cores when it runs on a GPU
    (`detector_on_gpu`); in a cluster, one per source."""
    wanted = config.runtime.workers
    if wanted == "auto":
        cores = os.cpu_count() or 2
        wanted = len(config.sources) if config.runtime.cluster else \
            max(1, cores // 2) if detector_on_gpu(config) else cores
    return max(1, min(int(wanted), len(placement_units(config))))


def placement_units(config: PipelineConfig) -> list[list]:
    """The sources in the units an engine takes whole, in the file's order (a unit where its first
    source is): the sources of `reid.across` together (their objects share global_ids, which one
    engine's reid stage keeps), every other source alone."""
    across = set(config.reid.across or ()) if config.reid is not None else set()
    units, group = [], None
    for source in config.sources:
        if source.name in across:
            if group is None:
                group = []
                units.append(group)
            group.append(source)
        else:
            units.append([source])
    return units


def deal(config: PipelineConfig, engines: int) -> list[list]:
    """Each engine's sources: the units (`placement_units`) in the file's order, each to the engine
    with the fewest streams so far (the lowest index on a tie): round robin when every unit is one
    source.

    Example:
        >>> from types import SimpleNamespace as S
        >>> cfg = S(sources=[S(name=n) for n in "abcde"], reid=S(across=["b", "d"]))
        >>> [[s.name for s in part] for part in deal(cfg, 2)]
        [['a', 'c', 'e'], ['b', 'd']]
        >>> [[s.name for s in part] for part in deal(S(sources=cfg.sources, reid=None), 2)]
        [['a', 'c', 'e'], ['b', 'd']]
    """
    parts: list[list] = [[] for _ in range(engines)]
    for unit in placement_units(config):
        min(parts, key=len).extend(unit)  # min() takes the first of equals: the lowest index
    return parts


def detector_on_gpu(config: PipelineConfig) -> bool:
    """Whether the detector will run on a GPU: `detector.device` cuda or cuda:N, or auto on a machine
    whose NVIDIA driver lists a GPU (for onnx, with onnxruntime's CUDA provider installed). Neither
    torch nor a CUDA context is loaded to find out: the supervisor that asks starts no detector."""
    detector = config.detector
    device = getattr(detector, "device", "cpu")
    if device.startswith("cuda"):
        return True
    if device != "auto" or detector.backend not in ("onnx", "ultralytics") or not _nvidia_gpus():
        return False
    if detector.backend == "onnx":
        import onnxruntime

        return "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    return True


def _nvidia_gpus() -> bool:
    """Whether the NVIDIA driver lists a GPU on this machine."""
    try:
        return any(Path("/proc/driver/nvidia/gpus").iterdir())
    except OSError:
        return False


def supervised(config: PipelineConfig) -> bool:
    """Whether `config` runs under a `Supervisor` (several engines, or a cluster) rather than one `Pipeline`."""
    return worker_count(config) > 1 or config.runtime.cluster is not None


__all__ = ["ladder_floors", "restart_delay", "worker_count", "deal", "placement_units", "detector_on_gpu", "supervised",
           "RESTART_DELAY_S", "RESTART_MAX_S", "HEALTHY_RUN_S", "END_WAIT_S"]
