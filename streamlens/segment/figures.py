"""What the mask stage's figures say in a few words: percentiles of a list, and the run summary's line.

Example:
    >>> percentiles([0.5, 1.0, 1.5, 2.0])
    {'p50': 1.25, 'p95': 1.925}
    >>> summary_line({"source": "sam", "runtime": "openvino bf16", "segmented": 9, "encoded": 8, "cached": 1,
    ...               "decoded": 30, "encode_ms": 640.0, "decode_ms_per_object": 12.5, "dropped": 0,
    ...               "gone": 0, "replaced": 0, "waited_s": 5.6, "lag_s": {"p50": 0.7, "p95": 0.9}})
    'masks (sam, openvino bf16): 30 masks on 9 keyframes, 8 encoded (640 ms each), 1 from the cache, decoder 12.5 ms an object; files waited 5.6 s for them; lag p50 0.70 s, p95 0.90 s'
"""

from __future__ import annotations

import numpy as np


def percentiles(values: list[float]) -> dict | None:
    """p50 and p95 of `values` (None when empty), rounded to the millisecond."""
    if not values:
        return None
    p50, p95 = np.percentile(np.asarray(values, np.float64), [50, 95])
    return {"p50": round(float(p50), 3), "p95": round(float(p95), 3)}


def summary_line(fig: dict) -> str:
    """One line of the run's summary for the mask stage's figures (`SegmentStage.stats`, or a
    `-seg` detector's `DetectorMaskStage.stats`)."""
    if fig.get("source") != "sam":
        return f"masks (detector): {fig.get('masks', 0)} masks taken from the detector"
    parts = [f"masks (sam, {fig.get('runtime')}): {fig['decoded']} masks on {fig['segmented']} keyframes, "
             f"{fig['encoded']} encoded ({_ms(fig.get('encode_ms'))} each), {fig['cached']} from the cache, "
             f"decoder {_ms(fig.get('decode_ms_per_object'), 1)} an object"]
    if fig.get("waited_s"):
        parts.append(f"files waited {fig['waited_s']:.1f} s for them")
    if fig.get("dropped"):
        parts.append(f"{fig['dropped']} jobs dropped ({fig.get('replaced', 0)} replaced by a newer keyframe, "
                     f"{fig.get('gone', 0)} whose tracks had gone)")
    lag = fig.get("lag_s")
    if lag:
        parts.append(f"lag p50 {lag['p50']:.2f} s, p95 {lag['p95']:.2f} s")
    return "; ".join(parts)


def _ms(value, decimals: int = 0) -> str:
    return "-" if value is None else f"{value:.{decimals}f} ms"


__all__ = ["percentiles", "summary_line"]
