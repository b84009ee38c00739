"""Shedding frames: the shares the budget controller sheds (graph/overload/control.py), evened out between
the live streams (`fair_shares`), and each stream's `Shedder`, which gives them up where its frames
are decoded.
"""

from __future__ import annotations

from fractions import Fraction
from statistics import median

from ...sources.decode import DecodeShare

#: shares of every live stream's frames dropped, in the order the controller tries them
SHED_STEPS = (0.0, 1 / 8, 1 / 4, 1 / 3, 1 / 2, 2 / 3, 3 / 4, 5 / 6, 7 / 8, 9 / 10)


#: what a stream kept beyond the others over the last windows it gives up over this many (graph/
#: control.py `FAIR_WINDOWS`): the next tick and one more, since a decode worker gives up its share
#: at the end of each group of pictures, so what one tick asks for may show only at the next
PAYBACK_WINDOWS = 2


def fair_shares(shed: float, history: dict[str, list[tuple[int, int, int]]], most: float = SHED_STEPS[-1],
                payback: float = PAYBACK_WINDOWS) -> dict[str, float]:
    """Each stream's share to shed for the next windows, so that the live streams keep the same
    share of their frames: `shed`, the rung's share, plus what the stream kept beyond the median
    share over its `history`, given up over the next `payback` windows; less than `shed` for a
    stream that kept less (frames lost otherwise: too old for the engine, late from their source,
    a decoder's own losses), by no more in all than the others give up: the streams together shed
    at least the rung's share, so evening them out never adds to the load (a first version spared
    the streams below the median whatever the others gave up: at indoor K=48 on a rung shedding
    3 in 4 half the streams were spared much, the others could give up little more before 9 in
    10, and the controller climbed further: p95 33.7 and 38.7 ms in 2 trials of 5). None below 0
    or past `most`.
    `history`: each stream's last windows, as frames published, lost otherwise and shed.

    So with `shed` 0 too, the streams that kept more than the median are shed down to it: frames too
    old for the engine fall on the streams at least as unevenly as chance (measured at indoor K=48:
    7% lost, and 48 streams of 10 fps ended 10 to 12 points apart over 12 s). Counts, not rates:
    what chance gave a stream is given up soon after, and counts in its history from then on (a
    share from each stream's rate of other losses, smoothed over ten seconds, was tried first: it
    gave up a second's luck over the ten that follow, and since those losses are mostly chance,
    a stream's past rate foretold little of its next). The median, not the mean: a stream that loses
    half its frames by itself (a failing decoder) costs the others nothing. A stream that keeps
    losing more than the others is shed less for it, though not wholly made up for: the history
    forgets what it was made up for ten windows ago.

    Example: three streams of 10 frames a second for 10 s; b lost 10 of its frames, c 40:
        >>> history = {"a": [(10, 0, 0)] * 10, "b": [(9, 1, 0)] * 10, "c": [(6, 4, 0)] * 10}
        >>> fair_shares(0.0, history)
        {'a': 0.5, 'b': 0.0, 'c': 0.0}
        >>> {name: round(share, 3) for name, share in fair_shares(0.5, history).items()}
        {'a': 0.9, 'b': 0.5, 'c': 0.1}
    """
    totals = {name: (sum(w[0] for w in windows), sum(map(sum, windows)), len(windows))
              for name, windows in history.items()}
    kept = {name: published / came for name, (published, came, _) in totals.items() if came}
    if len(set(kept.values())) <= 1:  # nothing to even out
        return dict.fromkeys(history, min(most, max(0.0, shed)))
    middle = median(kept.values())
    rates, more = {}, {}  # each stream's frames a window, and its share to shed beyond the rung's
    for name, (published, came, windows) in totals.items():
        if not came:
            continue
        beyond = published - middle * came  # frames kept beyond the median share
        rates[name] = came / windows
        more[name] = 0.0 if abs(beyond) < 0.5 else beyond / (payback * rates[name])  # under a frame: even
    # what the streams that kept more give up, each up to `most`, and what those that kept less are
    # spared, no more than that in all: the load stays what the rung's share leaves
    taken = {name: min(most - shed, share) for name, share in more.items() if share > 0}
    spared = {name: min(shed, -share) for name, share in more.items() if share < 0}
    owed = sum(spared[name] * rates[name] for name in spared)
    scale = min(1.0, sum(taken[name] * rates[name] for name in taken) / owed) if owed else 0.0
    return {name: min(most, max(0.0, shed + taken.get(name, 0.0) - scale * spared.get(name, 0.0)))
            for name in history}


