"""What drawing costs a frame: `FrameAnnotator.annotate` at 720p with 20 tracked boxes, without and with
the analytics' rules (2 lines, 4 zones) and speeds, as the annotated video and the zmq JPEG frames draw.

CPU time of this process per call (every thread: what a frame costs the machine, less moved by other
processes than wall time), best and median of 5 rounds; a frame of the shared highway clip (or a grey one
without it) as the picture. The drawing is what the annotated outputs show; nothing is scored here.
Printed under the command and the machine.

    python tools/bench_draw.py [--calls 500]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from streamlens.bench.harness import VIDEOS, command_line, machine_line

CLIP = VIDEOS / "highway_720p30.mp4"


def picture(width: int, height: int) -> np.ndarray:
    if CLIP.exists():
        import av

        with av.open(str(CLIP)) as container:
            return next(container.decode(video=0)).to_ndarray(format="bgr24")
    return np.full((height, width, 3), 110, np.uint8)


def cpu_ms(fn, calls: int) -> tuple[float, float]:
    """(best, median) CPU milliseconds per call over 5 rounds of calls / 5."""
    fn()
    per_round = max(1, calls // 5)
    rounds = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(per_round):
            fn()
        rounds.append((time.process_time() - started) / per_round * 1000)
    return min(rounds), statistics.median(rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()

    import supervision as sv

    from streamlens.analytics import LineRule, StreamAnalytics, ZoneRule
    from streamlens.analytics.stream import FrameAnalytics
    from streamlens.sinks.draw import FrameAnnotator

    width, height = 1280, 720
    image = picture(width, height)
    rng = np.random.default_rng(0)
    corner = rng.uniform([0, 0], [width - 120, height - 90], (20, 2))
    xyxy = np.hstack([corner, corner + rng.uniform([40, 30], [120, 90], (20, 2))]).astype(np.float32)
    boxes = sv.Detections(xyxy=xyxy, confidence=rng.uniform(0.3, 1, 20).astype(np.float32),
                          class_id=np.full(20, 2), tracker_id=np.arange(20))
    boxes.data["class_name"] = np.array(["car"] * 20, dtype=object)
    lines = [(LineRule(name, ((100, y), (1200, y + 20))), None) for name, y in (("north", 400), ("south", 600))]
    zones = [(ZoneRule(f"z{i}", [(x, 150), (x + 280, 150), (x + 300, 380), (x - 20, 380)]), None)
             for i, x in enumerate((40, 360, 680, 960))]
    rules = StreamAnalytics(lines=lines, zones=zones, pixels_per_metre=20.0)
    labels = list(boxes.data["class_name"])
    rules.update(0.0, boxes.xyxy, boxes.tracker_id, labels, boxes.confidence)
    found = rules.update(0.1, boxes.xyxy + 3, boxes.tracker_id, labels, boxes.confidence)
    speeds_only = FrameAnalytics([], {}, [], speeds=found.speeds)
    annotator = FrameAnnotator((width, height))
    cases = [("the frame's copy alone", lambda: image.copy()),
             ("20 boxes", lambda: annotator.annotate(image, boxes)),
             ("20 boxes with speeds", lambda: annotator.annotate(image, boxes, speeds_only)),
             ("20 boxes, speeds, 2 lines, 4 zones", lambda: annotator.annotate(image, boxes, found)),
             ("2 lines, 4 zones, no boxes", lambda: annotator.annotate(image, sv.Detections.empty(), found))]
    print(f"{command_line()}\nmachine: {machine_line()}\npicture: {CLIP.name if CLIP.exists() else 'grey'}")
    print(f"{'case':<36} {'best ms':>8} {'median ms':>10}")
    for name, fn in cases:
        best, median = cpu_ms(fn, args.calls)
        print(f"{name:<36} {best:>8.3f} {median:>10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
