"""Drawing results on frames: boxes and labels, the same in the annotated video and the JPEG frames.

Labels read like `#7 car 0.83` (`#id` only for a tracked object, `tracker_id >= 0`). Colours
follow the track id when tracked, else the class, so a tracked object keeps its colour. Line
width and text size follow the frame size.

Example:
    >>> import numpy as np
    >>> import supervision as sv
    >>> det = sv.Detections(xyxy=np.array([[10, 10, 60, 40]], np.float32),
    ...     confidence=np.array([0.83]), class_id=np.array([2]), tracker_id=np.array([7]))
    >>> image = np.zeros((120, 160, 3), np.uint8)
    >>> drawn = FrameAnnotator((160, 120)).annotate(image, det)
    >>> bool(drawn.any()), bool(image.any())   # the original is left as it was
    (True, False)
"""

from __future__ import annotations

import numpy as np
import supervision as sv


def labels_for(detections: sv.Detections) -> list[str]:
    """Label text per detection: `#id` (tracked only), class name (else class id), score.

    Example:
        >>> det = sv.Detections(xyxy=np.array([[0, 0, 9, 9], [0, 0, 5, 5]], np.float32),
        ...     confidence=np.array([0.83, 0.5]), class_id=np.array([2, 0]),
        ...     tracker_id=np.array([7, -1]))
        >>> det.data["class_name"] = np.array(["car", "person"])
        >>> labels_for(det)
        ['#7 car 0.83', 'person 0.50']
    """
    names = detections.data.get("class_name")
    labels = []
    for i in range(len(detections)):
        parts = []
        if detections.tracker_id is not None and detections.tracker_id[i] >= 0:
            parts.append(f"#{int(detections.tracker_id[i])}")
        if names is not None:
            parts.append(str(names[i]))
        elif detections.class_id is not None:
            parts.append(str(int(detections.class_id[i])))
        if detections.confidence is not None:
            parts.append(f"{float(detections.confidence[i]):.2f}")
        labels.append(" ".join(parts))
    return labels


def color_indices_for(detections: sv.Detections) -> np.ndarray:
    """Palette index per detection: the track id when tracked, else the class id.

    Example:
        >>> det = sv.Detections(xyxy=np.zeros((2, 4), np.float32), class_id=np.array([2, 0]),
        ...     tracker_id=np.array([7, -1]))
        >>> color_indices_for(det).tolist()
        [7, 0]
    """
    n = len(detections)
    by_class = detections.class_id if detections.class_id is not None else np.zeros(n, np.int64)
    if detections.tracker_id is None:
        return np.asarray(by_class, np.int64)
    tracked = detections.tracker_id >= 0
    return np.where(tracked, detections.tracker_id, by_class).astype(np.int64)


class FrameAnnotator:
    """Draws boxes and labels sized for frames of `resolution` (width, height)."""

    def __init__(self, resolution: tuple[int, int]):
        self.resolution = resolution
        self._boxes = sv.BoxAnnotator(
            thickness=sv.calculate_optimal_line_thickness(resolution),
            color_lookup=sv.ColorLookup.CLASS,
        )
        self._labels = sv.LabelAnnotator(
            text_scale=max(0.4, sv.calculate_optimal_text_scale(resolution)),
            text_padding=5,
            color_lookup=sv.ColorLookup.CLASS,
        )

    def annotate(self, image: np.ndarray, detections: sv.Detections) -> np.ndarray:
        """`image` with `detections` drawn on a copy; `image` itself is returned when there is
        nothing to draw, and is never changed."""
        if len(detections) == 0:
            return image
        drawn = image.copy()
        colors = color_indices_for(detections)
        self._boxes.annotate(drawn, detections, custom_color_lookup=colors)
        self._labels.annotate(drawn, detections, labels=labels_for(detections), custom_color_lookup=colors)
        return drawn


__all__ = ["FrameAnnotator", "labels_for", "color_indices_for"]
