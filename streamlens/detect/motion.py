"""A detector that needs no model: boxes around what moves in front of a fixed camera.

`MotionDetector` keeps one background model per stream (OpenCV's MOG2 Gaussian mixture) and reports a
box around each blob of foreground pixels. It knows nothing of classes: every box is class 0,
"motion". It suits fixed cameras (a moving or shaking camera makes everything foreground), tests,
and checking a pipeline end to end without a model file.

Per frame, and per stream:
  1. shrink the frame to `work_width` pixels wide (never enlarge it) and make it grey,
  2. blur it lightly (sensor noise and compression artefacts),
  3. update the stream's background model and take its foreground mask (no shadow detection),
  4. open the mask (drop speckles), then close it (join the pieces of one vehicle into one blob),
  5. box every outer contour whose area is at least `min_area` of the frame, and map the boxes back
     to source pixels.

`confidence` is the fraction of a box's pixels that the background model called foreground
(before the open/close), so a solid moving object scores near 1 and a loose cluster of specks low.

What it cannot do, by design: tell objects apart that touch or pass close to each other (one box
around both); see an object whose grey level matches the background's (a dark red car on dark
asphalt shows in parts); keep reporting an object that stops (it fades into the background after
about a third of `history`). Objects already in view on a stream's first frame, or on a frame where
the whole scene changed, leave "ghost" boxes where they stood until the model relearns those pixels.
On the highway clip of ../shared/data it finds about three in four of the cars YOLOX-Nano finds
(IoU >= 0.3), at about 3 ms per 1280x720 frame on one core.

Example:
    >>> import numpy as np
    >>> from streamlens.frame import Frame
    >>> detector = MotionDetector(warmup=1)
    >>> road = np.full((360, 640, 3), 90, np.uint8)
    >>> car = road.copy(); car[100:140, 200:280] = 230  # a white car
    >>> frames = [Frame("cam1", i, None, 0.0, road) for i in range(10)] + [Frame("cam1", 10, None, 0.0, car)]
    >>> detections = [detector.detect([f])[0] for f in frames][-1]
    >>> detections.xyxy.tolist(), detections.data["class_name"].tolist()  # the car, and a pixel of blur
    ([[198.0, 98.0, 282.0, 142.0]], ['motion'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import supervision as sv

from ..config.common import section
from ..config.detector import DetectorConfig
from ..frame import Frame, empty_detections
from .base import Detector

MOTION_CLASS_ID = 0
MOTION_CLASS_NAME = "motion"

# Fixed choices, tuned on the sample clip and the highway clip of ../shared/data (checked against
# YOLOX-Nano's car boxes there). BLUR_SIZE: a 3x3 blur calms sensor and compression noise; 5x5 made
# boxes fatter and lost small objects. OPEN_SIZE and CLOSE_SIZE are for a 320-wide work image and
# scale with `work_width`: open 3x3 drops specks, close 7x7 joins the pieces of one car (9 and more
# start to merge neighbouring cars). N_MIXTURES: three Gaussians per pixel suffice for a fixed
# camera and cost a quarter less than OpenCV's five.
BLUR_SIZE = 3
OPEN_SIZE = 3
CLOSE_SIZE = 7
N_MIXTURES = 3

BACKGROUND_RATIO = 0.7
"""MOG2's `backgroundRatio`: how much of a pixel's recent history a colour must cover to count as
background. A colour that stays on a pixel becomes background after about -ln(ratio) x history
frames: OpenCV's default 0.9 takes 0.1 x history (21 frames at history 200, 0.7 s at 30 fps, so a slow,
plain-coloured truck loses its middle); 0.7 takes 0.36 x history (71 frames, 2.4 s)."""

#: the settings of `MotionDetector` a `detector` section leaves out (see its parameters)
DEFAULTS = {"min_area": 0.0005, "history": 200, "var_threshold": 25.0, "work_width": 320, "warmup": 5}

SCENE_CHANGE_FRACTION = 0.5
"""When more than this fraction of a frame is foreground, the scene changed rather than something
moved in it (lights, exposure, a camera knocked aside, a cut): the stream's model starts over from
that frame, and warms up again, instead of reporting one frame-sized box for several seconds while
it relearns. An object that fills more than half the view is taken for such a change."""


def _odd_size(size: float) -> int:
    """A kernel size: the odd integer nearest `size`, at least 3."""
    return max(3, int(round(size)) // 2 * 2 + 1)


def shrink_to_grey(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """`image` (HxWx3 BGR) as a grey image of `size` (width, height), averaging every source pixel.

    Halves the image with bilinear steps (each an exact 2x2 mean) while it is at least twice the
    target size, then finishes with an area resize: close to one area resize from the full size, at
    about a third of its cost on a 720p frame (0.7 ms instead of 2 ms).

    Example:
        >>> shrink_to_grey(np.zeros((720, 1280, 3), np.uint8), (320, 180)).shape
        (180, 320)
    """
    width, height = size
    while image.shape[1] >= 2 * width and image.shape[0] >= 2 * height:
        image = cv2.resize(image, (image.shape[1] // 2, image.shape[0] // 2), interpolation=cv2.INTER_LINEAR)
    if image.ndim == 3:
        image = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    if (image.shape[1], image.shape[0]) != (width, height):
        image = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)
    return image


@dataclass(slots=True)
class _StreamBackground:
    """The background model of one stream and what it has seen so far."""

    subtractor: cv2.BackgroundSubtractorMOG2
    source_size: tuple[int, int]  # (width, height) of the stream's frames
    work_size: tuple[int, int]  # (width, height) the model works at
    open_kernel: np.ndarray
    close_kernel: np.ndarray
    calls: int = 0
    last_index: int | None = None


class MotionDetector(Detector):
    """Boxes around moving blobs, by background subtraction; one background model per stream.

    Parameters:
        min_area: the smallest blob reported, as a fraction of the frame's area (default 0.0005:
            about 460 px² on a 1280x720 frame, a 21x21 square; 115 px² at 640x360). A fraction keeps
            one setting right for every resolution of the same scene, since the work image is the
            same size whatever the source size.
        history: how many frames of the stream the background model remembers (default 200). It
            counts source frames, not calls: when the detector runs only on every Nth frame, each call
            learns N frames' worth, so the background adapts at the same speed in seconds.
        var_threshold: MOG2's threshold on the squared Mahalanobis distance of a pixel from the
            background model (default 25); higher is less sensitive. On the highway clip 32 and more
            break dark cars into pieces, 16 lets compression noise through.
        work_width: the width of the grey image the model works on (default 320); frames narrower
            than this are used at their own size, never enlarged.
        warmup: how many calls per stream report no boxes while the model learns the background
            (default 5, at least 1: on its first frame a model knows nothing else).

    Frames may come from several streams in one batch (each keeps its own model, keyed by
    `frame.stream`) and may be spaced out (only keyframes); a stream whose frame size changes gets a
    fresh model. `reset()` forgets the models.

    Example:
        >>> detector = MotionDetector(min_area=0.001, work_width=256)
        >>> detector.names
        {0: 'motion'}
    """

    names = {MOTION_CLASS_ID: MOTION_CLASS_NAME}

    def __init__(self, cfg: DetectorConfig | None = None, **keys: Any):
        """`MotionDetector(cfg)` with the `detector` section (backend motion), or
        `MotionDetector(**keys)` with its keys, checked as the pipeline file's are (`ValueError`);
        a key not given takes its default (`DEFAULTS`)."""
        if cfg is None:
            cfg = section(DetectorConfig, "motion detector", backend="motion", **keys)
        settings = {**DEFAULTS, **cfg.options}
        self.min_area = float(settings["min_area"])
        self.history = settings["history"]
        self.var_threshold = float(settings["var_threshold"])
        self.work_width = settings["work_width"]
        self.warmup = settings["warmup"]
        self._backgrounds: dict[str, _StreamBackground] = {}

    def detect(self, frames: list[Frame]) -> list[sv.Detections]:
        """One `sv.Detections` per frame, in order; frames of one stream must come in time order."""
        return [self._detect_one(frame) for frame in frames]

    def reset(self, stream: str | None = None) -> None:
        """Forget the background model of `stream` (of every stream when None)."""
        if stream is None:
            self._backgrounds.clear()
        else:
            self._backgrounds.pop(stream, None)

    def work_size(self, stream: str) -> tuple[int, int] | None:
        """The (width, height) the stream's model works at; None before the stream's first frame."""
        background = self._backgrounds.get(stream)
        return None if background is None else background.work_size

    def close(self) -> None:
        self.reset()

    def _background_for(self, frame: Frame) -> _StreamBackground:
        """The stream's background model; a new one for a new stream or a new frame size."""
        source_size = (frame.width, frame.height)
        background = self._backgrounds.get(frame.stream)
        if background is None or background.source_size != source_size:
            work_width = min(self.work_width, frame.width)
            work_height = max(1, round(frame.height * work_width / frame.width))
            subtractor = cv2.createBackgroundSubtractorMOG2(
                history=self.history, varThreshold=self.var_threshold, detectShadows=False
            )
            subtractor.setBackgroundRatio(BACKGROUND_RATIO)
            subtractor.setNMixtures(N_MIXTURES)
            open_size = _odd_size(OPEN_SIZE * work_width / 320)
            close_size = _odd_size(CLOSE_SIZE * work_width / 320)
            background = _StreamBackground(
                subtractor,
                source_size,
                (work_width, work_height),
                open_kernel=np.ones((open_size, open_size), np.uint8),
                close_kernel=cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (close_size, close_size)),
            )
            self._backgrounds[frame.stream] = background
        return background

    def _learning_rate(self, background: _StreamBackground, frame: Frame) -> float:
        """How much of the model this call replaces: fast at first (as MOG2 does by itself), then
        1/history per source frame, so a detector called every Nth frame learns N frames at once."""
        gap = 1
        if background.last_index is not None and frame.index > background.last_index:
            gap = frame.index - background.last_index
        calls_in_history = max(1.0, self.history / gap)
        return 1.0 / min(2.0 * background.calls, calls_in_history)

    def _foreground_mask(self, background: _StreamBackground, frame: Frame) -> np.ndarray:
        """The raw foreground mask (0 or 255) of the frame at the model's work size."""
        grey = shrink_to_grey(frame.image, background.work_size)
        grey = cv2.GaussianBlur(grey, (BLUR_SIZE, BLUR_SIZE), 0)
        background.calls += 1
        mask = background.subtractor.apply(grey, learningRate=self._learning_rate(background, frame))
        background.last_index = frame.index
        # Shadows are off, but keep only sure foreground (255) should a model ever mark them (127).
        _, mask = cv2.threshold(mask, 200, 255, cv2.THRESH_BINARY)
        return mask

    def _detect_one(self, frame: Frame) -> sv.Detections:
        background = self._background_for(frame)
        mask = self._foreground_mask(background, frame)
        if background.calls > 1 and np.count_nonzero(mask) > SCENE_CHANGE_FRACTION * mask.size:
            # The lights changed, the exposure jumped or the camera moved: start over from this frame.
            self.reset(frame.stream)
            background = self._background_for(frame)
            mask = self._foreground_mask(background, frame)
        if background.calls <= self.warmup:
            return empty_detections()
        work_width, work_height = background.work_size
        blobs = cv2.morphologyEx(mask, cv2.MORPH_OPEN, background.open_kernel)
        blobs = cv2.morphologyEx(blobs, cv2.MORPH_CLOSE, background.close_kernel)
        contours, _ = cv2.findContours(blobs, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        min_work_area = self.min_area * work_width * work_height
        boxes, confidences = [], []
        for contour in contours:
            if cv2.contourArea(contour) < min_work_area:
                continue
            x, y, w, h = cv2.boundingRect(contour)
            boxes.append((x, y, x + w, y + h))
            confidences.append(np.count_nonzero(mask[y : y + h, x : x + w]) / float(w * h))
        if not boxes:
            return empty_detections()
        scale = np.array([frame.width / work_width, frame.height / work_height] * 2, dtype=np.float32)
        xyxy = np.asarray(boxes, dtype=np.float32) * scale
        np.clip(xyxy[:, 0::2], 0, frame.width, out=xyxy[:, 0::2])
        np.clip(xyxy[:, 1::2], 0, frame.height, out=xyxy[:, 1::2])
        count = len(boxes)
        detections = sv.Detections(
            xyxy=xyxy,
            confidence=np.asarray(confidences, dtype=np.float32),
            class_id=np.full(count, MOTION_CLASS_ID, dtype=np.int64),
            tracker_id=np.full(count, -1, dtype=np.int64),
        )
        detections.data["class_name"] = np.array([MOTION_CLASS_NAME] * count, dtype=object)
        return detections
