"""Shedding frames: the shares the budget controller sheds (graph/control.py), evened out between
the live streams (`fair_shares`), and each stream's `Shedder`, which gives them up where its frames
are decoded.
"""

from __future__ import annotations

from fractions import Fraction

from ..sources.decode import DecodeShare

#: shares of every live stream's frames dropped, in the order the controller tries them
SHED_STEPS = (0.0, 1 / 8, 1 / 4, 1 / 3, 1 / 2, 2 / 3, 3 / 4, 5 / 6, 7 / 8, 9 / 10)


def fair_shares(shed: float, lost: dict[str, float], most: float = SHED_STEPS[-1]) -> dict[str, float]:
    """Each stream's share to shed so that all keep about what they would with `shed` alike and
    the mean of their other losses: `lost` is each stream's share of frames lost otherwise (of
    those not shed). A stream that loses more than that leaves is shed nothing; none more than `most`.
    With `shed` 0 too, the streams that lost fewer than the mean are shed down to it: frames too
    old for the engine fall on the streams at least as unevenly as chance (measured at indoor K=48:
    7% lost, and 48 streams of 10 fps ended 10 to 12 points apart over 12 s).

    Example:
        >>> shares = fair_shares(0.5, {"a": 0.0, "b": 0.2, "c": 0.4})
        >>> {k: round(v, 3) for k, v in shares.items()}
        {'a': 0.6, 'b': 0.5, 'c': 0.333}
        >>> {k: round((1 - v) * (1 - lost), 2) for (k, v), lost in zip(shares.items(), (0.0, 0.2, 0.4))}
        {'a': 0.4, 'b': 0.4, 'c': 0.4}
        >>> {k: round(v, 3) for k, v in fair_shares(0.0, {"a": 0.0, "b": 0.1}).items()}
        {'a': 0.05, 'b': 0.0}
    """
    if len(set(lost.values())) <= 1:  # nothing to even out
        return dict.fromkeys(lost, max(0.0, shed))
    keep = (1.0 - shed) * (1.0 - sum(lost.values()) / len(lost))
    return {name: min(most, max(0.0, 1.0 - keep / (1.0 - share))) if share < 1.0 else 0.0
            for name, share in lost.items()}


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
    (`skipped_by_worker`). A live file decoded on the graph's thread is shed after decoding, and
    on the last rung skips every packet but its keyframes before decoding them (`skips`, asked
    before each packet): shedding groups undecoded measured no better there (tools/results/
    overload.md), where the engine runs out before the decoders. A source that cannot thin has
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
        #: the share of the stream's frames to give up
        self.fraction = 0.0
        #: the ladder's last rung: decode the keyframes only, where the source can
        self.keyframes_only = False
        self._credit = phase % 1.0
        self._after = 0  # frames dropped after decoding (`drop`)
        self._by_worker = 0  # frames its source's decode worker gave up
        self._thin = DecodeShare()  # what a source decoded on the graph's thread skips (`skips`)
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
        """Let `source` thin its own decoding for this shedder where it can: one with a `thin`
        attribute (a live file, `FileSource.thin`; a camera, `LiveSource.thin`); `thins_here`
        says whether it does so on the graph's thread (a file's `decode: thread`)."""
        if hasattr(source, "thin"):
            source.thin = self
            self._thins = True
            self._here = bool(getattr(source, "thins_here", False))

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
        `seconds`: its time). Called once per packet, in order, on the source's thread: every
        packet is decoded but on the last rung."""
        self._thin.share = 0.0 if self.keyframes_only else 1.0
        return self._thin.skips(keyframe, seconds)

    def skipped_by_worker(self, count: int) -> None:
        """`count` more frames given up by the source's decode worker."""
        self._by_worker += count

    def drop(self) -> bool:
        if self._thins and not self._here:  # its worker gives up its share
            return False
        if self.fraction <= 0.0 or (self._here and (self.keyframes_only or self._thin.thinning)):
            return False
        self._credit += self.fraction
        if self._credit >= 1.0:
            self._credit -= 1.0
            self._after += 1
            return True
        return False