def shed_name(fraction: float) -> str:
    """A share of frames as the controller names it: `shed_name(2 / 3)` is "2 in 3"."""
    share = Fraction(fraction).limit_denominator(16)
    return f"{share.numerator} in {share.denominator}"


class Shedder:
    """Drops an even `fraction` of one stream's frames: `drop()` once per frame, in order. `phase`
    (0 to 1) shifts where the drops fall, so streams with the same fraction drop different ticks.

    A source decoded by a worker (cameras, `decode: process` files; `attach`) is given the share to
    keep instead (`decode_share`, told to its worker by worker.py `ThinLink`), and gives up the
    rest there, mostly undecoded: the end of each group of pictures is skipped (decode.py
    `DecodeShare`), so shedding relieves its decoder too, and on the ladder's last rung
    (`keyframes_only`) every packet but the keyframes is; what it gave up is counted here
    (`skipped_by_worker`). A live file decoded on the graph's thread does the same on that thread
    (`skips`, asked before each packet; `drop` while its groups are not known yet): decoding was
    58% of the CPU of 14 highway streams on two engines, and a share dropped after decoding left
    it all, so the controller climbed to its last rung for relief (issue 47). A source that cannot thin has
    `fraction` of its frames dropped after decoding, and no more on the last rung. Every frame
    given up counts in `dropped`.

    Example:
        >>> s = Shedder(phase=0.5)
        >>> s.fraction = 0.25
        >>> [s.drop() for _ in range(8)]
        [False, True, False, False, False, True, False, False]
        >>> s.keyframes_only = True
        >>> s.decode_share, [s.skips(key) for key in (True, False, False, True, False)], s.dropped
        (0.0, [False, True, True, False, True], 5)
    """

    def __init__(self, phase: float = 0.0) -> None:
        #: where its drops fall among streams shedding alike (0 to 1)
        self.phase = phase % 1.0
        #: the share of the stream's frames to give up
        self.fraction = 0.0
        #: the ladder's last rung: decode the keyframes only, where the source can
        self.keyframes_only = False
        #: a source that thins its decoding gives up whole groups of pictures, not their ends (the
        #: controller's choice for a load that comes in bursts, control.py)
        self.whole_groups = False
        self._credit = phase % 1.0
        self._after = 0  # frames dropped after decoding (`drop`)
        self._by_worker = 0  # frames its source's decode worker gave up
        self._thin = DecodeShare(phase)  # what a source decoded on the graph's thread skips (`skips`)
        self._thins = False  # its source thins its own decoding (`attach`)
        self._here = False  # ... on the graph's thread (else in a decode worker)

    @property
    def decode_share(self) -> float:
        """The share of its frames a source decoded by a worker keeps."""
        return 0.0 if self.keyframes_only else 1.0 - self.fraction

    @property
    def dropped(self) -> int:
        """Frames given up so far: dropped after decoding, and skipped undecoded."""
        return self._after + self._thin.skipped + self._by_worker

    def attach(self, source) -> None:
        """Let `source` thin its own decoding for this shedder where it can (`Source.thins`: a live
        file, `FileSource.thin`; a camera, `LiveSource.thin`); `thins_here`
        says whether it does so on the graph's thread (a file's `decode: thread`)."""
        if source.thins:
            source.thin = self
            self._thins = True
            self._here = source.thins_here

    @property
    def sheds_undecoded(self) -> bool:
        """Whether its source's decode worker gives up its share of frames, mostly undecoded."""
        return self._thins and not self._here

    @property
    def drain_due(self) -> bool:
        """Whether what the decoder holds is to be drained now (decode.py `DecodeShare`)."""
        return self._thin.drain_due

    def skips(self, keyframe: bool, seconds: float | None = None) -> bool:
        """Whether the source skips its next packet undecoded (`keyframe`: the packet is one;
        `seconds`: its time). Called once per packet, in order, on the source's thread: the end
        of each group of pictures past the share kept, and every packet but the keyframes on the
        last rung."""
        self._thin.share = 0.0 if self.keyframes_only else 1.0 - self.fraction
        self._thin.by_groups(self.whole_groups, self.phase)
        return self._thin.skips(keyframe, seconds)

    def skipped_by_worker(self, count: int) -> None:
        """`count` more frames given up by the source's decode worker."""
        self._by_worker += count

    def drop(self) -> bool:
        if self._thins and not self._here:  # its worker gives up its share
            return False
        if self._here:  # skipped undecoded (`skips`), or dropped evenly while its groups are not known
            return not self.keyframes_only and self._thin.drops()
        if self.fraction <= 0.0:
            return False
        self._credit += self.fraction
        if self._credit >= 1.0:
            self._credit -= 1.0
            self._after += 1
            return True
        return False
