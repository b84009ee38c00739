"""`motion: mv` on clips encoded with one and with three reference frames: how its boxes age between keyframes.

The decoder's motion vectors do not say which reference frame a block came from; with several (x264's
default `ref=3`) a share of them read two or three frames' motion as one. This tool tracks each clip
from the detector's boxes every `--interval`-th frame, the `mv` model carrying them between, and scores
every other frame against the same detector on every frame (`streamlens.bench.reference`; F1 at IoU
0.5, class-aware, `streamlens.bench.accuracy.match_frame`), for three arms:

- `plain`: the vectors' median shift taken as it is, the box's size as the Kalman filter predicts;
- `scale`: the shift at the factor the stream learns from its keyframes (`track/motion/scale.py`);
- `scale+growth`: and the box grown as its vectors spread (the default).

Clips: the shared highway clip as shipped (x264, `ref=3`), at 1080p (x264, `ref=3`), at its original
320x240 (MPEG-4 Part 2, one reference), and the indoor clip (x264 with B-frames); and re-encodes made
here with PyAV's libx264 (`--cache`): the 720p highway clip with one reference frame (as most cameras'
hardware encoders), the 320x240 one and the indoor one with three, the indoor one with one. None of
the tracker's constants was fitted to any of them (their values and why: the modules).

    python tools/bench_mv_encoders.py                    # every clip, interval 20 (10 for 10 fps clips)
    python tools/bench_mv_encoders.py --clips highway_720p30.mp4 --interval 10
"""

from __future__ import annotations

import argparse
import sys
import threading
from fractions import Fraction
import tempfile
from pathlib import Path

import av
import numpy as np
import supervision as sv

from streamlens.bench import harness
from streamlens.bench.accuracy import match_frame
from streamlens.bench.harness import RESULTS, VIDEOS, need
from streamlens.bench.reference import reference_for
from streamlens.config import DetectorConfig
from streamlens.frame import Frame
from streamlens.sources.file import FileSource
from streamlens.track import KeyframeTracker
from streamlens.track.motion import MotionVectors

MODEL = harness.YOLOX_NANO / "yolox_nano.onnx"
VEHICLES = ["car", "truck", "bus", "motorcycle"]
#: name: (source clip, x264's settings for a re-encode (preset medium unless they say, crf 23) or None
#: for the file as shared, classes[, the part of the picture re-encoded: x, y, w, h])
CLIPS = {
    "highway_720p30.mp4": ("highway_720p30.mp4", None, VEHICLES),
    "highway_1080p30.mp4": ("highway_1080p30.mp4", None, VEHICLES),
    "highway_320x240.avi": ("highway_320x240.avi", None, VEHICLES),
    "person_indoor_768x432.mp4": ("person_indoor_768x432.mp4", None, ["person"]),
    "highway_720p30 ref=1": ("highway_720p30.mp4", "ref=1:bframes=0:keyint=30", VEHICLES),
    "highway_320x240 ref=3": ("highway_320x240.avi", "ref=3:bframes=0", VEHICLES),
    "person_indoor ref=3": ("person_indoor_768x432.mp4", "ref=3:bframes=0", ["person"]),
    "person_indoor ref=1": ("person_indoor_768x432.mp4", "ref=1:bframes=0", ["person"]),
    # the top and the bottom half of the highway clip, the views tools/bench_reid.py cuts for its two
    # cameras, with its x264 preset veryfast (one reference frame, B-frames; crf 23 here, 18 there)
    "highway_720p30 top veryfast": ("highway_720p30.mp4", "preset=veryfast:keyint=30", VEHICLES, (0, 0, 1280, 360)),
    "highway_720p30 bottom veryfast": ("highway_720p30.mp4", "preset=veryfast:keyint=30", VEHICLES,
                                        (0, 360, 1280, 360)),
}


class ScaledVectors(MotionVectors):
    """The learned factor, no growth."""

    def measure(self, previous, current, boxes, untracked=True):
        estimate = super().measure(previous, current, boxes, untracked)
        estimate.growth[:] = np.nan
        return estimate


class PlainVectors(ScaledVectors):
    """The model before issue 47: no learned factor, no growth."""

    learns_scale = False


ARMS = {"plain": PlainVectors, "scale": ScaledVectors, "scale+growth": MotionVectors}


