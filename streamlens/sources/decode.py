"""Decoding rules shared by the file source (`file.py`) and the live inputs' decode sessions
(`session.py`): the decoder's options, presentation times made strictly increasing, a frame-rate
cap, a live decoder's catch-up when it falls behind its camera, and the share of frames a decoder
keeps when the budget controller sheds, down to its keyframes only (`DecodeShare`, `drain`)."""

from __future__ import annotations

import math
from collections import deque
from fractions import Fraction

import av


def decoder_options(export_mvs: bool, fast: bool, chunks: bool = False) -> dict[str, str]:
    """FFmpeg's decoder options for a source: the motion vectors exported (`flags2`, for the `mv`
    tracker), with `sources[i].fast_decode` the loop (deblocking) filter skipped, and with `chunks`
    pictures that may come in several packets (a live input: FFmpeg's RTSP demuxer hands an H.264
    picture of several slices over as one packet per slice; decoded as whole pictures, each packet
    would start a picture of its own, and every frame after it would be wrong until the next
    keyframe).

    Example:
        >>> decoder_options(True, True, chunks=True)
        {'flags2': '+export_mvs+chunks', 'skip_loop_filter': 'all'}
    """
    flags = ("+export_mvs" if export_mvs else "") + ("+chunks" if chunks else "")
    options = {"flags2": flags} if flags else {}
    if fast:
        options["skip_loop_filter"] = "all"
    return options


class PresentationTimes:
    """Turn decoded frames' timestamps into strictly increasing seconds, for one pass of a file.

    The timestamp is chosen as FFmpeg's `best_effort_timestamp` does: the frame's pts while pts is
    no less reliable than dts, else its dts. (AVI files with packed B-frames, common for XviD/DivX,
    give pts values out of order, but a steady dts.) A frame with neither timestamp, or one that
    would not move time forward, gets the previous time plus one frame duration.

    Example:
        >>> times = PresentationTimes(Fraction(1, 25), 0.04)
        >>> [round(times.from_ticks(p, d), 2) for p, d in [(1, 3), (4, 4), (6, 5), (5, 6), (None, None)]]
        [0.04, 0.16, 0.24, 0.28, 0.32]
    """

    def __init__(self, time_base: Fraction, frame_duration: float):
        self.time_base = time_base
        # exact arithmetic, so a filled-in time equals the file's own time for the same instant
        self.frame_duration = Fraction(frame_duration).limit_denominator(1_000_000)
        self.last_seconds: Fraction | None = None
        self.last_pts: int | None = None
        self.last_dts: int | None = None
        self.faulty_pts = 0
        self.faulty_dts = 0

    def seconds(self, frame: av.VideoFrame) -> float:
        return self.from_ticks(frame.pts, frame.dts)

    def from_ticks(self, pts: int | None, dts: int | None) -> float:
        ticks = self._best_effort(pts, dts)
        seconds = None if ticks is None else ticks * self.time_base
        if self.last_seconds is None:
            seconds = Fraction(0) if seconds is None else seconds
        elif seconds is None or seconds <= self.last_seconds:
            seconds = self.last_seconds + self.frame_duration
        self.last_seconds = seconds
        return float(seconds)

    def _best_effort(self, pts: int | None, dts: int | None) -> int | None:
        if dts is not None:
            self.faulty_dts += self.last_dts is not None and dts <= self.last_dts
            self.last_dts = dts
        if pts is not None:
            self.faulty_pts += self.last_pts is not None and pts <= self.last_pts
            self.last_pts = pts
        if pts is not None and (self.faulty_pts <= self.faulty_dts or dts is None):
            return pts
        return dts


