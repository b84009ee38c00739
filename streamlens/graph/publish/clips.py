"""`analytics.clips`: the stage that asks each stream's source for a clip around its chosen events,
and says where it will be in the event (`clip: {"path", "start_pts", "end_pts"}`, the event's window
in the stream's `pts`). The clip is the source's business (streamlens/sources/clips.py): recorded
where its packets are read, written by a thread of its own, whole once `post_s` has passed; the
stage only asks, never waits. An event that comes while the stream's last clip still has more than
`SHARE_MARGIN_S` to go shares (and extends) it; otherwise (or when the stream's times went back: a
file that looped) it gets a clip of its own. A source that records no clips now (a camera between
connections) gives its events none, said once.

What became of each clip comes back from the source (`Source.clip_outcomes`: written, or lost and
why) and is settled here, on the engine's thread. A lost clip is counted in its stream's
`StreamStats.clips_lost` (stats messages, `/api/stats`, `/metrics`, the summary), logged once per
stream and reason (one warning; the others only counted), and told by a `clip_lost` event of the
stream (`{"event": "clip_lost", "clip": {"path", "lost": true, "reason"}, "events": [seq, ...]}`,
the events whose clip it was), from which the history file and the live page mark those events'
`clip` lost. A request that came too late for its recorder (`refused`) loses nothing when the clip
it extends was asked for before. A clip with no word of it `NO_WORD_S` after its window ended (its
decode worker was killed), or by its stream's end, is counted lost too.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...frame import Event, Frame, FrameResult, empty_detections
from .stage import Stage

log = logging.getLogger("streamlens.clips")

#: an event shares the stream's open clip only while that clip still has this long to go: the
#: source reads ahead of the engine, and closes a clip once a packet past its end has come
SHARE_MARGIN_S = 1.0
#: a clip not settled this long (seconds) after its window should have ended is counted lost
NO_WORD_S = 60.0
#: the most reasons of loss logged per stream (each once); the others are only counted
TOLD_REASONS = 4


@dataclass
class _Asked:
    """A clip asked for and not yet settled: the events (seq) it is for, how many requests went into
    it, and when (`time.monotonic()`) its outcome is due at the latest."""

    events: list[int] = field(default_factory=list)
    asks: int = 0
    due: float = 0.0


class ClipStage(Stage):
    """See the module. `streams`: the run's streams (a `StreamSet`, asked for a stream's source and
    figures when needed: a restarted source is found under its name); `next_seq(stream)`: the
    stream's next event `seq` (the analytics stage's), for its `clip_lost` events."""

    def __init__(self, cfg, streams, next_seq=None):
        self.cfg, self.streams, self.next_seq = cfg, streams, next_seq
        self._open: dict[str, tuple[str, float, float]] = {}  # stream -> (path, start, end pts) of its open clip
        self._refused: set[str] = set()
        #: clips asked for, per stream
        self.asked: dict[str, int] = {}
        #: clips lost, per stream
        self.lost: dict[str, int] = {}
        self._pending: dict[str, dict[str, _Asked]] = {}  # stream -> path -> its clip, in the order asked
        self._told: dict[str, set[str]] = {}  # stream -> the reasons of loss logged
        self._last: dict[str, tuple[int, float | None, float]] = {}  # stream -> its last frame's index, pts, ts
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
        frame = result.frame
        self._last[frame.stream] = (frame.index, frame.pts, frame.ts)
        told = self._settle(frame.stream, result, time.monotonic())
        return result, out + told if told else out

    def _clip(self, result: FrameResult, event: Event) -> dict | None:
        frame = result.frame
        source = self._source(frame.stream)
        if frame.pts is None or source is None:
            return None
        start, end = frame.pts - self.cfg.pre_s, frame.pts + self.cfg.post_s
        path, open_start, open_end = self._open.get(frame.stream, (None, 0.0, float("-inf")))
        if path is None or frame.pts + SHARE_MARGIN_S > open_end or frame.pts < open_start:
            # the source may have closed that clip, or the stream's times went back (a file looped)
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(frame.ts))
            path = str(Path(self.cfg.path) / frame.stream / f"{stamp}-{event.body['event']}-{event.seq}.mp4")
            open_start, open_end = frame.pts, float("-inf")
        if not source.clip(start, max(end, open_end), path, frame.index):
            if frame.stream not in self._refused:
                self._refused.add(frame.stream)
                log.warning("%s: no clips: its source records none now", frame.stream)
            return None
        self._open[frame.stream] = (path, open_start, max(end, open_end))
        self.asked[frame.stream] = self.asked.get(frame.stream, 0) + 1
        asked = self._pending.setdefault(frame.stream, {}).setdefault(path, _Asked())
        asked.events.append(event.seq)
        asked.asks += 1
        asked.due = max(asked.due, time.monotonic() + self.cfg.post_s + NO_WORD_S)
        return {"path": path, "start_pts": round(start, 6), "end_pts": round(end, 6)}

    def _settle(self, stream: str, result: FrameResult, now: float | None) -> list[Event]:
        """What the source says of its clips: each settled, the lost ones told (`clip_lost` events,
        made on `result`); then, `now` given, the clips whose word is overdue counted lost; `now`
        None: every clip still waiting (the stream has ended)."""
        source, pending, told = self._source(stream), self._pending.get(stream), []
        for done in (source.clip_outcomes() if source is not None else ()):
            asked = pending.get(done.path) if pending else None
            if asked is None:  # settled already (a second recorder's word on a shared path)
                continue
            if done.refused and asked.asks > 1:  # a late extension: the clip asked for before goes on
                asked.asks -= 1
                continue
            del pending[done.path]
            if done.reason is not None:
                told.append(self._lost(stream, done.path, asked, done.reason, result))
        while pending and (now is None or next(iter(pending.values())).due < now):
            path = next(iter(pending))
            why = "no word of it from the stream's recorder" + (" by the stream's end" if now is None else "")
            told.append(self._lost(stream, path, pending.pop(path), why, result))
        return told

    def _lost(self, stream: str, path: str, asked: _Asked, reason: str, result: FrameResult) -> Event:
        """Clip `path` is lost: counted, logged once per stream and reason, and told by an event."""
        self.lost[stream] = self.lost.get(stream, 0) + 1
        owner = self.streams.get(stream)
        if owner is not None:
            owner.stats.clip_lost(reason)
        told = self._told.setdefault(stream, set())
        if reason not in told and len(told) < TOLD_REASONS:
            told.add(reason)
            log.warning("%s: clips are lost (%s: %s); each is counted (stats clips_lost, "
                        "streamlens_clips_lost_total, the summary) and its events say so; this is not logged again",
                        stream, path, reason)
        seq = self.next_seq(stream) if self.next_seq is not None else 0
        body = {"event": "clip_lost", "clip": {"path": path, "lost": True, "reason": reason},
                "events": list(asked.events)}
        return Event(stream, seq, body, result)

    def _source(self, stream: str):
        owner = self.streams.get(stream)
        return owner.source if owner is not None else None

    def stream_ended(self, stream: str) -> list[Event]:
        """The stream has ended: its clips still waiting are settled (lost, if no word has come);
        the `clip_lost` events that tells, to go out before its `eos`."""
        self._open.pop(stream, None)
        last = self._last.pop(stream, None)
        told: list[Event] = []
        if last is not None:
            index, pts, ts = last
            result = FrameResult(Frame(stream, index, pts, ts), -1, False, empty_detections())
            told = self._settle(stream, result, None)
        self._pending.pop(stream, None)
        return told


__all__ = ["ClipStage", "NO_WORD_S"]
