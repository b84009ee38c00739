"""Make `samples/traffic.mp4`: a small synthetic traffic clip with known object boxes.

Everything in the clip is drawn by this script (no outside images), from a fixed scene and a fixed
random seed, so every run writes the same frames. The scene is a fixed camera looking at a
four-lane road with a side road crossing it: textured grass, a pavement, lane markings, five
vehicles (rounded rectangles with a darker windscreen, of different sizes, speeds and directions,
entering and leaving the frame; one pair crosses at the junction) and a person walking slowly on the
pavement. Every frame gets a little sensor noise. The clip is H.264 (libx264, yuv420p, GOP 30, no
B-frames), 30 fps.

The ground truth is `object_boxes(frame_index)`: the box of every object on that frame, so tests can
score a detector against it. `tools/` is not a package; load this file by path:

    >>> import importlib.util
    >>> spec = importlib.util.spec_from_file_location("make_sample", "tools/make_sample.py")
    >>> make_sample = importlib.util.module_from_spec(spec); spec.loader.exec_module(make_sample)
    >>> make_sample.object_boxes(0)
    []
    >>> [box for box in make_sample.object_boxes(100) if box[0] == "car_red"]
    [('car_red', 230, 193, 300, 221)]

Command line:

    python tools/make_sample.py                       # writes samples/traffic.mp4, 640x360, 10 s
    python tools/make_sample.py --out /tmp/t.mp4 --seconds 3 --size 1280x720
"""

from __future__ import annotations

import argparse
import sys
from typing import NamedTuple
from pathlib import Path

import av
import cv2
import numpy as np

DESIGN_SIZE = (640, 360)
"""The (width, height) the scene is laid out in; other sizes scale every coordinate."""

FPS = 30
SEED = 20240601
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "samples" / "traffic.mp4"
CRF = 26
NOISE_SIGMA = 2.0

# Scene layout, in design pixels (640x360).
ROAD_TOP, ROAD_BOTTOM = 120, 260          # the four-lane road, two lanes each way
PAVEMENT_TOP, PAVEMENT_BOTTOM = 264, 312  # the pavement below it
SIDE_ROAD_LEFT, SIDE_ROAD_RIGHT = 436, 500  # the side road crossing the main road


class MovingObject(NamedTuple):
    """One object of the scene: a box of `width` x `height` design pixels whose top-left corner is at
    (`x`, `y`) on frame `start` and moves by (`vx`, `vy`) design pixels per frame after that.

    `heading` says where its front is ("left", "right", "up", "down"), for the windscreen. (A
    NamedTuple rather than a dataclass, so that the file loads by path without a sys.modules entry.)
    """

    name: str
    kind: str  # "vehicle" or "person"
    width: int
    height: int
    color: tuple[int, int, int]  # BGR
    x: float
    y: float
    vx: float
    vy: float
    start: int

    @property
    def heading(self) -> str:
        if abs(self.vx) >= abs(self.vy):
            return "right" if self.vx >= 0 else "left"
        return "down" if self.vy >= 0 else "up"


# Drawing order: later objects are drawn over earlier ones. Every object starts outside the frame,
# so the first frame is the empty background. car_green drives down the side road and crosses
# car_red's lane while car_red passes the junction (frames ~150-185; car_red is drawn on top).
SCENE: tuple[MovingObject, ...] = (
    MovingObject("truck_blue", "vehicle", 120, 30, (140, 50, 15), -120, 228, 1.8, 0.0, 20),
    MovingObject("car_green", "vehicle", 28, 58, (110, 215, 120), 470, -58, 0.0, 3.0, 90),
    MovingObject("car_red", "vehicle", 70, 28, (25, 25, 160), -70, 193, 3.0, 0.0, 0),
    MovingObject("car_yellow", "vehicle", 60, 26, (40, 200, 220), 640, 124, -4.0, 0.0, 10),
    MovingObject("van_white", "vehicle", 92, 30, (225, 225, 220), 640, 157, -2.5, 0.0, 60),
    MovingObject("person", "person", 14, 36, (150, 60, 140), -14, 272, 0.6, 0.0, 0),
)


def _scale(size: tuple[int, int]) -> tuple[float, float]:
    return size[0] / DESIGN_SIZE[0], size[1] / DESIGN_SIZE[1]


