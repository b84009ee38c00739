"""tools/bench_age.py's yardsticks: the `perfect motion` arm moves a keyframe's objects exactly where
the detector finds them later and drops those it no longer finds, and the scores count classes as
the bench does. (The tool's figures on the shared clips are in tools/results/age.md.)"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import supervision as sv

from streamlens.bench.reference import Reference

from .conftest import REPO


def _tool(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "tools"))  # it imports bench_track beside it, as when run
    spec = importlib.util.spec_from_file_location("bench_age", REPO / "tools" / "bench_age.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Clip(SimpleNamespace):
    def __len__(self) -> int:
        return len(self.detections)


def _clip(tool, boxes: list[list[list[float]]], classes: list[list[int]]) -> _Clip:
    """A clip whose detector found `boxes` (one list per frame) of `classes`, all at or above `conf`."""
    reference = Reference.from_frames([i / 30 for i in range(len(boxes))], boxes, classes)
    found = [sv.Detections(xyxy=np.array(b, np.float32).reshape(-1, 4), confidence=np.full(len(b), 0.9, np.float32),
                           class_id=np.array(c, np.int64), data={"class_name": np.array(["x"] * len(b), object)})
             for b, c in zip(boxes, classes)]
    return _Clip(reference=reference, detections=found,
                 links=tool.link_objects([reference.boxes(i) for i in range(len(reference))]))


def test_perfect_motion_follows_the_detector_drops_what_it_loses_and_keeps_the_keyframes_class(monkeypatch):
    tool = _tool(monkeypatch)
    car = [[0, 0, 20, 10], [4, 0, 24, 10], [8, 0, 28, 10], [12, 0, 32, 10]]  # 4 px a frame
    truck = [[100, 100, 140, 120]] * 2  # found on the first two frames only
    boxes = [[car[0], truck[0]], [car[1], truck[1]], [car[2]], [car[3]]]
    classes = [[2, 7], [2, 7], [7], [7]]  # the car is called a truck from frame 2 on
    clip = _clip(tool, boxes, classes)

    shown, cls = tool.perfect_motion(clip, 0, 3)
    assert shown.tolist() == [car[3]] and cls.tolist() == [2]  # moved, the truck gone, the keyframe's class

    held = tool.run_arm(clip, "held", interval=4)  # one keyframe: frame 0
    perfect = tool.run_arm(clip, "perfect motion", interval=4)
    # held on frame 3: frame 0's car overlaps frame 3's at 0.25 (no match), the truck shown where none is
    assert held.by_age[3].tolist() == [0, 2, 1]
    # perfect motion: every box in place (class-agnostic F1 1.0), the car called a car on frames 2
    # and 3, where the detector says truck (class-aware: matched, shown, wanted)
    assert perfect.agnostic.tolist() == [6, 6, 6]
    assert perfect.aware.tolist() == [4, 6, 6] and perfect.by_age[3].tolist() == [0, 1, 1]
    assert tool.Score.f1(perfect.aware) == 8 / 12
