"""The bench's plain baseline: what a user writes by hand to watch K cameras with one detector.

K copies of the video are decoded as K cameras (`FileSource(live=True, loop=True)`, one thread
each, paced at the video's frame rate). One loop on the main thread takes the newest frame of the
next stream in turn (round robin; a stream with no frame since its last turn is passed over),
runs the pipeline's own detector on it (built from the pipeline's `detector` section, batch of
one) and holds those boxes for that stream. Every decoded frame is published the moment it
becomes available, with the boxes its stream holds then: nothing waits for the detector, nothing
is tracked, nothing is dropped on purpose.

The results go out the way the pipeline's do, so the bench measures both alike: schema-v1 style
`frame` messages (`objects` with `cls`, `box`, `score`; `keyframe: false`, as no frame goes out
with its own detections; `detected_frame`: the index of the frame whose boxes it holds) and one
`eos` per stream at the end, on a ZeroMQ XPUB socket bound to `endpoint`, topics `<type>.<stream>.`.
It starts once `subscribers` subscriptions have arrived (the bench's listener makes three) and
stops `warmup + seconds` (+ a short margin) after its first frame, or on SIGTERM/SIGINT. Then it
prints `BENCH-REPORT <json>` (as the bench's runner does) with per stream the frames published
and the detections run.

Example:
    $ python -m streamlens.bench.hold pipelines/quickstart.yaml --video samples/traffic.mp4 \\
          --streams s0 s1 --endpoint tcp://127.0.0.1:5556 --warmup 1 --seconds 3
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

import zmq

from .runner import MARGIN_S, report


def _objects(detections, names: dict) -> list[dict]:
    boxes = detections.xyxy.tolist()
    ids = detections.class_id.tolist() if detections.class_id is not None else [-1] * len(boxes)
    scores = detections.confidence.tolist() if detections.confidence is not None else [1.0] * len(boxes)
    return [{"id": -1, "cls": int(c), "label": names.get(int(c), str(c)), "score": round(float(s), 4),
             "box": [round(float(v), 2) for v in b]} for b, c, s in zip(boxes, ids, scores)]


def _wait_subscribers(sock, count: int, timeout_s: float) -> bool:
    seen = 0
    deadline = time.monotonic() + timeout_s
    while seen < count and time.monotonic() < deadline:
        if sock.poll(100):
            seen += sock.recv()[:1] == b"\x01"
    return seen >= count


def copy_start(index: int, count: int, stagger_s: float) -> float:
    """Where copy `index` of `count` begins in the clip (`start_s`) when the copies are staggered
    over `stagger_s` seconds (0: every copy from the start).

    Example:
        >>> [copy_start(i, 4, 30.0) for i in range(4)]
        [0.0, 7.5, 15.0, 22.5]
    """
    return round(index * stagger_s / count, 3) if stagger_s > 0 else 0.0


def run(path: str, video: str, streams: list[str], endpoint: str, warmup: float, seconds: float,
        subscribers: int = 3, startup_s: float = 120.0, stagger_s: float = 0.0) -> dict:
    """Run the baseline (see the module docs); the report as a dict."""
    from ..config import load_pipeline
    from ..detect import build_detector
    from ..sources.file import FileSource

    begun = time.monotonic()
    config = load_pipeline(path)
    detector = build_detector(config.detector)
    names = dict(getattr(detector, "names", {}) or {})
    sources = [FileSource(name, video, live=True, loop=True, start_s=copy_start(i, len(streams), stagger_s))
               for i, name in enumerate(streams)]
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    ctx = zmq.Context()
    sock = ctx.socket(zmq.XPUB)
    sock.bind(endpoint)
    lock = threading.Condition()
    newest: dict = {name: None for name in streams}
    held = {name: ([], None) for name in streams}  # objects, and the frame they were detected on
    seq = {name: 0 for name in streams}
    detections = {name: 0 for name in streams}
    first: list[float] = []

    def send(message: dict) -> None:
        topic = f"{message['type']}.{message['stream']}.".encode()
        sock.send_multipart([topic, json.dumps(message, separators=(",", ":")).encode()])

    def camera(source) -> None:
        name = source.name
        for frame in source.frames(stop):
            with lock:
                if not first:
                    first.append(time.monotonic())
                newest[name] = frame
                objects, detected = held[name]
                send({"v": 1, "type": "frame", "stream": name, "seq": seq[name], "frame": frame.index,
                      "pts": None if frame.pts is None else round(frame.pts, 6), "ts": round(frame.ts, 6),
                      "keyframe": False, "detected_frame": detected, "objects": objects,
                      "latency_ms": {"decode": round(frame.timings.get("decode", 0.0), 3)}})
                seq[name] += 1
                lock.notify()

    threads = [threading.Thread(target=camera, args=(s,), name=s.name, daemon=True) for s in sources]
    try:
        if not _wait_subscribers(sock, subscribers, 60.0):
            return {"status": "failed", "error": f"no subscriber on {endpoint} within 60 s", "streams": []}
        for t in threads:
            t.start()
        turn = 0
        while not stop.is_set():
            now = time.monotonic()
            if first and now - first[0] >= warmup + seconds + MARGIN_S:
                break
            if not first and now - begun > startup_s:
                break
            with lock:
                picked = None
                for step in range(len(streams)):
                    name = streams[(turn + step) % len(streams)]
                    if newest[name] is not None:
                        picked, newest[name] = newest[name], None
                        turn = (turn + step + 1) % len(streams)
                        break
                if picked is None:
                    lock.wait(0.05)
                    continue
            found = detector.detect([picked])[0]
            with lock:
                held[picked.stream] = (_objects(found, names), picked.index)
                detections[picked.stream] += 1
        stop.set()
        for t in threads:
            t.join(10.0)
        with lock:
            for name in streams:
                send({"v": 1, "type": "eos", "stream": name, "seq": seq[name], "frames": seq[name],
                      "reason": "stopped"})
        time.sleep(0.2)  # let ZeroMQ hand the last messages over before the socket goes
    finally:
        stop.set()
        for source in sources:
            source.close()
        detector.close()
        sock.close(linger=2000)
        ctx.term()
    return {"status": "done", "error": None, "wall_s": round(time.monotonic() - begun, 3),
            "streams": [{"name": n, "frames": seq[n], "detections": detections[n]} for n in streams]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streamlens.bench.hold",
                                description="Detect the newest frame of each stream in turn and hold its boxes.")
    p.add_argument("pipeline", help="pipeline YAML file (its detector section is used)")
    p.add_argument("--video", required=True, help="the video every stream plays")
    p.add_argument("--streams", nargs="+", required=True, metavar="NAME", help="the streams' names")
    p.add_argument("--endpoint", required=True, help="where to bind the XPUB socket")
    p.add_argument("--warmup", type=float, default=0.0, help="seconds of warm-up")
    p.add_argument("--seconds", type=float, required=True, help="seconds measured after the warm-up")
    p.add_argument("--subscribers", type=int, default=3, help="subscriptions to wait for (default 3)")
    p.add_argument("--stagger", type=float, default=0.0, metavar="S",
                   help="copy i of K begins i/K of S seconds into the clip (default 0: all from the start)")
    p.add_argument("--debug", action="store_true", help="tracebacks")
    args = p.parse_args(argv)
    return report(lambda: run(args.pipeline, args.video, args.streams, args.endpoint, args.warmup, args.seconds,
                              args.subscribers, stagger_s=args.stagger), "hold baseline", args.debug)


if __name__ == "__main__":
    sys.exit(main())
