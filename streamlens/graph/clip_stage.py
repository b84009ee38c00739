"""`analytics.clips`: the stage that asks each stream's source for a clip around its chosen events,
and says where it will be in the event (`clip: {"path", "start_pts", "end_pts"}`, the event's window
in the stream's `pts`). The clip is the source's business (streamlens/sources/clips.py): recorded
where its packets are read, written by a thread of its own, whole once `post_s` has passed; the
stage only asks, never waits. An event that comes while the stream's last clip still has more than
`SHARE_MARGIN_S` to go shares (and extends) it; otherwise it gets a clip of its own. A source that records no clips now (a camera between connections) gives its events none, said
once."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

from ..frame import Event, FrameResult

log = logging.getLogger("streamlens.clips")

#: an event shares the stream's open clip only while that clip still has this long to go: the
#: source reads ahead of the engine, and closes a clip once a packet past its end has come
SHARE_MARGIN_S = 1.0


class ClipStage:
    """See the module. `sources`: the pipeline's sources by stream name (read when asked: a
    restarted source is found under its name)."""

    def __init__(self, cfg, sources: dict):
        self.cfg, self.sources = cfg, sources
        self._open: dict[str, tuple[str, float]] = {}  # stream -> (path, end pts) of its clip still open
        self._refused: set[str] = set()
        #: clips asked for, per stream
        self.asked: dict[str, int] = {}

    def process(self, result: FrameResult, messages: list) -> tuple[FrameResult, list]:
        cfg, out = self.cfg, []
        for message in messages:
            if isinstance(message, Event) and message.result is result and message.body.get("event") in cfg.events:
                label = (message.body.get("object") or {}).get("label")
                if cfg.classes is None or label in cfg.classes:
                    clip = self._clip(result, message)
                    if clip is not None:
                        message = replace(message, body={**message.body, "clip": clip})
            out.append(message)
        return result, out

    def _clip(self, result: FrameResult, event: Event) -> dict | None:
        frame = result.frame
        source = self.sources.get(frame.stream)
        if frame.pts is None or source is None:
            return None
        start, end = frame.pts - self.cfg.pre_s, frame.pts + self.cfg.post_s
        path, open_end = self._open.get(frame.stream, (None, float("-inf")))
        if path is None or frame.pts + SHARE_MARGIN_S > open_end:  # the source may have closed that clip
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(frame.ts))
            path = str(Path(self.cfg.path) / frame.stream / f"{stamp}-{event.body['event']}-{event.seq}.mp4")
        if not source.clip(start, max(end, open_end), path, frame.index):
            if frame.stream not in self._refused:
                self._refused.add(frame.stream)
                log.warning("%s: no clips: its source records none now", frame.stream)
            return None
        self._open[frame.stream] = (path, max(end, open_end))
        self.asked[frame.stream] = self.asked.get(frame.stream, 0) + 1
        return {"path": path, "start_pts": round(start, 6), "end_pts": round(end, 6)}

    def stream_ended(self, stream: str) -> None:
        self._open.pop(stream, None)


__all__ = ["ClipStage"]
