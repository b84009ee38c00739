"""The secondary models' figures and the sinks' losses of a run over several engines: each engine
reports its own (`Pipeline.secondary_stats`, `sink_losses`, in its snapshot), and the supervisor
shows them as one run's (`merge_secondary`, `merge_losses` after `losses_as_filed`).

Counters add up; a flag (`available`) holds where it holds in every engine; the rates and means are
made again from the sums (a hit rate from hits and misses, `ms_per_crop` and `batch_mean` weighted
by the crops each engine computed).

Example:
    >>> one = {"colour": {"calls": 4, "tracks": 2, "computed": 3, "cached": 1, "hit_rate": 0.25,
    ...                   "attempts_per_track": 2.0, "batch_mean": 3.0, "ms_per_crop": 2.0, "dropped": 0},
    ...        "cache": {"hits": 1, "misses": 3, "hit_rate": 0.25, "available": True}}
    >>> two = {"colour": {"calls": 2, "tracks": 2, "computed": 1, "cached": 3, "hit_rate": 0.75,
    ...                   "attempts_per_track": 1.0, "batch_mean": 1.0, "ms_per_crop": 6.0, "dropped": 1},
    ...        "cache": {"hits": 3, "misses": 1, "hit_rate": 0.75, "available": False}}
    >>> merged = merge_secondary([one, two])
    >>> merged["colour"]["calls"], merged["colour"]["hit_rate"], merged["colour"]["ms_per_crop"]
    (6, 0.5, 3.0)
    >>> merged["colour"]["attempts_per_track"], merged["cache"]["hit_rate"], merged["cache"]["available"]
    (1.5, 0.5, False)
"""

from __future__ import annotations

import re

#: figures made again from the sums, not added
_MADE = {"hit_rate", "attempts_per_track", "batch_mean", "ms_per_crop"}


def merge_secondary(parts: list[dict]) -> dict:
    """The figures of every engine (`parts`, each as `Pipeline.secondary_stats` gives them) as one run's."""
    merged: dict = {}
    for part in parts:
        for name, figures in part.items():
            if isinstance(figures, dict):
                merged[name] = _add(merged.get(name), figures)
    return {name: _made(figures) for name, figures in merged.items()}


def _add(into: dict | None, figures: dict) -> dict:
    out = dict(into or {})
    weight = figures.get("computed") or 0
    for key, value in figures.items():
        if key in ("batch_mean", "ms_per_crop"):  # weighted by the crops computed
            if value is not None:
                out[f"_{key}"] = out.get(f"_{key}", 0.0) + value * weight
            continue
        if key in _MADE:
            continue
        old = out.get(key)
        if isinstance(value, bool):
            out[key] = value if old is None else old and value
        elif isinstance(value, (int, float)):
            out[key] = (old or 0) + value
        elif isinstance(value, dict):
            out[key] = _add(old, value)
        elif key not in out:
            out[key] = value
    return out


def _made(figures: dict) -> dict:
    out = {k: (_made(v) if isinstance(v, dict) else v) for k, v in figures.items() if not k.startswith("_")}
    computed = out.get("computed") or 0
    for key in ("batch_mean", "ms_per_crop"):
        if f"_{key}" in figures:
            out[key] = round(figures[f"_{key}"] / computed, 3) if computed else None
    if "hits" in out and "misses" in out:  # a cache's, as MemoryCache.stats gives it
        gets = out["hits"] + out["misses"]
        out["hit_rate"] = out["hits"] / gets if gets else 0.0
    elif "cached" in out and "computed" in out:
        looked = out["cached"] + out["computed"]
        out["hit_rate"] = round(out["cached"] / looked, 4) if looked else None
    if "calls" in out and "tracks" in out:
        out["attempts_per_track"] = round(out["calls"] / out["tracks"], 3) if out["tracks"] else None
    return out


def merge_counters(parts: list[dict]) -> dict:
    """The counters (integers) of every engine's figures added up, and their words where every
    engine says the same (`{"source": "sam"}`); medians and other measures are left out: they do
    not add up (the mask stage's figures, `Pipeline.segment_stats`, for /metrics).

    Example:
        >>> merge_counters([{"source": "sam", "encoded": 3, "encode_ms": 9.5}, {"source": "sam", "encoded": 4}])
        {'source': 'sam', 'encoded': 7}
    """
    out: dict = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, int) and not isinstance(value, bool):
                out[key] = out.get(key, 0) + value
            elif isinstance(value, str) and out.setdefault(key, value) != value:
                out[key] = None
    return {k: v for k, v in out.items() if v is not None}



def merge_losses(parts: list[dict[str, int]], keep_zero: bool = False) -> dict[str, int]:
    """Messages each sink could not deliver, by its key path, added up over `parts` (the engines'
    reports and the supervisor's forwarders); those with none left out unless `keep_zero`.

    Example:
        >>> merge_losses([{"sinks[0] (rtsp)": 3}, {"sinks[0] (rtsp)": 2, "sinks[1] (zmq)": 0}])
        {'sinks[0] (rtsp)': 5}
    """
    total: dict[str, int] = {}
    for part in parts:
        for where, n in part.items():
            if n or keep_zero:
                total[where] = total.get(where, 0) + n
    return total


def losses_as_filed(losses: dict[str, int], sink_types: list[str]) -> dict[str, int]:
    """An engine's sink losses (by its own sinks' entries) under the pipeline file's entries
    (`sink_types`: the file's sinks' types, in order): an engine's leg of a sink the supervisor
    writes (a zmq push to it, `sinks[1] (zmq)`) counts for that sink (`sinks[1] (jsonl)`); an
    engine's inner sinks (the `seq` marks, named but not filed) count for none.

    Example:
        >>> losses_as_filed({"sinks[1] (zmq)": 4, "seq-mark sink": 0, "sinks[0] (video)": 1}, ["video", "jsonl"])
        {'sinks[1] (jsonl)': 4, 'sinks[0] (video)': 1}
    """
    out: dict[str, int] = {}
    for key, n in losses.items():
        found = re.match(r"sinks\[(\d+)\]", key)
        if found and int(found.group(1)) < len(sink_types):
            index = int(found.group(1))
            where = f"sinks[{index}] ({sink_types[index]})"
            out[where] = out.get(where, 0) + n
    return out


__all__ = ["merge_secondary", "merge_counters", "merge_losses", "losses_as_filed"]
