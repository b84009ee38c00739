"""Replaying MOTChallenge public detections through a streamlens tracker.

A sequence folder holds `seqinfo.ini` (name, frame rate, length, image size), `det/det.txt` (the
public detections of every frame: frame, -1, x, y, w, h, score, ...) and, for training sequences,
`gt/gt.txt`. `replay()` runs a tracker over every frame as the engine would with keyframes every
`interval` frames: detections go in only on keyframes (`update`), the frames between are carried by
motion (`propagate`; with no images, the Kalman prediction). Every frame's objects come out, and
`write_results()` writes them in MOTChallenge format: frame, id, x, y, w, h, 1, -1, -1, -1.

Example:
    >>> seq = load_sequence("../shared/data/mot/MOT17-09")        # doctest: +SKIP
    >>> (seq.name, seq.fps, seq.length)                           # doctest: +SKIP
    ('MOT17-09', 30.0, 525)
    >>> results = replay(seq, KeyframeTracker("kalman", seq.fps), interval=5)   # doctest: +SKIP
    >>> write_results(results, "out/MOT17-09.txt")                # doctest: +SKIP
"""

from __future__ import annotations

import configparser
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import supervision as sv

from ..errors import StreamlensError
from ..frame import Frame, empty_detections
from ..graph.schedule.keyframes import KeyframeScheduler
from ..track.base import Tracker
from .metrics import read_mot_file

#: MOTChallenge scores pedestrians; the public detections are all "pedestrian"
PEDESTRIAN_CLASS_ID = 0
PEDESTRIAN = "pedestrian"


@dataclass
class MotSequence:
    """One MOTChallenge sequence: what `seqinfo.ini` says and the public detections per frame."""

    folder: Path
    name: str
    fps: float
    length: int
    width: int
    height: int
    #: frame number (from 1) to that frame's detections
    detections: dict[int, sv.Detections] = field(repr=False, default_factory=dict)

    @property
    def gt_path(self) -> Path | None:
        path = self.folder / "gt" / "gt.txt"
        return path if path.is_file() else None


def load_sequence(folder: str | Path) -> MotSequence:
    """Read a sequence folder; a missing `seqinfo.ini` or `det/det.txt` is a `StreamlensError`.

    The sequence is named after its folder (the name MOTChallenge tools look results up by)."""
    folder = Path(folder)
    info_path, det_path = folder / "seqinfo.ini", folder / "det" / "det.txt"
    for path in (info_path, det_path):
        if not path.is_file():
            raise StreamlensError(f"{folder}: not a MOTChallenge sequence folder ({path.name} not found at {path})")
    parser = configparser.ConfigParser()
    parser.read(info_path)
    try:
        info = parser["Sequence"]
        fps, length = float(info["frameRate"]), int(info["seqLength"])
        width, height = int(info["imWidth"]), int(info["imHeight"])
    except (KeyError, ValueError) as error:
        raise StreamlensError(f"{info_path}: [Sequence] needs frameRate, seqLength, imWidth and imHeight "
                              f"({error})") from None
    return MotSequence(folder, folder.name, fps, length, width, height, _detections_by_frame(det_path))


def replay(sequence: MotSequence, tracker: Tracker, interval: int) -> dict[int, sv.Detections]:
    """Run `tracker` over every frame of `sequence`, detections given on every `interval`-th frame
    (the first frame included); the tracker's objects per frame number."""
    scheduler = KeyframeScheduler(interval)
    blank = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (sequence.height, sequence.width, 3))
    results = {}
    for number in range(1, sequence.length + 1):
        frame = Frame(sequence.name, number - 1, (number - 1) / sequence.fps, 0.0, blank)
        if scheduler.is_keyframe():
            results[number] = tracker.update(frame, sequence.detections.get(number, empty_detections()))
        else:
            results[number] = tracker.propagate(frame)
    return results


def write_results(results: dict[int, sv.Detections], path: str | Path) -> Path:
    """Write per-frame objects in MOTChallenge format (frame, id, x, y, w, h, 1, -1, -1, -1);
    untracked objects (id < 0) are left out."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for number in sorted(results):
        objects = results[number]
        for (x1, y1, x2, y2), track_id in zip(objects.xyxy, objects.tracker_id):
            if track_id >= 0:
                lines.append(f"{number},{track_id},{x1:.2f},{y1:.2f},{x2 - x1:.2f},{y2 - y1:.2f},1,-1,-1,-1\n")
    path.write_text("".join(lines))
    return path


def _detections_by_frame(path: Path) -> dict[int, sv.Detections]:
    rows = read_mot_file(path)
    by_frame = {}
    for number in np.unique(rows[:, 0]).astype(int):
        chosen = rows[rows[:, 0] == number]
        x, y, w, h = chosen[:, 2:6].T
        detections = sv.Detections(xyxy=np.stack([x, y, x + w, y + h], axis=1).astype(np.float32),
                                   confidence=chosen[:, 6].astype(np.float32),
                                   class_id=np.full(len(chosen), PEDESTRIAN_CLASS_ID, np.int64))
        detections.data["class_name"] = np.full(len(chosen), PEDESTRIAN, dtype=object)
        by_frame[int(number)] = detections
    return by_frame