def _object_box(obj: MovingObject, frame_index: int, size: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """The unclipped box (x1, y1, x2, y2) of `obj` on a frame of `size`, x2/y2 exclusive;
    None before it starts."""
    if frame_index < obj.start:
        return None
    sx, sy = _scale(size)
    steps = frame_index - obj.start
    x1 = round((obj.x + obj.vx * steps) * sx)
    y1 = round((obj.y + obj.vy * steps) * sy)
    return x1, y1, x1 + max(1, round(obj.width * sx)), y1 + max(1, round(obj.height * sy))


def object_boxes(frame_index: int, size: tuple[int, int] = DESIGN_SIZE) -> list[tuple[str, int, int, int, int]]:
    """The ground truth of one frame: `(name, x1, y1, x2, y2)` for every object that shows on it.

    Boxes are in pixels of a clip of `size` (width, height), clipped to the frame, x2 and y2 exclusive
    (the object covers columns x1..x2-1). They are listed in drawing order: an object later in the
    list is drawn over an earlier one where they overlap. A box that touches the frame's edge may
    belong to an object that is only partly in view.

    Example:
        >>> [box for box in object_boxes(100) if box[0] == "car_red"]
        [('car_red', 230, 193, 300, 221)]
        >>> [box for box in object_boxes(100, size=(1280, 720)) if box[0] == "car_red"]
        [('car_red', 460, 386, 600, 442)]
    """
    width, height = size
    boxes = []
    for obj in SCENE:
        box = _object_box(obj, frame_index, size)
        if box is None:
            continue
        x1, y1, x2, y2 = max(0, box[0]), max(0, box[1]), min(width, box[2]), min(height, box[3])
        if x2 > x1 and y2 > y1:
            boxes.append((obj.name, x1, y1, x2, y2))
    return boxes


def render_background(size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """The empty scene as a BGR uint8 image of `size`: grass, road, side road, pavement, markings."""
    width, height = size
    sx, sy = _scale(size)

    def px(x: float) -> int:
        return round(x * sx)

    def py(y: float) -> int:
        return round(y * sy)

    # Grass: green with blotchy low-frequency texture and fine speckle.
    blotches = cv2.resize(rng.normal(0, 1, (height // 16 + 1, width // 16 + 1)), (width, height))
    speckle = rng.normal(0, 1, (height, width))
    grass = np.empty((height, width, 3), np.float32)
    grass[..., 0] = 45 + 10 * blotches + 8 * speckle
    grass[..., 1] = 110 + 22 * blotches + 14 * speckle
    grass[..., 2] = 70 + 12 * blotches + 8 * speckle
    image = np.clip(grass, 0, 255).astype(np.uint8)

    # Asphalt: mid grey with fine grain, on the main road and the side road.
    asphalt = np.clip(95 + 7 * rng.normal(0, 1, (height, width)), 0, 255).astype(np.uint8)
    asphalt = np.repeat(asphalt[..., None], 3, axis=2)
    road_rows = slice(py(ROAD_TOP), py(ROAD_BOTTOM))
    image[road_rows] = asphalt[road_rows]
    side_cols = slice(px(SIDE_ROAD_LEFT), px(SIDE_ROAD_RIGHT))
    image[:, side_cols] = asphalt[:, side_cols]

    # Pavement: light grey slabs with joints, interrupted by the side road.
    pave_rows = slice(py(PAVEMENT_TOP), py(PAVEMENT_BOTTOM))
    slabs = np.clip(160 + 6 * rng.normal(0, 1, (height, width)), 0, 255).astype(np.uint8)
    image[pave_rows] = np.repeat(slabs[..., None], 3, axis=2)[pave_rows]
    for x in range(0, DESIGN_SIZE[0], 24):
        cv2.line(image, (px(x), py(PAVEMENT_TOP)), (px(x), py(PAVEMENT_BOTTOM) - 1), (120, 120, 120), 1)
    cv2.line(image, (0, py(PAVEMENT_TOP)), (width - 1, py(PAVEMENT_TOP)), (130, 130, 130), max(1, py(2)))
    image[:, side_cols] = asphalt[:, side_cols]

    # Markings on the main road: solid white edges, dashed lane lines, a double yellow centre line.
    white, yellow = (230, 230, 230), (40, 190, 220)
    line = max(1, py(2))
    for y in (ROAD_TOP + 3, ROAD_BOTTOM - 4):
        cv2.line(image, (0, py(y)), (width - 1, py(y)), white, line)
    for y in (ROAD_TOP + 35, ROAD_BOTTOM - 35):
        for x in range(0, DESIGN_SIZE[0], 40):
            if SIDE_ROAD_LEFT - 20 < x < SIDE_ROAD_RIGHT:
                continue
            cv2.line(image, (px(x), py(y)), (px(x + 20), py(y)), white, line)
    for y in ((ROAD_TOP + ROAD_BOTTOM) // 2 - 2, (ROAD_TOP + ROAD_BOTTOM) // 2 + 2):
        cv2.line(image, (0, py(y)), (width - 1, py(y)), yellow, max(1, py(1)))

    # Side road: a dashed centre line outside the junction, stop lines at the junction.
    centre = (SIDE_ROAD_LEFT + SIDE_ROAD_RIGHT) // 2
    for y in range(0, DESIGN_SIZE[1], 30):
        if ROAD_TOP - 15 < y < ROAD_BOTTOM:
            continue
        cv2.line(image, (px(centre), py(y)), (px(centre), py(y + 15)), white, line)
    for y in (ROAD_TOP - 6, ROAD_BOTTOM + 6):
        cv2.line(image, (px(SIDE_ROAD_LEFT), py(y)), (px(SIDE_ROAD_RIGHT) - 1, py(y)), white, max(1, py(3)))
    return image


def _draw_vehicle(image: np.ndarray, obj: MovingObject, box: tuple[int, int, int, int]) -> None:
    """A rounded rectangle in the vehicle's colour, a lighter roof and a dark windscreen at its front."""
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1
    r = max(1, min(w, h) // 4)
    color = obj.color
    # cv2 rectangle corners are inclusive: the body covers columns x1..x2-1 and rows y1..y2-1.
    cv2.rectangle(image, (x1 + r, y1), (x2 - 1 - r, y2 - 1), color, -1)
    cv2.rectangle(image, (x1, y1 + r), (x2 - 1, y2 - 1 - r), color, -1)
    for cx, cy in ((x1 + r, y1 + r), (x2 - 1 - r, y1 + r), (x1 + r, y2 - 1 - r), (x2 - 1 - r, y2 - 1 - r)):
        cv2.circle(image, (cx, cy), r, color, -1)
    roof = tuple(min(255, c + 25) for c in color)
    cv2.rectangle(image, (x1 + w // 4, y1 + h // 5), (x2 - 1 - w // 4, y2 - 1 - h // 5), roof, -1)
    glass = tuple(c // 4 for c in color)
    if obj.heading in ("left", "right"):
        depth = max(2, w // 7)
        wx = x2 - 1 - w // 5 - depth if obj.heading == "right" else x1 + w // 5
        cv2.rectangle(image, (wx, y1 + h // 6), (wx + depth, y2 - 1 - h // 6), glass, -1)
    else:
        depth = max(2, h // 7)
        wy = y2 - 1 - h // 5 - depth if obj.heading == "down" else y1 + h // 5
        cv2.rectangle(image, (x1 + w // 6, wy), (x2 - 1 - w // 6, wy + depth), glass, -1)


def _draw_person(image: np.ndarray, obj: MovingObject, box: tuple[int, int, int, int], frame_index: int) -> None:
    """A head, a torso in the person's colour, and two legs that swing as it walks."""
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1
    head = max(2, h // 6)
    cv2.circle(image, (x1 + w // 2, y1 + head // 2), head // 2, (120, 160, 210), -1)
    torso_bottom = y1 + head + (h * 2) // 5
    cv2.rectangle(image, (x1, y1 + head), (x2 - 1, torso_bottom), obj.color, -1)
    swing = (frame_index // 8) % 2
    leg = max(1, w // 3)
    legs = (40, 40, 60)
    left = x1 + (0 if swing else w // 6)
    right = x2 - 1 - (0 if not swing else w // 6)
    cv2.rectangle(image, (left, torso_bottom), (left + leg, y2 - 1), legs, -1)
    cv2.rectangle(image, (right - leg, torso_bottom), (right, y2 - 1), legs, -1)


def render_frame(background: np.ndarray, frame_index: int, rng: np.random.Generator) -> np.ndarray:
    """One frame: the background, every object drawn in scene order, and sensor noise."""
    height, width = background.shape[:2]
    image = background.copy()
    for obj in SCENE:
        box = _object_box(obj, frame_index, (width, height))
        if box is None:
            continue
        if obj.kind == "person":
            _draw_person(image, obj, box, frame_index)
        else:
            _draw_vehicle(image, obj, box)
    noise = rng.normal(0.0, NOISE_SIGMA, image.shape).astype(np.float32)
    return np.clip(image.astype(np.float32) + noise, 0, 255).astype(np.uint8)


def write_sample(out: Path, seconds: float = 10.0, size: tuple[int, int] = DESIGN_SIZE, seed: int = SEED) -> int:
    """Write the clip to `out` (H.264 in MP4) and return the number of frames written.

    Example:
        >>> import tempfile
        >>> write_sample(Path(tempfile.mkdtemp()) / "traffic.mp4", seconds=1)
        30
    """
    width, height = size
    if width % 2 or height % 2 or width < 16 or height < 16:
        raise ValueError(f"size {width}x{height}: width and height must be even and at least 16 (yuv420p)")
    frames = round(seconds * FPS)
    if frames < 1:
        raise ValueError(f"seconds={seconds}: expected at least one frame (1/{FPS} s)")
    rng = np.random.default_rng(seed)
    background = render_background(size, rng)
    out.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(out), "w") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = 30
        stream.codec_context.max_b_frames = 0
        stream.options = {"crf": str(CRF), "preset": "medium"}
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(render_frame(background, index, rng), format="bgr24")
            frame.pts = index
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return frames


def _parse_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r}: expected WIDTHxHEIGHT, e.g. 640x360") from None
    return width, height


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the synthetic traffic sample clip.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output file (default {DEFAULT_OUT})")
    parser.add_argument("--seconds", type=float, default=10.0, help="clip length in seconds (default 10)")
    parser.add_argument("--size", type=_parse_size, default=DESIGN_SIZE, help="WIDTHxHEIGHT (default 640x360)")
    args = parser.parse_args(argv)
    try:
        frames = write_sample(args.out, seconds=args.seconds, size=args.size)
    except ValueError as error:
        print(f"make_sample: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {frames} frames, {args.size[0]}x{args.size[1]}, {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
