"""Identities across the cameras of one `reid.across` group: `Linker`, pure bookkeeping on one
thread (the engine's), fed by the reid stage (streamlens/reid/stage.py). docs/reid.md tells it for users.

- A track gets a `global_id` of its own the first time it is seen (`seen`, with its box and its
  frame's size), numbered from 1 in the group. `tick` tells each camera's clock, frame by frame.
- Links by appearance: each time its appearance is made anew (`embedded`: the mean of its looks,
  streamlens/reid/model.py), a track not yet linked, with at least `MIN_SAMPLES` looks, looks for the
  track it continues among the other cameras' tracks first seen before it, with an appearance, whose
  global_id it may take (`_free`), last seen at most `window_s` before it first was. It may link to
  those that fit what the pair of cameras learned: once the pair has transit times
  (streamlens/reid/transit.py), a gap in the learned band; once it knows where its cameras meet
  (streamlens/reid/places.py), at most `PLACE_GATE` tolerances from that place. The most similar of
  those is taken when its similarity is at least `threshold` and beats the next that fits by
  `margin`, and, while the pair has no band yet, when it is confident (`CONFIDENT` over `threshold`,
  twice the margin): the two tracks (and every track that had taken either's global_id) share one
  global_id from then on (which one: below). A link is made once and kept.
- What a pair learns comes from the most similar candidate of all, fitting or not, when it is
  confident against every other candidate (once per track): were the band and places taught only
  by the links they let in, a few wrong links early in a run would only ever be confirmed (a looped
  camera had every vehicle linked to an earlier look-alike for minutes); a sure link outside what
  was learned is not made, but teaches, and a few of them move the band to where they fall.
- Similarity is the cosine of appearances centred on the group's mean appearance (a running mean
  over the last `MEAN_WINDOW` appearances made): what every object of these cameras shares (the road
  or floor around it, the light, the camera's colours) is taken out, so that what is left tells one
  object from another. Raw cosines of the weight-free descriptor crowd near 1 (0.95 to 0.99 for
  different cars of one road); centred, a random pair scores about 0. No link by appearance is made
  before `MIN_TRACKS` tracks have an appearance (the mean would not be one yet).
- Links without appearance (`continuing`, `by_place`; fragments at the edge of a view are seldom
  looked at): a new track continues a track of its own camera lost at most `CONTINUE_S` before that,
  carried on at its speed, would be within half its box (`_continue`, which carries that speed on
  until the new track has its own); once every other camera's clock
  has come within `PLACE_LAG_S` of a new track's first sighting, it is linked to the one track of
  another camera that was where the learned places put it (`_place`), or, with no place learned,
  when it and one object of another camera are all there is (`_alone`, which teaches as a confident
  link does). Where two candidates fit within `PLACE_MARGIN` of each other, none is taken. An object
  is where its latest piece is: a fragment that a later track of its camera already continued is no
  candidate for either (`_superseded`; far off, one vehicle is several short tracks, and a new
  vehicle coming into view where an early piece was lost is not that vehicle).
- A link joins two global_ids into one; published frames keep theirs, so of the two the one kept is
  the one that makes more pairs of tracks of two cameras show one global_id (`_join`): where the
  streams reach the stage out of step, a camera's new track is often gone before the link is made,
  and then the other camera's track, still in view, takes its global_id.
- Tracks are forgotten `window_s` after they were last seen, and each camera keeps at most
  `MAX_TRACKS` (the oldest go first): memory is bounded whatever the run's length.

Example:
    >>> linker = Linker(["top", "bottom"], window_s=60, threshold=0.5, margin=0.1)
    >>> rng = np.random.default_rng(0)
    >>> for k in range(8):  # other cars: the group's mean appearance
    ...     _ = linker.seen("top", 100 + k, 0.0); _ = linker.embedded("top", 100 + k, rng.normal(size=8), 2, 0.0)
    >>> linker.seen("top", 1, 1.0), linker.seen("bottom", 5, 2.0)
    (9, 10)
    >>> car = rng.normal(size=8)
    >>> linker.embedded("top", 1, car, 2, 1.5), linker.embedded("bottom", 5, car + 0.1, 2, 2.5)
    (False, True)
    >>> linker.global_id("bottom", 5)
    9
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .places import Places, centre
from .transit import Transits

#: looks a track needs before it links (one look is one view; two agree more often)
MIN_SAMPLES = 2
#: how far over `threshold` a link must be to teach the transit times (and twice the margin)
CONFIDENT = 0.05
#: seconds between two walks over the kept tracks to forget the old (a track goes at most this late)
FORGET_EVERY_S = 1.0
#: tracks kept per camera, at most
MAX_TRACKS = 2000
#: the running mean appearance weighs about this many of the latest appearances
MEAN_WINDOW = 500
#: tracks with an appearance the group needs before it links
MIN_TRACKS = 8
#: how long a lost track may be continued by a new track of its own camera
CONTINUE_S = 1.0
#: a link by place (or a continuation) is made only when the next candidate fits at least this
#: many times worse (its distance in tolerances)
PLACE_MARGIN = 2.0
#: once a pair of cameras has learned where they meet, a link by appearance is made only to a track
#: that was at most this many tolerances from where the new track came in
PLACE_GATE = 2.0
#: how far behind a new track's first sighting every other camera's clock may still be when its link
#: by place is tried (their tracks are carried on at their speed for that long); a camera further
#: behind is waited for. Chosen by leave-one-case-out over 0 to 1 s (tools/results/reid.md): tried
#: while the other camera's track is still in view, the link shows on its later frames (`_join`)
PLACE_LAG_S = 0.5
#: a track's trail: points kept, and the least time between two
TRAIL, TRAIL_STEP_S = 64, 0.1


@dataclass(slots=True)
class _Track:
    stream: str
    track: int
    global_id: int
    first: float
    last: float
    vector: np.ndarray | None = None
    samples: int = 0
    linked: bool = False
    taught: bool = False  # its sure link taught the pair (once: its appearance is made anew many times)
    size: tuple = (0.0, 0.0)  # the camera's frame, pixels (0: boxes not told)
    box: tuple | None = None  # the last box, as fractions of the frame (x1, y1, x2, y2)
    trail: deque = field(default_factory=lambda: deque(maxlen=TRAIL))  # (t, cx, cy), at most every TRAIL_STEP_S
    carried: tuple = (0.0, 0.0)  # the speed of the track it continues (`Linker._continue`), until it has its own

    def at(self, t: float) -> tuple[float, float] | None:
        """Where (a centre, as fractions) it was at time `t`: between two points of its trail, on
        the line between them; before its first or after its last, that point."""
        if not self.trail:
            return None
        after = next((k for k, p in enumerate(self.trail) if p[0] >= t), None)
        if after is None or after == 0:
            p = self.trail[-1 if after is None else 0]
            return p[1], p[2]
        (t0, x0, y0), (t1, x1, y1) = self.trail[after - 1], self.trail[after]
        share = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        return x0 + share * (x1 - x0), y0 + share * (y1 - y0)

    def where(self, t: float) -> tuple[float, float] | None:
        """Where it was at time `t` (`at`), or, after it was last seen, would be at its last speed."""
        if not self.trail or t <= self.trail[-1][0]:
            return self.at(t)
        (vx, vy), last = self.velocity(), self.trail[-1]
        return last[1] + vx * (t - last[0]), last[2] + vy * (t - last[0])

    def velocity(self) -> tuple[float, float]:
        """Fractions of the frame a second, over its trail's last second; until it has two points,
        the speed of the track it continues (0 for none)."""
        if len(self.trail) < 2:
            return self.carried
        last = self.trail[-1]
        first = next((p for p in self.trail if last[0] - p[0] <= 1.0), self.trail[0])
        span = last[0] - first[0]
        if span <= 0:
            return 0.0, 0.0
        return (last[1] - first[1]) / span, (last[2] - first[2]) / span


def _one_per_object(fits: list[tuple[float, _Track]]) -> list[tuple[float, _Track]]:
    """`fits` (distance, track) best first, keeping the best of the tracks that share a global_id
    (one object's pieces are one candidate)."""
    best: dict[int, tuple[float, _Track]] = {}
    for fit in sorted(fits, key=lambda f: f[0]):
        best.setdefault(fit[1].global_id, fit)
    return list(best.values())


class Linker:
    """One group of cameras (see the module's docstring). Times are seconds on one clock for the
    whole group (the stage chooses it: `reid.clock`)."""

    def __init__(self, streams: list[str], *, window_s: float, threshold: float, margin: float,
                 by_place: bool = True, continuing: bool = True, place_lag_s: float = PLACE_LAG_S):
        self.streams = list(streams)
        self.window_s, self.threshold, self.margin = window_s, threshold, margin
        self.place_lag_s = place_lag_s
        self.by_place, self.continuing = by_place, continuing
        self.transits = Transits()
        self._next_forget = -math.inf  # when the next walk over the kept tracks forgets the old
        self.places = Places()
        self._tracks: dict[str, dict[int, _Track]] = {s: {} for s in self.streams}
        self._next_id = 1
        self.links = 0
        self.confident = 0
        self.placed = 0
        self.alone = 0
        self.continued = 0
        self._mean: np.ndarray | None = None  # the group's running mean appearance
        self._made = 0  # appearances made
        self._described = 0  # tracks with an appearance
        self._now: dict[str, float] = {}  # the latest time seen per camera
        self._pending: dict[tuple[str, int], _Track] = {}  # new tracks whose link by place is to be tried

    def seen(self, stream: str, track: int, t: float, box=None, size: tuple | None = None) -> int:
        """`track` of `stream` is on a frame at time `t` (`box`: x1, y1, x2, y2 in pixels of a frame
        of `size`, width and height): its global_id."""
        tracks = self._tracks[stream]
        known = tracks.get(track)
        new = known is None
        if new:
            known = tracks[track] = _Track(stream, track, self._next_id, t, t)
            self._next_id += 1
            if len(tracks) > MAX_TRACKS:
                del tracks[next(iter(tracks))]  # the oldest
        else:
            known.last = max(known.last, t)
        if box is not None and size is not None and size[0] > 0 and size[1] > 0:
            w, h = float(size[0]), float(size[1])
            known.size = (w, h)
            known.box = (box[0] / w, box[1] / h, box[2] / w, box[3] / h)
            if not known.trail or t - known.trail[-1][0] >= TRAIL_STEP_S:
                known.trail.append((t,) + centre(box, w, h))
            if new and self.continuing:
                self._continue(known)
            if new and self.by_place:
                self._pending[(stream, track)] = known
        self._now[stream] = max(self._now.get(stream, t), t)
        return known.global_id

    def tick(self, stream: str, t: float) -> None:
        """`stream` has a frame at time `t` (with objects or none): its clock, which links by place
        wait for."""
        self._now[stream] = max(self._now.get(stream, t), t)

    def global_id(self, stream: str, track: int) -> int | None:
        known = self._tracks.get(stream, {}).get(track)
        return None if known is None else known.global_id

    def embedded(self, stream: str, track: int, vector: np.ndarray, samples: int, t: float) -> bool:
        """`track`'s appearance made anew from `samples` looks, at time `t`: whether its global_id
        changed (it was linked now)."""
        known = self._tracks[stream].get(track)
        if known is None:
            self.seen(stream, track, t)
            known = self._tracks[stream][track]
        vector = np.asarray(vector, np.float32)
        if known.vector is None:
            self._described += 1
        known.vector = vector
        known.samples = samples
        self._made += 1
        if self._mean is None or self._mean.shape != vector.shape:
            self._mean = vector.copy()
        else:
            self._mean += (vector - self._mean) / min(self._made, MEAN_WINDOW)
        if self._described < MIN_TRACKS:
            return False
        if known.linked or samples < MIN_SAMPLES or self._shared(known):
            return False
        return self._link(known)

    def _centred(self, vector: np.ndarray) -> np.ndarray:
        centred = vector - self._mean
        return centred / max(float(np.linalg.norm(centred)), 1e-6)

    def _shared(self, mine: _Track) -> bool:
        """Whether a track of another camera carries `mine`'s global_id (it is linked already)."""
        return any(other.global_id == mine.global_id for stream, tracks in self._tracks.items()
                   if stream != mine.stream for other in tracks.values())

    def _pieces(self) -> dict[str, dict[int, list[_Track]]]:
        """Each camera's tracks by global_id, made by one walk over the kept tracks: `_free` and
        `_superseded` look a candidate's pieces up there instead of walking every track again."""
        out: dict[str, dict[int, list[_Track]]] = {}
        for stream, tracks in self._tracks.items():
            by_id = out[stream] = {}
            for known in tracks.values():
                by_id.setdefault(known.global_id, []).append(known)
        return out

    @staticmethod
    def _free(other: _Track, mine: _Track, pieces: dict) -> bool:
        """Whether `mine` may take `other`'s global_id: the latest other track of `mine`'s camera
        that carries it (if any; `pieces`: `_pieces()`) was lost before `mine` came, and at most
        `CONTINUE_S` before (the tracker broke one object's track in two there). One object is one
        track of a camera at a time, and an object that left a camera long ago is not taken up again there."""
        latest = max((t.last for t in pieces[mine.stream].get(other.global_id, ()) if t is not mine), default=None)
        return latest is None or 0.0 < mine.first - latest <= CONTINUE_S

    def _band(self, source: str, target: str) -> tuple[float, float] | None:
        return self.transits.window(source, target)

    def _candidates(self, mine: _Track) -> list[tuple[float, _Track, bool, bool]]:
        """(similarity, track, whether the pair has a transit band, whether the track fits what the
        pair learned: its gap inside the band, and where its cameras meet) per candidate within `window_s`."""
        out, pieces = [], self._pieces()
        me = self._centred(mine.vector)
        here = mine.trail[0][1:] if mine.trail else None
        for other_stream, tracks in self._tracks.items():
            if other_stream == mine.stream:
                continue
            band = self._band(other_stream, mine.stream)
            for other in tracks.values():
                if other.vector is None or other.first >= mine.first or not self._free(other, mine, pieces):
                    continue
                gap = mine.first - other.last
                if gap > self.window_s or other.vector.shape != me.shape:
                    continue
                fits = band is None or band[0] <= gap <= band[1]
                if fits and self.by_place and here is not None and other.trail:
                    fit = self.places.fits(other.stream, other.where(mine.first), mine.stream, here)
                    fits = fit is None or fit <= PLACE_GATE  # else not where the pair's cameras meet
                out.append((float(self._centred(other.vector) @ me), other, band is not None, fits))
        return out

    def _link(self, mine: _Track) -> bool:
        """Teach the pair what a link sure against every candidate says (`CONFIDENT` over the
        threshold, twice the margin over the next candidate, fitting what the pair learned or not:
        learning only from the links its band and places let in, a few wrong ones learned first
        would only ever be confirmed); then link the most similar candidate that fits what the pair
        learned, when it is over the threshold and the margin over the next that fits, and the pair
        has a transit band or the link is confident among those."""
        found = sorted(self._candidates(mine), key=lambda c: -c[0])
        if not found:
            return False
        best, runner_up = self._lead(found)
        if not mine.taught and self._confident(best, runner_up):
            mine.taught = True
            self.confident += 1
            self._teach(found[0][1], mine)
        fitting = [c for c in found if c[3]]
        if not fitting:
            return False
        best, runner_up = self._lead(fitting)
        other, timed = fitting[0][1], fitting[0][2]
        if best < self.threshold or best - runner_up < self.margin or not (timed or self._confident(best, runner_up)):
            return False
        self._join(mine, other)
        return True

    @staticmethod
    def _lead(ranked: list) -> tuple[float, float]:
        """The best similarity of `ranked` (best first) and the next one's (-1 for none)."""
        return ranked[0][0], ranked[1][0] if len(ranked) > 1 else -1.0

    def _confident(self, best: float, runner_up: float) -> bool:
        """`CONFIDENT` over the threshold and twice the margin over the next candidate."""
        return best >= self.threshold + CONFIDENT and best - runner_up >= 2 * self.margin

    def _teach(self, other: _Track, mine: _Track) -> None:
        """`mine` continues `other`: the pair's transit (the gap between them) and where its cameras
        meet (where each was when `mine` came in)."""
        self.transits.learn(other.stream, mine.stream, mine.first - other.last)
        there, here = other.where(mine.first), mine.at(mine.first)
        if there is not None and here is not None:
            self.places.learn(other.stream, there, mine.stream, here)

    def _join(self, mine: _Track, other: _Track) -> None:
        """`mine` continues `other` (of another camera): the two are one object, and every track
        that carries either global_id carries one of them from now on. Frames already published keep
        theirs, so the one kept is the one that makes more pairs of tracks of two cameras show one
        global_id (`_shown`): a link made after `mine`'s last frame (its camera ran ahead of
        `other`'s) shows on `other`'s later frames instead of on none. Ties keep `other`'s."""
        mine.linked = True
        self.links += 1
        old, new = mine.global_id, other.global_id
        if self._shown(old, new) > self._shown(new, old):
            old, new = new, old
        for tracks in self._tracks.values():  # those that had taken this track's global_id follow it
            for known in tracks.values():
                if known.global_id == old:
                    known.global_id = new

    @staticmethod
    def _superseded(other: _Track, t: float, pieces: dict) -> bool:
        """Whether a later track of `other`'s camera, first seen before time `t`, carries its global_id
        (the object was found again there: where it is at `t` is that later track's place, not
        `other`'s carried on; `pieces`: `_pieces()`)."""
        return any(other.last < known.first < t for known in pieces[other.stream].get(other.global_id, ()))

    def _shown(self, kept: int, dropped: int) -> int:
        """The pairs of tracks of two cameras that would show one global_id if `kept` were kept and
        `dropped` given up: each track gone that carries `kept` (its frames are published) with each
        track still in view that carries `dropped` (its later frames will show `kept`)."""
        gone, live = [], []
        for stream, tracks in self._tracks.items():
            now = self._now.get(stream, -math.inf)
            for known in tracks.values():
                if known.global_id == kept and known.last < now:
                    gone.append(stream)
                elif known.global_id == dropped and known.last >= now:
                    live.append(stream)
        return sum(1 for a in gone for b in live if a != b)

    def _settle(self) -> None:
        """Try the link by place of each new track once every other camera's clock is at most
        `place_lag_s` behind its first sighting (streams reach the stage at their own pace), and
        once more, with the lone hand-over, when every other camera's clock has reached it (whether
        an object was alone cannot be told from a camera that has not shown that moment yet)."""
        for key, mine in list(self._pending.items()):
            if self._tracks[mine.stream].get(mine.track) is not mine:
                del self._pending[key]  # forgotten
                continue
            behind = min((self._now.get(s, -np.inf) for s in self.streams if s != mine.stream), default=np.inf)
            if behind < mine.first - self.place_lag_s:
                continue
            whole = behind >= mine.first
            if whole:
                del self._pending[key]
            if not mine.linked and not self._shared(mine):
                self._place(mine, alone=whole)

    def _place(self, mine: _Track, alone: bool = True) -> None:
        """Link `mine` by where and when it came in: to the one track of another camera that was,
        at that moment (or would have been, at its last speed), where the learned places put it, last
        seen at most the pair's transit band (else `CONTINUE_S`) before."""
        here = mine.trail[0][1:] if mine.trail else None
        if here is None:
            return
        fits, pieces = [], self._pieces()
        for other_stream, tracks in self._tracks.items():
            if other_stream == mine.stream:
                continue
            band = self._band(other_stream, mine.stream)
            longest = band[1] if band is not None else CONTINUE_S
            for other in tracks.values():
                if other.first >= mine.first or not other.trail or not self._free(other, mine, pieces):
                    continue
                if mine.first - other.last > longest or self._superseded(other, mine.first, pieces):
                    continue
                fit = self.places.fits(other.stream, other.where(mine.first), mine.stream, here)
                if fit is not None and fit <= 1.0:
                    fits.append((fit, other))
        fits = _one_per_object(fits)
        if not fits:
            if alone:
                self._alone(mine)
            return
        if len(fits) > 1 and fits[1][0] < PLACE_MARGIN * fits[0][0] + 1e-9:
            return  # two objects fit alike: no telling which
        self.placed += 1
        self._join(mine, fits[0][1])

    def _alone(self, mine: _Track) -> None:
        """Link `mine` when it and one object of another camera are all there is: no other object
        in `mine`'s camera around it (within `CONTINUE_S`), and one in all the others, seen by then
        and at most `CONTINUE_S` before. Such a hand-over teaches the pair's transit and places as
        a confident link does (a quiet scene learns where its cameras meet from its lone objects)."""
        around = mine.first - CONTINUE_S
        if any(o is not mine and o.global_id != mine.global_id and o.last >= around
               for o in self._tracks[mine.stream].values()):
            return
        found = _one_per_object([(0.0, o) for stream, tracks in self._tracks.items() if stream != mine.stream
                                 for o in tracks.values() if o.first < mine.first and o.last >= around])
        if len(found) != 1 or not self._free(found[0][1], mine, self._pieces()):
            return
        other = found[0][1]
        self._teach(other, mine)
        self.alone += 1
        self._join(mine, other)

    def _continue(self, mine: _Track) -> None:
        """`mine` is new: when one track of its camera was lost at most `CONTINUE_S` before, and
        carried on at its last speed would be within half its box of `mine`'s, `mine` takes its
        global_id (the tracker lost the object and found it again under a new id)."""
        if mine.box is None or not mine.trail:
            return
        here = mine.trail[0][1:]
        fits, pieces = [], None  # made at the first candidate in time (most new tracks have none)
        for other in self._tracks[mine.stream].values():
            if other is mine or other.box is None or not other.trail or other.last >= mine.first:
                continue
            gap = mine.first - other.last
            if gap > CONTINUE_S:
                continue
            pieces = pieces or self._pieces()
            if not self._free(other, mine, pieces) or self._superseded(other, mine.first, pieces):
                continue
            px, py = other.where(mine.first)
            half_w = 0.5 * max(other.box[2] - other.box[0], mine.box[2] - mine.box[0])
            half_h = 0.5 * max(other.box[3] - other.box[1], mine.box[3] - mine.box[1])
            fit = max(abs(here[0] - px) / max(half_w, 1e-6), abs(here[1] - py) / max(half_h, 1e-6))
            if fit <= 1.0:
                fits.append((fit, other))
        fits = _one_per_object(fits)
        if not fits or (len(fits) > 1 and fits[1][0] < PLACE_MARGIN * fits[0][0] + 1e-9):
            return
        self.continued += 1
        mine.global_id = fits[0][1].global_id
        mine.carried = fits[0][1].velocity()

    def sweep(self, t: float) -> None:
        """Forget the tracks last seen more than `window_s` before `t`; try the links by place
        that are due."""
        if self._pending:
            self._settle()
        if t < self._next_forget:  # forgetting walks every kept track: once a second, not every frame
            return
        self._next_forget = t + FORGET_EVERY_S
        for tracks in self._tracks.values():
            gone = [k for k, known in tracks.items() if t - known.last > self.window_s]
            for k in gone:
                del tracks[k]

    def figures(self) -> dict:
        """Links made, confident candidates (each taught the transits and places, linked or not),
        tracks kept, and the transits learned."""
        return {"links": self.links, "confident": self.confident, "by_place": self.placed,
                "continued": self.continued, "tracks": sum(len(t) for t in self._tracks.values()),
                "transits": self.transits.figures(), "places": self.places.figures()}


__all__ = ["Linker", "MIN_SAMPLES", "CONFIDENT", "MAX_TRACKS"]
