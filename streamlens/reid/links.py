"""Identities across the cameras of one `reid.across` group: `Linker`, pure bookkeeping on one
thread (the engine's), fed by the reid stage (streamlens/reid/stage.py).

- A track gets a `global_id` of its own the first time it is seen (`seen`), numbered from 1 in
  the group.
- Each time its appearance is made anew (`embedded`: the mean of its looks, streamlens/reid/model.py),
  a track not yet linked, with at least `MIN_SAMPLES` looks, looks for the track it continues: among
  the other cameras' tracks first seen before it, with an appearance, not already continued by a
  track of its camera, last seen at most `window_s` before it first was, and, once the pair of
  cameras has learned its transit times (streamlens/reid/transit.py), with a gap in the learned band.
  The most similar one is taken when its similarity is at least `threshold` and beats the next
  candidate's by `margin`, and, while the pair has no band yet (no timing to narrow the candidates),
  when the link is confident (below): the track takes its `global_id` (and so does every track that had taken
  the track's own). A link is made once and kept.
- Similarity is the cosine of appearances centred on the group's mean appearance (a running mean
  over the last `MEAN_WINDOW` appearances made): what every object of these cameras shares (the road
  or floor around it, the light, the camera's colours) is taken out, so that what is left tells one
  object from another. Raw cosines of the weight-free descriptor crowd near 1 (0.95 to 0.99 for
  different cars of one road); centred, a random pair scores about 0. No link is made before
  `MIN_TRACKS` tracks have an appearance (the mean would not be one yet).
- A confident link (`CONFIDENT` over `threshold`, twice the margin) teaches the pair's transit.
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

from dataclasses import dataclass, field

import numpy as np

from .transit import Transits

#: looks a track needs before it links (one look is one view; two agree more often)
MIN_SAMPLES = 2
#: how far over `threshold` a link must be to teach the transit times (and twice the margin)
CONFIDENT = 0.05
#: tracks kept per camera, at most
MAX_TRACKS = 2000
#: the running mean appearance weighs about this many of the latest appearances
MEAN_WINDOW = 500
#: tracks with an appearance the group needs before it links
MIN_TRACKS = 8


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
    continued_in: set = field(default_factory=set)  # cameras whose track took this one's global_id


class Linker:
    """One group of cameras (see the module's docstring). Times are seconds on one clock for the
    whole group (the stage chooses it: `reid.clock`)."""

    def __init__(self, streams: list[str], *, window_s: float, threshold: float, margin: float):
        self.streams = list(streams)
        self.window_s, self.threshold, self.margin = window_s, threshold, margin
        self.transits = Transits()
        self._tracks: dict[str, dict[int, _Track]] = {s: {} for s in self.streams}
        self._next_id = 1
        self.links = 0
        self.confident = 0
        self._mean: np.ndarray | None = None  # the group's running mean appearance
        self._made = 0  # appearances made
        self._described = 0  # tracks with an appearance

    def seen(self, stream: str, track: int, t: float) -> int:
        """`track` of `stream` is on a frame at time `t`: its global_id."""
        tracks = self._tracks[stream]
        known = tracks.get(track)
        if known is None:
            known = tracks[track] = _Track(stream, track, self._next_id, t, t)
            self._next_id += 1
            if len(tracks) > MAX_TRACKS:
                del tracks[next(iter(tracks))]  # the oldest
        else:
            known.last = max(known.last, t)
        return known.global_id

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
        if known.linked or samples < MIN_SAMPLES:
            return False
        return self._link(known)

    def _centred(self, vector: np.ndarray) -> np.ndarray:
        centred = vector - self._mean
        return centred / max(float(np.linalg.norm(centred)), 1e-6)

    def _candidates(self, mine: _Track) -> list[tuple[float, _Track, float, bool]]:
        """(similarity, track, gap, whether the pair's transit band applied) per candidate."""
        out = []
        me = self._centred(mine.vector)
        for other_stream, tracks in self._tracks.items():
            if other_stream == mine.stream:
                continue
            band = self.transits.window(other_stream, mine.stream)
            for other in tracks.values():
                if other.vector is None or other.first >= mine.first or mine.stream in other.continued_in:
                    continue
                gap = mine.first - other.last
                if gap > self.window_s or (band is not None and not band[0] <= gap <= band[1]):
                    continue
                if other.vector.shape == me.shape:
                    out.append((float(self._centred(other.vector) @ me), other, gap, band is not None))
        return out

    def _link(self, mine: _Track) -> bool:
        found = self._candidates(mine)
        if not found:
            return False
        found.sort(key=lambda c: -c[0])
        best, other, gap, timed = found[0]
        runner_up = found[1][0] if len(found) > 1 else -1.0
        confident = best >= self.threshold + CONFIDENT and best - runner_up >= 2 * self.margin
        if best < self.threshold or best - runner_up < self.margin or not (timed or confident):
            return False
        mine.linked = True
        other.continued_in.add(mine.stream)
        self.links += 1
        if confident:
            self.confident += 1
            self.transits.learn(other.stream, mine.stream, gap)
        old, new = mine.global_id, other.global_id
        for tracks in self._tracks.values():  # those that had taken this track's global_id follow it
            for known in tracks.values():
                if known.global_id == old:
                    known.global_id = new
        return True

    def sweep(self, t: float) -> None:
        """Forget the tracks last seen more than `window_s` before `t`."""
        for tracks in self._tracks.values():
            gone = [k for k, known in tracks.items() if t - known.last > self.window_s]
            for k in gone:
                del tracks[k]

    def figures(self) -> dict:
        """Links made, confident links, tracks kept, and the transits learned."""
        return {"links": self.links, "confident": self.confident,
                "tracks": sum(len(t) for t in self._tracks.values()), "transits": self.transits.figures()}


__all__ = ["Linker", "MIN_SAMPLES", "CONFIDENT", "MAX_TRACKS"]
