"""The tracks of one stream, kept as columns of numpy arrays so every step works on all at once.

A track goes through these states:

    TENTATIVE --(matched again on the next keyframe)--> CONFIRMED --(missed on a keyframe)--> LOST
        |                                                   ^                                    |
        +--(missed)--> REMOVED                              +--------(matched again)-------------+
                                                                                 (lost too long) --> REMOVED

Removed tracks are dropped from the table; their ids are never given out again on that stream.

Example:
    >>> import numpy as np
    >>> table = TrackTable.empty()
    >>> len(table), table.ids.tolist()
    (0, [])
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import IntEnum

import numpy as np

from ..frame import MIN_BOX_PX
from .kernels import in_view_rows

#: a track ends when less than this share of its box's area is inside the frame: the object is
#: mostly out of the picture (across one edge: its centre has left it), and the rest of its box is
#: the tracker's guess, which a detector that sees only the visible part cannot confirm
MIN_VISIBLE = 0.5


class TrackState(IntEnum):
    TENTATIVE = 0
    CONFIRMED = 1
    LOST = 2
    REMOVED = 3


# the states as plain ints, for the hot paths (an enum member lookup costs more than the comparison)
TENTATIVE, CONFIRMED, LOST, REMOVED = (int(s) for s in TrackState)


@dataclass(slots=True)
class TrackTable:
    """Every live track of a stream: one row per track, one array per property."""

    #: track ids, from 1, never reused within a stream
    ids: np.ndarray
    #: `TrackState` per track
    states: np.ndarray
    #: Kalman state `(N, 8)`: cx, cy, w, h and their velocities per second
    means: np.ndarray
    #: Kalman covariance `(N, 3, 4)`: per coordinate, the 2x2 block of it and its rate (see kalman.py)
    covs: np.ndarray
    #: the track's label: the class its detections scored most (`labels.py`)
    class_ids: np.ndarray
    class_names: np.ndarray
    #: the class of the last detection matched to the track (what the detector said last)
    seen_ids: np.ndarray
    seen_names: np.ndarray
    #: the score of the last detection matched to the track
    scores: np.ndarray
    #: how many keyframes matched the track
    hits: np.ndarray
    #: stream time (seconds) of the keyframe that started the track, and of the last that matched it
    born: np.ndarray
    last_seen: np.ndarray
    #: how well motion between keyframes followed the track, 0 to 1 (1 right after a keyframe)
    motion_quality: np.ndarray
    #: `(N, 2)`: the centre of the track's last detection (NaN: it was at the frame's edge), and the
    #: motion measured since it (NaN once the track was only predicted): what `motion.scale.MotionScale`
    #: learns from. Zeros when not given.
    anchor: np.ndarray = field(default=None)
    travel: np.ndarray = field(default=None)

    def __post_init__(self):
        if self.anchor is None:
            self.anchor = np.zeros((len(self.ids), 2))
        if self.travel is None:
            self.travel = np.zeros((len(self.ids), 2))

    @classmethod
    def empty(cls) -> TrackTable:
        return cls(ids=np.empty(0, np.int64), states=np.empty(0, np.int8), means=np.empty((0, 8)),
                   covs=np.empty((0, 3, 4)), class_ids=np.empty(0, np.int64),
                   class_names=np.empty(0, object), seen_ids=np.empty(0, np.int64),
                   seen_names=np.empty(0, object), scores=np.empty(0, np.float32),
                   hits=np.empty(0, np.int64), born=np.empty(0), last_seen=np.empty(0), motion_quality=np.empty(0))

    def __len__(self) -> int:
        return len(self.ids)

    def select(self, rows: np.ndarray) -> TrackTable:
        """The tracks at `rows` (indices or a boolean mask), as a new table."""
        return TrackTable(*(getattr(self, name)[rows] for name in _COLUMNS))

    def copy(self) -> TrackTable:
        return TrackTable(*(getattr(self, name).copy() for name in _COLUMNS))

    def append(self, other: TrackTable) -> TrackTable:
        """This table with the rows of `other` after its own."""
        return TrackTable(*(np.concatenate([getattr(self, name), getattr(other, name)]) for name in _COLUMNS))

    def in_view(self, width: int, height: int) -> TrackTable:
        """This table without the tracks whose box is no longer visible in a `width` x `height`
        frame: less than `MIN_VISIBLE` of its area inside it, or less than `MIN_BOX_PX` wide or high
        there (see tracker.py). A frame of unknown size (0 x 0) keeps every track."""
        if width <= 1 or height <= 1 or len(self) == 0:
            return self
        visible = in_view_rows(self.means, width, height, MIN_BOX_PX, MIN_VISIBLE)  # compiled: every frame
        return self if visible.all() else self.select(visible)


_COLUMNS = tuple(f.name for f in fields(TrackTable))