def encoded(name: str, cache: Path) -> Path:
    """The clip `name` as a file: the shared one, or its re-encode (made once into `cache`)."""
    source, options, _, *crop = CLIPS[name]
    shared = need(VIDEOS / source)
    if options is None:
        return shared
    path = cache / (name.replace(" ", "_").replace("=", "") + ".mp4")
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with av.open(str(shared)) as inp, av.open(str(path) + ".part", "w", format="mp4") as out:
        src = inp.streams.video[0]
        x, y, width, height = crop[0] if crop else (0, 0, src.codec_context.width, src.codec_context.height)
        stream = out.add_stream("libx264", rate=src.average_rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        settings = dict(p.split("=") for p in options.split(":"))
        preset = settings.pop("preset", "medium")
        params = ":".join(f"{k}={v}" for k, v in settings.items())
        stream.options = {"preset": preset, "crf": "23", "x264-params": params}
        for index, frame in enumerate(inp.decode(src)):
            image = frame.to_ndarray(format="rgb24")[y:y + height, x:x + width]
            picture = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            picture = picture.reformat(format="yuv420p")
            picture.pts, picture.time_base = index, Fraction(1) / src.average_rate
            out.mux(stream.encode(picture))
        out.mux(stream.encode())
    Path(str(path) + ".part").rename(path)
    return path


def vectors_of(path: Path) -> tuple[list, tuple[int, int], float]:
    """Every frame's motion vectors as a file source reads them (B-frames at their reference's
    distance), the clip's size and frame rate."""
    vectors, size = [], (0, 0)
    with FileSource("clip", path, export_mvs=True) as source:
        for frame in source.frames(threading.Event()):
            vectors.append(frame.motion_vectors)
            size = (frame.width, frame.height)
    return vectors, size, source.fps or 30.0


def track(arm: str, vectors: list, size: tuple[int, int], fps: float, ref,
          interval: int) -> tuple[dict[int, list[int]], float]:
    """Per distance from the last keyframe: [matched, shown + wanted] over the clip; the learned factor."""
    tracker = KeyframeTracker(ARMS[arm](), fps)
    blank = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (size[1], size[0], 3))
    counts: dict[int, list[int]] = {}
    for index, mv in enumerate(vectors[:len(ref)]):
        frame = Frame("clip", index, index / fps, 0.0, blank, motion_vectors=mv)
        if index % interval == 0:
            boxes, classes = ref.boxes(index), ref.classes(index)
            tracker.update(frame, sv.Detections(xyxy=boxes.reshape(-1, 4), confidence=np.full(len(boxes), 0.9),
                                                class_id=classes, data={"class_name": classes.astype(str)}))
            continue
        shown = tracker.propagate(frame)
        pairs = match_frame(shown.xyxy, shown.class_id, ref.boxes(index), ref.classes(index))
        count = counts.setdefault(index % interval, [0, 0])
        count[0] += 2 * len(pairs)
        count[1] += len(shown) + len(ref.boxes(index))
    return counts, tracker.scale.gain


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", default="all", help=f"comma-separated, of: {', '.join(CLIPS)}; or all")
    parser.add_argument("--interval", type=int, default=20, help="keyframe interval at 25-30 fps (half at 10 fps)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "streamlens_mv_encoders")
    parser.add_argument("--out", type=Path, default=RESULTS / "mv_encoders.md")
    args = parser.parse_args(argv)
    need(MODEL)
    names = list(CLIPS) if args.clips == "all" else args.clips.split(",")
    unknown = [n for n in names if n not in CLIPS]
    if unknown:
        parser.error(f"unknown clip {unknown[0]!r}")
    parts = {"a quarter in": 4, "halfway": 2, "three quarters in": 4 / 3}
    lines = [harness.header("motion: mv on clips of one and of three reference frames"), "",
             "F1 of the boxes shown between keyframes against the detector on every frame (YOLOX-Nano, conf 0.3), "
             "over every frame that is not a keyframe (`mean`) and at some distances from the last keyframe "
             "(a quarter of the interval in, and so on); "
             "`factor`: what the stream learned by its end.", "",
             "| clip | interval | arm | mean F1 | " + " | ".join(parts) + " | the frame before a keyframe | factor |",
             "|---|---|---|---|" + "---|" * (len(parts) + 1) + "---|"]
    for name in names:
        path = encoded(name, args.cache)
        vectors, size, fps = vectors_of(path)
        interval = args.interval if fps > 15 else max(2, args.interval // 2)
        classes = CLIPS[name][2]
        ref = reference_for(DetectorConfig(backend="onnx", model=str(MODEL), conf=0.3, resize="bucket",
                                           threads=1, classes=classes), str(path), args.cache)
        for arm in ARMS:
            counts, gain = track(arm, vectors, size, fps, ref, interval)
            mean = sum(c[0] for c in counts.values()) / max(1, sum(c[1] for c in counts.values()))
            at = [counts.get(round(interval / d)) for d in parts.values()] + [counts.get(interval - 1)]
            cells = " | ".join("-" if c is None else f"{c[0] / max(1, c[1]):.3f}" for c in at)
            lines.append(f"| {name} | {interval} | {arm} | {mean:.3f} | {cells} | {gain:.3f} |")
            print(lines[-1], flush=True)
    harness.write_page(args.out, "\n".join(lines), keep="## Notes")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