class FrameRateCap:
    """Keep at most `max_fps` frames a second, chosen from presentation times.

    Time since the first frame is cut into slots of 1/max_fps seconds and the first frame of each
    slot is kept, so 30 fps capped at 15 keeps every other frame and 30 capped at 20 keeps two of
    three, evenly.

    Example:
        >>> cap = FrameRateCap(15)
        >>> [cap.keep(k / 30) for k in range(6)]
        [True, False, True, False, True, False]
    """

    def __init__(self, max_fps: float):
        self.max_fps = max_fps
        self.first_pts: float | None = None
        self.last_slot: int | None = None

    def keep(self, pts: float) -> bool:
        if self.first_pts is None:
            self.first_pts = pts
        slot = math.floor((pts - self.first_pts) * self.max_fps + 1e-6)
        if self.last_slot is not None and slot <= self.last_slot:
            return False
        self.last_slot = slot
        return True


#: the wall time over which a session's pace is read, at its start (`CatchUp`)
PACE_WINDOW_S = 0.5
#: a start's packets that run this many times faster than this host's clock are a server's backlog
LIVE_PACE = 1.5
#: a backlog comes as fast as the network carries it: one still read after this long (wall time) is
#: a camera whose clock runs fast, not a backlog, and its packets are decoded again
BACKLOG_MAX_S = 5.0


class CatchUp:
    """Whether a live decoder has fallen behind its camera, and so skips to a keyframe.

    A camera sends frames at its own pace whether or not they are decoded in time. A decoder short
    of CPU falls behind: the packets wait in socket buffers, and every frame it hands over is older
    than the one before. Latency counted from decoding does not show it (each frame was decoded a
    moment ago), nor does any queue of the graph. Here it is measured by the packets' own clock:
    `lag` is how much later, on this host's clock, a packet is read than the most punctual packet of
    the last `window_s` seconds would put it (`offset = read time - packet time`, minus the least
    offset of the window). Past `behind_s`, packets are skipped, not decoded (demuxing costs a tenth
    of decoding), up to the first keyframe read with less than half of `behind_s` of lag, which is
    decoded: the decoder is back at the camera's present, at the cost of the frames skipped
    (counted as the worker's drops). The window lets the least offset follow a camera whose clock
    runs slower than this host's, or a network path that got longer.

    A server may also send, to a client that has just connected, what it buffered before (a relay's
    cache, a shared stream that ran with no client): seconds of video at once, the oldest first.
    There every packet is the most punctual yet, so the lag above stays 0 and the whole backlog was
    decoded and published as if live (with 30 s of it from GStreamer's RTSP server, six cameras'
    first trial shed 540-600 frames each: tools/results/cameras.md). So in the session's first
    `window_s`, once its packets have run ahead of this host's clock by more than `behind_s` since
    its first (`backlog`), packets are skipped up to a keyframe read at the camera's pace (over the
    last `PACE_WINDOW_S`, no more than `LIVE_PACE` times as much video as wall time): the present.
    Those are not the camera's losses (it sent them before the session began) and are not counted.
    A "backlog" that lasts `BACKLOG_MAX_S` of wall time is a camera whose clock runs fast: decoded.
    `backlogs=False` leaves this out (a live file's clock is known: `ClockCatchUp`).

    Example:
        >>> catch_up = CatchUp(behind_s=1.0)
        >>> [catch_up.skip(pts, now, key) for pts, now, key in
        ...  [(0.0, 100.0, True), (0.5, 100.5, False), (1.0, 102.5, False), (1.5, 102.6, False),
        ...   (2.0, 102.7, True), (2.5, 102.8, False), (4.0, 104.1, True), (4.5, 104.5, False)]]
        [False, False, True, True, True, True, False, False]

    A backlog of 3 s sent at once, then the camera's present at 10 packets a second, a keyframe
    every 5th:
        >>> catch_up = CatchUp(behind_s=1.0)
        >>> burst = [catch_up.skip(i / 10, 50.0 + i / 1000, i % 5 == 0) for i in range(30)]
        >>> burst.index(True), catch_up.backlog    # decoded until it ran 1 s ahead of the clock
        (11, True)
        >>> live = [catch_up.skip(3.0 + i / 10, 50.03 + i / 10, i % 5 == 0) for i in range(1, 12)]
        >>> live, catch_up.backlog                  # the first keyframe read at the camera's pace
        ([True, True, True, True, False, False, False, False, False, False, False], False)
    """

    def __init__(self, behind_s: float, window_s: float = 30.0, backlogs: bool = True):
        self.behind_s = behind_s
        self.window_s = window_s
        self.skipping = False
        #: skipping what a server sent of its backlog at the session's start (not counted as drops)
        self.backlog = False
        #: (read time, offset) with offsets increasing: the least offset of the window is the first
        self._least: deque[tuple[float, float]] = deque()
        self._first: tuple[float, float] | None = None  # (read time, pts) of the session's first packet
        self._recent: deque[tuple[float, float]] = deque()  # (read time, pts) over `PACE_WINDOW_S`
        self._watching = backlogs  # still in the session's first `window_s`, where a backlog shows
        self._backlog_since = 0.0  # when the backlog was seen

    def skip(self, pts: float | None, now: float, keyframe: bool) -> bool:
        """True if the packet with presentation time `pts` (seconds; None: unknown), read at `now`
        (`time.monotonic()`), is to be skipped rather than decoded."""
        if pts is None:  # no clock to go by: decoded, unless it is part of a skipped stretch
            return self.skipping or self.backlog
        if self._watching and self._in_backlog(pts, now, keyframe):
            return True
        offset = now - pts
        while self._least and self._least[-1][1] >= offset:
            self._least.pop()
        self._least.append((now, offset))
        while self._least[0][0] < now - self.window_s:
            self._least.popleft()
        lag = offset - self._least[0][1]
        if self.skipping:
            self.skipping = not (keyframe and lag < self.behind_s / 2)
        else:
            self.skipping = lag > self.behind_s
        return self.skipping

    def _in_backlog(self, pts: float, now: float, keyframe: bool) -> bool:
        """Whether this packet is part of a backlog sent at the session's start (see the docs)."""
        if self._first is None:
            self._first = (now, pts)
        recent = self._recent
        recent.append((now, pts))
        while recent[0][0] < now - PACE_WINDOW_S:
            recent.popleft()
        if not self.backlog:
            if (pts - self._first[1]) - (now - self._first[0]) > self.behind_s:
                self.backlog, self._backlog_since = True, now
            else:
                self._watching = now - self._first[0] < self.window_s
                return False
        span = now - recent[0][0]
        paced = keyframe and span >= PACE_WINDOW_S / 2 and pts - recent[0][1] <= LIVE_PACE * span
        if paced or now - self._backlog_since > BACKLOG_MAX_S:
            self.backlog = self._watching = False
            return False
        return True


