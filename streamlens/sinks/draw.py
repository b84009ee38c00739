"""Drawing results on frames: masks, boxes, labels and the analytics' rules, the same in the annotated
video and the JPEG frames.

Masks (`segment:`, or a `-seg` detector) are tinted under the boxes, half their box's colour
(`draw_masks`).

Objects. Labels read like `#7 car 0.83` (`#id` only for a tracked object, `tracker_id >= 0`), and
`#7 car 0.83 54 km/h` where the analytics measure the object's speed. Colours follow the track id
when tracked, else the class, so a tracked object keeps its colour.

Rules (`analytics:`, drawn when a frame carries its `FrameAnalytics`), under the boxes:
- a zone is its outline over a light tint (a quarter of its colour added to the frame within it,
  so the road shows through), with a label at its centre: its name and the objects in it now
  (`bay 3`);
- a line is drawn end to end, with an arrow from its middle into its `in` side (its left, seen
  from its first point towards its second, so above a line drawn left to right: the way an object
  crosses to count as `in`), and a label at its first point: its name and running counts
  (`gate in 12 out 4`).
Lines and zones take colours of their own (`LINE_COLORS`, `ZONE_COLORS`, by their order in the
pipeline file); their labels are the boxes' labels' size, on the rule's colour, moved into the
frame where they would stick out of it.

Line width and text size follow the frame size. What never changes within a stream (each zone's
mask and bounding box, the ends of lines and arrows, where labels go) is worked out once per stream
and frame size, and each label's image once per text (supervision's `draw_text`), so a frame costs
one masked add per zone, its outlines and lines, and copies of the labels: at 720p with 20 boxes,
2 lines and 4 zones the rules add about 0.3 ms to the boxes' 0.7 ms (2 cores). One annotator draws
one stream. The image given is never changed: the drawing is on a copy, and the image itself is
returned only when there is nothing to draw (no object and no rule).

Example:
    >>> import numpy as np
    >>> import supervision as sv
    >>> det = sv.Detections(xyxy=np.array([[10, 10, 60, 40]], np.float32),
    ...     confidence=np.array([0.83]), class_id=np.array([2]), tracker_id=np.array([7]))
    >>> image = np.zeros((120, 160, 3), np.uint8)
    >>> drawn = FrameAnnotator((160, 120)).annotate(image, det)
    >>> bool(drawn.any()), bool(image.any())   # the original is left as it was
    (True, False)

    With rules: a frame's `FrameAnalytics` (here made by hand) brings their geometry and counts.

    >>> from streamlens.analytics.stream import FrameAnalytics, Geometry
    >>> geometry = Geometry(lines=(("gate", ((10, 100), (150, 100))),),
    ...                     zones=(("bay", np.array([[20, 20], [80, 20], [80, 70], [20, 70.]])),))
    >>> found = FrameAnalytics([], {"gate": {"in": 2, "out": 1, "classes": {}}, "bay": 0}, [],
    ...                        geometry=geometry)
    >>> drawn = FrameAnnotator((160, 120)).annotate(image, sv.Detections.empty(), found)
    >>> drawn[100, 120].tolist() != [0, 0, 0], drawn[5, 155].tolist()   # on the line; far from both
    (True, [0, 0, 0])
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import supervision as sv

#: colours of lines and of zones, by their order in the pipeline file
LINE_COLORS = sv.ColorPalette.from_hex(["#ffe000", "#ff39c9", "#00e5ff", "#4cfb12", "#ff7633"])
ZONE_COLORS = sv.ColorPalette.from_hex(["#00c4ff", "#ff7633", "#a351fb", "#40de8a", "#ff4040"])
#: a zone's fill: this share of its colour is added to the frame within it (a light tint)
ZONE_TINT = 0.25
#: the colours of masks, by the same index as their boxes' (supervision's default palette), and how
#: much of it a mask's pixels take
MASK_COLORS = sv.ColorPalette.DEFAULT
MASK_OPACITY = 0.5
#: label images kept per stream (a count that changes makes a new one)
LABEL_CACHE = 256


def labels_for(detections: sv.Detections, speeds=None) -> list[str]:
    """Label text per detection: `#id` (tracked only), `gN` (its `global_id` across cameras, where
    it has one: `reid.across`), class name (else class id), score, and the speed where `speeds[i]`
    (km/h) is known.

    Example:
        >>> det = sv.Detections(xyxy=np.array([[0, 0, 9, 9], [0, 0, 5, 5]], np.float32),
        ...     confidence=np.array([0.83, 0.5]), class_id=np.array([2, 0]),
        ...     tracker_id=np.array([7, -1]))
        >>> det.data["class_name"] = np.array(["car", "person"])
        >>> labels_for(det)
        ['#7 car 0.83', 'person 0.50']
        >>> labels_for(det, speeds=[54.3, None])
        ['#7 car 0.83 54 km/h', 'person 0.50']
        >>> det.data["global_id"] = np.array([3, -1])
        >>> labels_for(det)
        ['#7 g3 car 0.83', 'person 0.50']
    """
    names = detections.data.get("class_name")
    global_ids = detections.data.get("global_id")
    labels = []
    for i in range(len(detections)):
        parts = []
        if detections.tracker_id is not None and detections.tracker_id[i] >= 0:
            parts.append(f"#{int(detections.tracker_id[i])}")
        if global_ids is not None and global_ids[i] >= 0:
            parts.append(f"g{int(global_ids[i])}")
        if names is not None:
            parts.append(str(names[i]))
        elif detections.class_id is not None:
            parts.append(str(int(detections.class_id[i])))
        if detections.confidence is not None:
            parts.append(f"{float(detections.confidence[i]):.2f}")
        if speeds is not None and i < len(speeds) and speeds[i] is not None:
            parts.append(f"{float(speeds[i]):.0f} km/h")
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


def in_side_normal(points) -> tuple[float, float]:
    """The unit vector across a line (`((x, y), (x, y))`, image coordinates) pointing into its `in`
    side: its left seen from the first point towards the second, where
    `streamlens.analytics.rules.LineRule` counts an object arriving as `in`.

    Example:
        >>> in_side_normal(((0, 50), (100, 50)))   # left to right: `in` is above (y grows down)
        (0.0, -1.0)
    """
    (ax, ay), (bx, by) = points
    length = max(1e-9, float(np.hypot(bx - ax, by - ay)))
    return ((by - ay) / length + 0.0, -(bx - ax) / length + 0.0)


def _text_color(background: sv.Color) -> sv.Color:
    """Black on light backgrounds, white on dark ones."""
    luma = 0.299 * background.r + 0.587 * background.g + 0.114 * background.b
    return sv.Color.BLACK if luma > 150 else sv.Color.WHITE


@dataclass(slots=True)
class _Zone:
    name: str
    color: sv.Color
    polygon: np.ndarray  # int32 (N, 1, 2), for OpenCV
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 of its fill within the frame (exclusive ends)
    tint: tuple[float, float, float, float]  # what its fill adds to each pixel (BGR)
    mask: np.ndarray | None  # 255 inside the zone, over `box`; None when the zone lies outside the frame
    label_at: tuple[int, int]


@dataclass(slots=True)
class _Line:
    name: str
    color: sv.Color
    start: tuple[int, int]
    end: tuple[int, int]
    arrow_from: tuple[int, int]
    arrow_to: tuple[int, int]
    label_at: tuple[int, int]


class _Rules:
    """What is drawn of one stream's rules that never changes, for one frame size."""

    def __init__(self, geometry, shape: tuple[int, int], thickness: int):
        self.geometry = geometry  # kept, so that it is known by identity
        self.shape = shape
        height, width = shape
        self.zones = []
        for k, (name, polygon) in enumerate(geometry.zones):
            color = ZONE_COLORS.by_idx(k)
            points = np.round(np.asarray(polygon, np.float64).reshape(-1, 2)).astype(np.int32)
            x0, y0 = np.maximum(points.min(axis=0), 0)
            x1, y1 = np.minimum(points.max(axis=0) + 1, (width, height))
            mask = None
            if x1 > x0 and y1 > y0:
                mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
                cv2.fillPoly(mask, [points - (x0, y0)], 255)
            tint = (*(round(v * ZONE_TINT) for v in color.as_bgr()), 0)
            centre = points.mean(axis=0)
            self.zones.append(_Zone(str(name), color, points.reshape(-1, 1, 2), (int(x0), int(y0), int(x1), int(y1)),
                                    tint, mask, (int(centre[0]), int(centre[1]))))
        self.lines = []
        arrow = max(10, round(0.05 * min(width, height)))
        for k, (name, ends) in enumerate(geometry.lines):
            (ax, ay), (bx, by) = ends
            nx, ny = in_side_normal(ends)
            mx, my = (ax + bx) / 2, (ay + by) / 2
            self.lines.append(_Line(str(name), LINE_COLORS.by_idx(k), (round(ax), round(ay)), (round(bx), round(by)),
                                    (round(mx), round(my)), (round(mx + arrow * nx), round(my + arrow * ny)),
                                    (round(ax), round(ay))))
        self.thickness = thickness
        self.labels: dict[tuple[str, sv.Color], np.ndarray] = {}  # a label's text and colour: its image


