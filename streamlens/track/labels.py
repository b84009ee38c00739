"""A track's label by vote: the class its detections scored most over the track's life.

A detector may call one object a car on one keyframe and a truck on the next (a van, a pick-up);
the track keeps one label, the class with the largest sum of scores over every detection matched to
it so far, the newest included. A tie keeps the label the track has. `LabelVotes` keeps the sums of
one stream's tracks, by track id, and forgets the tracks that ended (`keep`).

Example:
    >>> import numpy as np
    >>> votes = LabelVotes()
    >>> def seen(cls, name, score):
    ...     ids, names = votes.vote(np.array([7]), np.array([cls]), np.array([name], object), np.array([score]))
    ...     return names[0]
    >>> seen(2, "car", 0.6), seen(7, "truck", 0.7), seen(2, "car", 0.5), seen(7, "truck", 0.3)
    ('car', 'truck', 'car', 'car')
"""

from __future__ import annotations

import numpy as np


class LabelVotes:
    """Per track id, the sum of the scores of its detections by class (see the module's docs)."""

    def __init__(self) -> None:
        self._sums: dict[int, dict[tuple[int, str], float]] = {}
        self._label: dict[int, tuple[int, str]] = {}

    def vote(self, ids: np.ndarray, class_ids: np.ndarray, class_names: np.ndarray,
             scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tracks `ids` each matched one detection (its class, name and score): add the votes, and
        return the tracks' labels (class ids and names) after them."""
        out_ids = np.empty(len(ids), np.int64)
        out_names = np.empty(len(ids), object)
        for i, (track, cls, name, score) in enumerate(zip(ids.tolist(), class_ids.tolist(), class_names.tolist(),
                                                          scores.tolist())):
            sums = self._sums.setdefault(track, {})
            key = (int(cls), str(name))
            sums[key] = sums.get(key, 0.0) + float(score)
            label = self._label.get(track)
            best = max(sums, key=sums.__getitem__)
            if label is None or sums[best] > sums.get(label, 0.0):
                label = self._label[track] = best
            out_ids[i], out_names[i] = label
        return out_ids, out_names

    def keep(self, ids: np.ndarray) -> None:
        """Forget every track but `ids` (the others ended)."""
        if len(self._sums) > len(ids):
            alive = set(ids.tolist())
            for track in [t for t in self._sums if t not in alive]:
                del self._sums[track]
                self._label.pop(track, None)


__all__ = ["LabelVotes"]
