"""What the neural backends share: prepare frames, group them by input size, run, decode, map back.

`NeuralDetector.detect(frames)`:
1. takes each frame's prepared input from `prepare()` (done earlier on another thread) or makes it now;
2. groups frames by input size (one group, except in `bucket` mode with frames of several shapes);
3. runs each group in chunks of at most `max_batch` (`run_chunk`, the backend's part), which gives
   `Candidates` in input pixels per frame;
4. maps them to `sv.Detections` in source pixels (NMS first, unless already done).

A backend implements `prepare_input(frame) -> PreparedInput` and `run_chunk(inputs) -> list[Candidates]`.

Example:
    >>> chunks([1, 2, 3, 4, 5], 2)
    [[1, 2], [3, 4], [5]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import supervision as sv

from ..frame import WEAK, Frame, empty_detections
from .base import Detector
from .detections import to_detections
from .heads import Candidates
from .preprocess import Geometry, InputSpec, place, place_region


@dataclass(slots=True)
class PreparedInput:
    """One frame ready for the model: `data` (the backend's own form) and where the frame went in it."""

    data: Any
    geometry: Geometry

    @property
    def input_size(self) -> tuple[int, int]:
        return self.geometry.input_size


def chunks(items: list, size: int) -> list[list]:
    """`items` cut into lists of at most `size`."""
    return [items[i:i + size] for i in range(0, len(items), size)]


class NeuralDetector(Detector):
    """The shared half of `OnnxDetector` and `UltralyticsDetector` (see the module's docstring).

    Subclasses set `spec` (`InputSpec`), `names`, `conf`, `iou`, `wanted` (class ids or None),
    `max_batch`, `max_det`, `agnostic_nms` (boxes of two classes on one place: True, "auto" or False, see
    `to_detections`) and `nms_done` (True when
    `run_chunk` already applied NMS).
    """

    spec: InputSpec
    conf: float = 0.25
    iou: float = 0.45
    wanted: np.ndarray | None = None
    max_batch: int = 8
    max_det: int = 300
    agnostic_nms: bool | str = False
    nms_done: bool = False
    #: a `-seg` model: each box comes with its mask
    gives_masks: bool = False
    #: boxes down to this score are reported too, flagged `data[WEAK]` under `conf`, for the tracker's
    #: second stage (`build_detector(..., weak_floor=)`: the tracker's `low_score`); None: none under `conf`
    floor: float | None = None

    @property
    def threshold(self) -> float:
        """The least score a box is decoded at: `conf`, or `floor` under it. Not for a model that
        gives masks: a weak box is never shown, and its mask would be work for nothing."""
        if self.floor is None or self.gives_masks:
            return self.conf
        return min(self.conf, self.floor)

    def prepare(self, frame: Frame) -> None:
        frame.prepared = self.prepare_input(frame)

    def placement(self, frame: Frame) -> tuple[np.ndarray, Geometry]:
        """The model input (uint8 H x W x 3, the frame's channel order) for `frame` and its geometry:
        the whole picture, or its `region` (`place_region`)."""
        if frame.region is None or self.spec.resize == "bucket":
            # the picture scaled straight from the decoder's when nothing converted it yet (a
            # bucket's region is a window of the whole frame's input: the same small picture)
            geometry = self.spec.geometry((frame.width, frame.height))
            small = frame.scaled(*geometry.placed_size)
            if small is not None:
                canvas = place(small, geometry, self.spec.pad_value)
                if frame.region is None:
                    return canvas, geometry
                x1, y1, x2, y2 = self.spec.region_window(geometry, frame.region)
                return canvas[y1:y2, x1:x2], geometry.window(x1, y1, x2, y2)
        if frame.region is None:
            geometry = self.spec.geometry((frame.width, frame.height))
            return place(frame.image, geometry, self.spec.pad_value), geometry
        return place_region(frame.image, self.spec, frame.region)

    def prepare_input(self, frame: Frame) -> PreparedInput:
        raise NotImplementedError

    def run_chunk(self, inputs: list[PreparedInput]) -> list[Candidates]:
        """Run the model on inputs of one size (at most `max_batch`); candidates in input pixels."""
        raise NotImplementedError

    def run_groups(self, groups: list[list[PreparedInput]]) -> list[list[Candidates]]:
        """Run every chunk; a backend that can overlap chunks (CUDA) overrides this."""
        return [self.run_chunk(chunk) for chunk in groups]

    def detect(self, frames: list[Frame]) -> list[sv.Detections]:
        """One `sv.Detections` per frame, in source pixels. A frame whose `region` has no area (nothing
        moved, nothing tracked: see graph/schedule/regions.py) is not run: it gets no boxes."""
        results: list[sv.Detections | None] = [None] * len(frames)
        inputs: list[PreparedInput | None] = [None] * len(frames)
        by_size: dict[tuple[int, int], list[int]] = {}
        for i, f in enumerate(frames):
            if f.region is not None and (f.region[2] <= f.region[0] or f.region[3] <= f.region[1]):
                results[i] = empty_detections()
            else:
                inputs[i] = prepared = f.prepared or self.prepare_input(f)
                by_size.setdefault(prepared.input_size, []).append(i)
            f.prepared = None  # the frame goes on to the sinks; its model input is no longer needed
        order = [part for idx in by_size.values() for part in chunks(idx, self.max_batch)]
        found = self.run_groups([[inputs[i] for i in part] for part in order])
        for part, candidates in zip(order, found):
            for i, cand in zip(part, candidates):
                results[i] = to_detections(cand, inputs[i].geometry, self.names, iou=self.iou,
                                           apply_nms=not self.nms_done, max_det=self.max_det,
                                           agnostic=self.agnostic_nms)
                if self.threshold < self.conf:  # NMS keeps the same boxes at `conf`: a box only suppresses weaker ones
                    results[i].data[WEAK] = self.under_conf(results[i].confidence)
        return results

    def under_conf(self, scores: np.ndarray) -> np.ndarray:
        """Which of `scores` the detector would not keep at `conf` alone: it keeps a box scoring above it."""
        return ~(scores > self.conf)  # type: ignore[return-value]