class FrameAnnotator:
    """Draws boxes, labels and the analytics' rules sized for frames of `resolution` (width, height)."""

    def __init__(self, resolution: tuple[int, int]):
        self.resolution = resolution
        self._thickness = sv.calculate_optimal_line_thickness(resolution)
        self._text_scale = max(0.4, sv.calculate_optimal_text_scale(resolution))
        self._text_padding = 5
        self._boxes = sv.BoxAnnotator(thickness=self._thickness, color_lookup=sv.ColorLookup.CLASS)
        self._labels = sv.LabelAnnotator(
            text_scale=self._text_scale,
            text_padding=self._text_padding,
            color_lookup=sv.ColorLookup.CLASS,
        )
        self._rules: _Rules | None = None

    def annotate(self, image: np.ndarray, detections: sv.Detections, analytics=None) -> np.ndarray:
        """`image` with `detections` drawn on a copy, and the rules and counts of `analytics` (a
        `FrameAnalytics`) when given, with each object's speed where known; `image` itself is
        returned when there is nothing to draw, and is never changed."""
        geometry = getattr(analytics, "geometry", None)
        has_rules = geometry is not None and bool(geometry.lines or geometry.zones)
        if len(detections) == 0 and not has_rules:
            return image
        drawn = image.copy()
        if has_rules:
            self._draw_rules(drawn, geometry, analytics.counts or {})
        if len(detections):
            speeds = getattr(analytics, "speeds", None) or None
            colors = color_indices_for(detections)
            masks = detections.data.get("masks")
            if masks is not None:
                draw_masks(drawn, masks, colors)
            self._boxes.annotate(drawn, detections, custom_color_lookup=colors)
            self._labels.annotate(drawn, detections, labels=labels_for(detections, speeds),
                                  custom_color_lookup=colors)
        return drawn

    def _draw_rules(self, drawn: np.ndarray, geometry, counts: dict) -> None:
        rules = self._rules
        if rules is None or rules.geometry is not geometry or rules.shape != drawn.shape[:2]:
            rules = self._rules = _Rules(geometry, drawn.shape[:2], self._thickness)
        thickness = rules.thickness
        for zone in rules.zones:
            if zone.mask is not None:  # one masked add: half what a blend (addWeighted, then a masked copy) costs
                x0, y0, x1, y1 = zone.box
                roi = drawn[y0:y1, x0:x1]
                cv2.add(roi, zone.tint, dst=roi, mask=zone.mask)
            cv2.polylines(drawn, [zone.polygon], True, zone.color.as_bgr(), thickness)
        for line in rules.lines:
            color = line.color.as_bgr()
            cv2.line(drawn, line.start, line.end, color, thickness)
            cv2.arrowedLine(drawn, line.arrow_from, line.arrow_to, color, thickness, cv2.LINE_AA, tipLength=0.4)
        for zone in rules.zones:
            count = counts.get(zone.name, 0)
            self._label(drawn, f"{zone.name} {count if isinstance(count, int) else 0}", zone.label_at, zone.color,
                        centre=True)
        for line in rules.lines:
            count = counts.get(line.name)
            count = count if isinstance(count, dict) else {}
            self._label(drawn, f"{line.name} in {count.get('in', 0)} out {count.get('out', 0)}", line.label_at,
                        line.color)

    def _label(self, drawn: np.ndarray, text: str, at: tuple[int, int], color: sv.Color, centre: bool = False) -> None:
        """`text` on a box of `color` with its top left corner at `at` (its centre with `centre`),
        moved into the frame where it would stick out of it. Each text is drawn once (by
        supervision's `draw_text`) and then copied."""
        labels = self._rules.labels
        patch = labels.get((text, color))
        if patch is None:
            (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, self._text_scale, 1)
            pad = self._text_padding
            patch = np.empty((th + 2 * pad, tw + 2 * pad, 3), np.uint8)
            patch[:] = color.as_bgr()
            sv.draw_text(patch, text, sv.Point(pad + tw // 2, pad + th // 2), text_color=_text_color(color),
                         text_scale=self._text_scale, text_padding=pad, background_color=color)
            if len(labels) >= LABEL_CACHE:
                labels.clear()
            labels[text, color] = patch
        h, w = patch.shape[:2]
        height, width = drawn.shape[:2]
        x, y = (at[0] - w // 2, at[1] - h // 2) if centre else at
        x, y = max(0, min(x, width - w)), max(0, min(y, height - h))
        part = patch[: height - y, : width - x]  # a label wider than the frame is cut
        drawn[y:y + part.shape[0], x:x + part.shape[1]] = part


def draw_masks(drawn: np.ndarray, masks, colors: np.ndarray, opacity: float = MASK_OPACITY) -> None:
    """Each object's mask (a `streamlens.segment.masks.BoxMask`, or None) tinted into `drawn` in
    place, in its box's colour (`colors`: palette indices, as the boxes take them), at `opacity`:
    what supervision's `MaskAnnotator` draws, worked out over each mask's own region instead of a
    whole-frame mask per object."""
    height, width = drawn.shape[:2]
    for mask, color in zip(masks, colors):
        made = None if mask is None else mask.raster(width, height)
        if made is None:
            continue
        part, (x0, y0, x1, y1) = made
        roi = drawn[y0:y1, x0:x1]
        inside = roi[part]  # the mask's pixels only (N x 3): blended where they are, nothing else made
        if len(inside):
            tint = np.empty_like(inside)
            tint[:] = MASK_COLORS.by_idx(int(color)).as_bgr()
            roi[part] = cv2.addWeighted(inside, 1 - opacity, tint, opacity, 0)


class StreamAnnotators:
    """A `FrameAnnotator` per stream, made again when the stream's frame size changes: what the zmq
    sink's JPEG frames and the live page draw with. Give each stream's frames from one thread at a
    time (the annotator of a stream keeps drawing state)."""

    def __init__(self) -> None:
        self._by_stream: dict[str, FrameAnnotator] = {}

    def annotate(self, result, image: np.ndarray | None = None) -> np.ndarray:
        """`result`'s frame (or `image`, its pixels read another way) with its detections and
        analytics drawn, on a copy."""
        frame = result.frame
        size = (frame.width, frame.height)
        annotator = self._by_stream.get(frame.stream)
        if annotator is None or annotator.resolution != size:
            annotator = self._by_stream[frame.stream] = FrameAnnotator(size)
        return annotator.annotate(frame.image if image is None else image, result.detections, result.analytics)


def encode_jpeg(image: np.ndarray, quality: int) -> bytes:
    """`image` (BGR) as JPEG bytes; `ValueError` when OpenCV cannot encode it."""
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError(f"cannot encode a {image.shape} image as JPEG")
    return data.tobytes()


__all__ = ["FrameAnnotator", "StreamAnnotators", "draw_masks", "encode_jpeg", "labels_for", "color_indices_for", "in_side_normal",
           "LINE_COLORS", "ZONE_COLORS", "ZONE_TINT"]