class ClockCatchUp:
    """`CatchUp` for a live file, whose clock is known: media time 0 is `start` on
    `time.monotonic()` (None: not known yet). A packet read ahead of the clock (a decoder that
    reads ahead, packets skipped while shedding) counts as on time: otherwise it would set the
    catch-up's most punctual offset, and the packets read on time after it would look late.
    `anchor(start)` takes the clock up anew; the catch-up's window then starts afresh.

    Example:
        >>> catch_up = ClockCatchUp(behind_s=1.0)
        >>> catch_up.anchor(100.0)
        >>> [catch_up.skip(media, now, key) for media, now, key in
        ...  [(0.0, 100.0, True), (3.0, 100.5, False), (1.0, 101.0, False), (2.0, 103.5, False)]]
        [False, False, False, True]
    """

    def __init__(self, behind_s: float):
        self.behind_s = behind_s
        self.start: float | None = None
        self._catch_up = CatchUp(behind_s, backlogs=False)

    def anchor(self, start: float) -> None:
        if start != self.start:
            if self.start is not None:  # the window's offsets belong to the old clock
                self._catch_up = CatchUp(self.behind_s, backlogs=False)
            self.start = start

    def skip(self, media: float, now: float, keyframe: bool) -> bool:
        """As `CatchUp.skip`, for the packet at `media` read at `now`."""
        if self.start is not None:
            media = min(media, now - self.start)
        return self._catch_up.skip(media, now, keyframe)


