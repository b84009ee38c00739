"""Whether an event's clip that is not on disk may still come (`/api/events/<N>/clip.mp4`: 503 with
`Retry-After`) or never will (410 Gone, with the line `clip_gone` gives).

A clip never comes when its event says it was lost (`clip.lost`, with `clip.reason`: the clip stage
marks it, streamlens/graph/publish/clips.py), or when `EXPECTED_WITHIN_S` has passed since its window
ended (by the event's wall time `ts`) without it: its run ended (or was killed) before its word
came, or retention (`analytics.clips.retain`) deleted it since.

Example:
    >>> clip_gone({"clip": {"path": "a.mp4", "lost": True, "reason": "No space left on device"}}, now=0.0)
    'lost: No space left on device'
    >>> event = {"ts": 1000.0, "pts": 5.0, "clip": {"path": "a.mp4", "end_pts": 7.0}}
    >>> clip_gone(event, now=1010.0) is None, clip_gone(event, now=1200.0)
    (True, 'not on disk 198 s after its window ended: never written, or deleted since by analytics.clips.retain')
"""

from __future__ import annotations

from typing import Any

#: a clip not on disk this long (seconds) after its window ended is not coming (the clip stage counts
#: a clip with no word of it lost after `NO_WORD_S`, 60 s, past the same moment)
EXPECTED_WITHIN_S = 120.0


def clip_gone(message: dict[str, Any], now: float) -> str | None:
    """Why event `message`'s clip, not on disk, will never be there (one line), or None while it
    may still come. `now`: `time.time()`."""
    clip = message.get("clip")
    if not isinstance(clip, dict):
        return None
    if clip.get("lost") is True:
        reason = clip.get("reason")
        return f"lost: {reason}" if isinstance(reason, str) and reason else "lost"
    ts, pts, end = message.get("ts"), message.get("pts"), clip.get("end_pts")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (ts, pts, end)):
        return None
    ended = ts + max(0.0, end - pts)  # the window's end on the wall clock
    if now - ended > EXPECTED_WITHIN_S:
        return (f"not on disk {now - ended:.0f} s after its window ended: never written, or deleted since by "
                f"analytics.clips.retain")
    return None


__all__ = ["clip_gone", "EXPECTED_WITHIN_S"]
