"""What a keyframe shows: the detector's own boxes, each with the id of the track it went to.

On a keyframe the tracker publishes what the detector saw there, not its tracks' filtered boxes: a
keyframe's result equals its detections (in source pixels clipped to the frame, without those less
than `MIN_BOX_PX` wide or high there, as every tracker shows boxes), so it agrees with a detector run
on every frame exactly where both ran. Each box carries
- its own class (`class_id`, `class_name`: what the detector said of it here) and score;
- the id of the track it matched or started, and that track's label (`labels.py`: the class its
  detections scored most, this one included) in `data[TRACK_CLASS_ID]`, `data[TRACK_CLASS_NAME]`;
- id -1, and its own class as its label, when no track took it: a weak box that matched no track,
  one under the score that starts tracks, or one whose track the clean-up ended. Such a box is
  shown on its keyframe only (as supervision's LineZone does, analytics skip id -1).
A track the keyframe missed is not on it (the detector did not see it there); it stays in the
tracker, lost, to be found again, and is shown on the frames after only for `coast_s` (default 0).

Example:
    >>> import numpy as np, supervision as sv
    >>> from streamlens.track.tracks import TrackTable
    >>> found = sv.Detections(xyxy=np.array([[10.0, 10, 50, 40], [60, 5, 99, 30]]), confidence=np.array([0.9, 0.2]),
    ...                       class_id=np.array([7, 2]), data={"class_name": np.array(["truck", "car"], object)})
    >>> tracks = TrackTable.empty()
    >>> tracks.ids, tracks.class_ids, tracks.class_names = np.array([4]), np.array([2]), np.array(["car"], object)
    >>> out = keyframe_objects(found, np.array([4, -1]), tracks, 100, 50)
    >>> out.tracker_id.tolist(), out.data["class_name"].tolist(), out.data[TRACK_CLASS_NAME].tolist()
    ([4, -1], ['truck', 'car'], ['car', 'car'])
"""

from __future__ import annotations

import numpy as np
import supervision as sv

from ..frame import TRACK_CLASS_ID, TRACK_CLASS_NAME, empty_detections
from .base import clip_to_frame
from .tracks import TrackTable


def keyframe_objects(detections: sv.Detections, ids: np.ndarray, tracks: TrackTable, width: int,
                     height: int) -> sv.Detections:
    """`detections` (a keyframe's, in their order) with `ids[i]` the track of detection i (-1: none):
    as the keyframe publishes them (see the module's docs). `tracks`: the tracks after the keyframe;
    an id not among them is shown as -1. `detections` is left as it is."""
    if len(detections) == 0:
        return empty_detections()
    ids = np.asarray(ids, np.int64).copy()
    row_of = {track: row for row, track in enumerate(tracks.ids.tolist())}
    rows = np.array([row_of.get(track, -1) for track in ids.tolist()], np.int64)
    ids[rows < 0] = -1
    count = len(detections)
    class_ids = (np.asarray(detections.class_id, np.int64) if detections.class_id is not None
                 else np.zeros(count, np.int64))
    names = detections.data.get("class_name") if detections.data else None
    names = np.asarray(names, object) if names is not None else np.array([str(c) for c in class_ids], object)
    tracked = rows >= 0
    label_ids, labels = class_ids.copy(), names.copy()
    label_ids[tracked] = tracks.class_ids[rows[tracked]]
    labels[tracked] = tracks.class_names[rows[tracked]]
    scores = (detections.confidence if detections.confidence is not None else np.ones(count)).astype(np.float32)
    boxes, shown = clip_to_frame(detections.xyxy, width, height)
    out = sv.Detections(xyxy=boxes[shown], confidence=scores[shown], class_id=class_ids[shown], tracker_id=ids[shown])
    out.data["class_name"] = names[shown]
    out.data[TRACK_CLASS_ID], out.data[TRACK_CLASS_NAME] = label_ids[shown], labels[shown]
    return out


__all__ = ["keyframe_objects"]