#: the longest group of pictures (seconds from one keyframe to the next) whose end is skipped
#: undecoded when frames are shed; a longer one would show long gaps, and its frames are dropped
#: after decoding instead, evenly
PREFIX_MAX_GOP_S = 4.0
#: the least share of groups decoded when shedding by whole groups: past it a stream would sit out
#: more than two groups in a row (nine in ten: nine seconds dark), and each group's end goes instead
WHOLE_MIN_SHARE = 1 / 3


class DecodeShare:
    """What a source decodes when the budget controller sheds its frames (graph/overload/control.py):
    `share` of them (1.0: every frame; 0.0: its keyframes only, the controller's last rung).

    A frame shed undecoded saves its decoding too, and the only frames a decoder can leave out
    without breaking the pictures after them are the end of a group of pictures (a prefix in
    decoding order is always decodable). So, once the length of the stream's groups is known (two
    keyframes seen, less than `PREFIX_MAX_GOP_S` apart), each group's first `share` of packets is
    decoded and the rest skipped: `skips(keyframe, seconds)`, asked once per packet in order before
    it is decoded. A share that is not a whole number of packets is kept on average (0.35 of 10:
    4, 3, 4, 3 ...), so that two streams a few points apart in share are a few points apart in
    frames kept, not a whole packet a group. Until then, or for longer groups, every frame is
    decoded and `drops()`, asked after each frame decoded, drops an even `1 - share` of them.
    Keyframes only is skipping after every keyframe, whatever the group. `skipped` counts every
    frame given up either way. Skipping ends at a keyframe: never in the middle of a group whose
    start was skipped. By whole groups (`by_groups`, the controller's answer to streams whose
    keyframes come at once), `share` of the groups is decoded whole and the others skipped whole,
    keyframe and all, down to `WHOLE_MIN_SHARE`; `phase` staggers which groups each stream skips.

    A decoder may still hold pictures when the packets after them are skipped (B-frame
    reordering). `drain_due` is True for the first packet skipped after packets were decoded: what
    the decoder holds is drained then (`drain`). (A keyframe may come in several packets: a
    camera's, one per slice or RTP burst; so it is not drained before the first packet skipped.)

    Example:
        >>> thin = DecodeShare()
        >>> thin.share = 0.0                                  # keyframes only
        >>> [(thin.skips(key), thin.drain_due) for key in (True, True, False, False)], thin.skipped
        ([(False, False), (False, False), (True, True), (True, False)], 2)
        >>> thin.share = 0.5                                  # groups of 4 packets: the first 2 of each
        >>> [thin.skips(key) for key in [True, False, False, False] * 2]
        [False, False, True, True, False, False, True, True]
        >>> even = DecodeShare()                              # 3.5 packets of a group of 10: 4, 3, 4, 3 ...
        >>> even.share = 0.35                                 # (the first group is whole: its length is learned)
        >>> [sum(not even.skips(key) for key in [True] + [False] * 9) for _ in range(6)]
        [10, 4, 3, 4, 3, 4]
        >>> thin.share = 1.0                                  # every frame again from the next keyframe
        >>> [thin.skips(key) for key in (False, True, False)], thin.skipped
        ([True, False, False], 7)
        >>> groups = DecodeShare()                            # by whole groups (of 2 packets here)
        >>> groups.share = 0.5; groups.by_groups(True, phase=0.5)
        >>> [groups.skips(key) for key in [True, False] * 4]
        [False, False, False, False, True, True, False, False]
        >>> slow = DecodeShare()                              # groups of 300 packets at 30 fps: too long
        >>> slow.share = 0.5
        >>> [slow.skips(i % 300 == 0, i / 30) for i in range(601)].count(True)
        0
        >>> [slow.drops() for _ in range(4)]                  # dropped after decoding instead
        [False, True, False, True]
    """

    def __init__(self, phase: float = 0.0) -> None:
        self.share = 1.0
        self.skipped = 0
        #: skipping packets up to the next keyframe
        self.thinning = False
        self.drain_due = False
        self._decoded = False  # a packet was decoded since the last one skipped
        self._since: int | None = None  # packets since the last keyframe (which is 0)
        self._group: int | None = None  # packets in the last whole group, when short enough
        self._key_s: float | None = None  # when the last keyframe was shown
        self._latest: float | None = None  # the latest time shown of the packets decoded
        self._credit = phase % 1.0  # `drops()`'s
        #: packets the groups so far were short of their share (or over it, < 0): the next group's
        #: prefix takes it up, so that a share that is not a whole number of a group's packets (0.35 of
        #: 10) is kept on average (3, then 4, ...), not rounded the same way in every group
        self._carry = 0.0
        #: shed whole groups, keyframe and all (`share` of the groups decoded whole, the rest skipped,
        #: `by_groups`), instead of each group's end
        self.whole = False
        self._groups = phase % 1.0  # whole groups' credit: `phase` staggers which groups streams skip

    def skips(self, keyframe: bool, seconds: float | None = None) -> bool:
        """Whether to skip the next packet undecoded (`seconds`: when it is shown, its pts)."""
        if keyframe:
            first = self._since != 0
            self._learn_group(seconds)
            if first:
                self.thinning = self._skip_group()
            if self.thinning:
                self.skipped += 1
                self.drain_due, self._decoded = self._decoded, False
                return True
        elif self._since is not None:
            self._since += 1
        if not (keyframe or self.thinning) and self.share < 1.0:
            self.thinning = self.share <= 0.0 or (not self._whole_now and self._cut(seconds))
        if keyframe or not self.thinning:
            self.drain_due, self._decoded = False, True
            if seconds is not None and (self._latest is None or seconds > self._latest or keyframe):
                self._latest = seconds
            return False
        self.skipped += 1
        self.drain_due, self._decoded = self._decoded, False
        return True

    def by_groups(self, whole: bool, phase: float) -> None:
        """Shed whole groups (True) or each group's end from the next group on; a switch to whole
        groups starts at `phase` (0 to 1: which groups this stream skips among streams in step)."""
        if whole and not self.whole:
            self._groups = phase % 1.0
        self.whole = whole

    @property
    def _whole_now(self) -> bool:
        return self.whole and self._group is not None and self.share >= WHOLE_MIN_SHARE - 1e-9

    def _skip_group(self) -> bool:
        """At a group's first packet, in whole-group shedding: whether the whole group is skipped."""
        if not self._whole_now or self.share >= 1.0:
            return False
        self._groups += self.share
        if self._groups >= 1.0:
            self._groups -= 1.0
            return False
        return True

    def _cut(self, seconds: float | None) -> bool:
        """Whether this group's share is decoded by now: its length known and reached, and the packet
        shown after every one decoded (a B-frame shown before one decoded is decoded too, so that
        every frame shown before the last one decoded is decoded, and the frames keep their numbers)."""
        if self._group is None:
            return False
        wanted = self.share * self._group + self._carry
        if self._since < max(1, math.floor(wanted + 0.5)):
            return False
        if seconds is not None and self._latest is not None and seconds <= self._latest:
            return False
        self._carry = min(1.0, max(-1.0, wanted - self._since))  # what this group decoded over its share, or under
        return True

    def _learn_group(self, seconds: float | None) -> None:
        if self._since == 0:  # the same keyframe's next packet
            return
        if self._since is not None:
            short = seconds is None or self._key_s is None or seconds - self._key_s <= PREFIX_MAX_GOP_S
            self._group = self._since + 1 if short else None
            if not self.thinning:  # the whole group was decoded: nothing to carry
                self._carry = 0.0
        self._since, self._key_s = 0, seconds

    def drops(self) -> bool:
        """After a frame was decoded: whether to drop it, where the share is not taken from the
        groups (their length not known yet, or too long): an even `1 - share` of the frames."""
        if self.share >= 1.0 or self.share <= 0.0 or self._group is not None:
            return False
        self._credit += 1.0 - self.share
        if self._credit >= 1.0:
            self._credit -= 1.0
            self.skipped += 1
            return True
        return False


def drain(codec_context) -> list:
    """The pictures the decoder still holds, which it gives up now; it is then flushed, ready to
    start again at a keyframe."""
    frames = list(codec_context.decode(None))
    codec_context.flush_buffers()
    return frames
