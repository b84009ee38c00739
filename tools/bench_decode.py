"""CPU per frame of decoding a file in a worker process (`FileSource(decode="process")`) against
decoding it on the thread that reads it (`decode="thread"`), and the bytes a frame takes crossing.

    nice -n 19 python tools/bench_decode.py [--repeats 5] [--engine-ms 5] [--out tools/results/decode.md]

Two kinds of run, each decoding whole files through `FileSource`:
- one stream, read on the thread that iterates `frames()`: `none` reads no pixels (the `mv` tracker
  between keyframes: nothing is converted to BGR), `bgr` reads `frame.image` on every frame (a
  detector or a drawing sink on every frame). This is the issue's figure: CPU per frame.
- `engine`: two streams of the clip, each iterated on a source thread of its own that queues its
  frames (8 at most), and one engine thread that does `--engine-ms` of GIL-holding Python work per
  frame (a fixed count of loop turns, timed once at start on an idle core): the runtime's shape.
  Its figure is the wall time per frame, both streams together, and the CPU beside it.
Then the conversion of one frame to BGR, CPU per frame (this process's: pool threads included)
over 40 frames of each clip, medians of alternating repeats: PyAV's (swscale) on the decoder's own
picture (the thread path), on a `YuvPicture` (the process path: swscale through a PyAV frame over
the I420 buffer), and OpenCV's I420 conversion on one thread and on its default pool (one thread
per core); and how far OpenCV's pixels are from PyAV's.
CPU is this process's (`getrusage(RUSAGE_SELF)`: every thread, FFmpeg's included) plus, with
`process`, each worker's (utime + stime of /proc/<pid>/stat, clock ticks, read when its last frame
arrives, before it is ended: FFmpeg's frame threads have ended by then, /proc/<pid>/stat still
counts them). Runs of the two modes alternate, `--repeats` times; the tables give medians. On a
shared machine only ratios between runs of the same invocation mean much.

Clips: samples/traffic.mp4 and, when ../shared/data is there, highway_720p30.mp4 and
highway_1080p30.mp4.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

import av
import numpy as np

from streamlens.bench.harness import REPO, RESULTS, VIDEOS, header, write_page
from streamlens.pictures import YuvPicture, i420_bytes, thumbnail_step, to_bgr
from streamlens.sources.file import FileSource

VIDEO = VIDEOS
CLIPS = [REPO / "samples" / "traffic.mp4", VIDEO / "highway_720p30.mp4", VIDEO / "highway_1080p30.mp4"]
MODES = ("thread", "process")
KINDS = ("none", "bgr", "engine")
ENGINE_STREAMS = 2
ENGINE_QUEUE = 8


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _worker_cpu_s(name: str) -> float:
    """CPU seconds of the decode worker of stream `name` so far, every thread it had."""
    (worker,) = [p for p in multiprocessing.active_children() if p.name == f"streamlens-decode-{name}"]
    with open(f"/proc/{worker.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _spin(turns: int) -> int:
    """Python work that holds the GIL: `turns` turns of a loop."""
    total = 0
    for k in range(turns):
        total += k & 7
    return total


def _turns_for(ms: float) -> int:
    """Loop turns of `_spin` that take about `ms` milliseconds of CPU here, now."""
    turns = 100_000
    started = time.process_time()
    _spin(turns)
    return max(1, int(turns * ms / 1000.0 / max(time.process_time() - started, 1e-6)))


def _stream(name: str, path: Path, mode: str, each) -> dict:
    """Iterate `path`'s frames in `mode`, calling `each(frame)`; frames and worker CPU seconds."""
    source = FileSource(name, path, decode=mode)
    last = source.declared_frames - 1
    frames, worker_s = 0, 0.0
    for frame in source.frames(threading.Event()):
        frames += 1
        each(frame)
        if mode == "process" and frame.index == last:
            worker_s = _worker_cpu_s(name)  # everything is decoded: what is left is its goodbye
    if mode == "process" and not worker_s:
        raise SystemExit(f"{path.name}: {frames} frames, but it declares {last + 1}: the worker's CPU was not read")
    return {"frames": frames, "worker_s": worker_s}


def run_once(path: Path, mode: str, kind: str, turns: int) -> dict:
    """One run: CPU seconds (this process, workers), wall seconds and frames."""
    started_cpu, started = _cpu_s(), time.perf_counter()
    if kind != "engine":
        result = _stream("bench", path, mode, (lambda frame: frame.image) if kind == "bgr" else (lambda frame: None))
    else:
        frames: queue.Queue = queue.Queue(ENGINE_QUEUE)
        results: list[dict] = []

        def source(k: int) -> None:
            results.append(_stream(f"bench-{k}", path, mode, frames.put))
            frames.put(None)

        threads = [threading.Thread(target=source, args=(k,)) for k in range(ENGINE_STREAMS)]
        for t in threads:
            t.start()
        ended = 0
        while ended < ENGINE_STREAMS:
            if frames.get() is None:
                ended += 1
            else:
                _spin(turns)
        for t in threads:
            t.join()
        result = {"frames": sum(r["frames"] for r in results), "worker_s": sum(r["worker_s"] for r in results)}
    return {**result, "owner_s": _cpu_s() - started_cpu, "wall_s": time.perf_counter() - started}


def conversions(path: Path, repeats: int) -> dict[str, str]:
    """CPU milliseconds per frame of each way to convert to BGR (see the module), medians, and how
    far OpenCV's pixels are from PyAV's: table cells."""
    import cv2

    with av.open(str(path)) as container:
        pictures = [p for _, p in zip(range(40), container.decode(video=0))]
    planes = []
    for picture in pictures:
        data = np.empty(i420_bytes(picture.width, picture.height), np.uint8)
        YuvPicture.pack(picture, data)
        planes.append(YuvPicture(data, picture.width, picture.height, picture.format.name, picture.colorspace,
                                 picture.color_range))
    rows = pictures[0].height * 3 // 2
    pool = cv2.getNumThreads()

    def opencv(picture: YuvPicture) -> np.ndarray:
        return cv2.cvtColor(picture.data.reshape(rows, picture.width), cv2.COLOR_YUV2BGR_I420)

    # name: (what is converted, how, OpenCV's threads meanwhile)
    ways = {"PyAV, decoder's picture": (pictures, to_bgr, pool), "PyAV, YuvPicture": (planes, to_bgr, pool),
            "OpenCV, 1 thread": (planes, opencv, 1), f"OpenCV, {pool} threads": (planes, opencv, pool)}
    spent: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats):
        for name, (items, convert, threads) in ways.items():
            cv2.setNumThreads(threads)
            started = _cpu_s()
            for item in items:
                convert(item)
            spent[name].append((_cpu_s() - started) / len(items) * 1000.0)
    cv2.setNumThreads(pool)
    costs = {f"{name}, ms/frame": f"{statistics.median(times):.2f}" for name, times in spent.items()}
    differences = [np.abs(opencv(p).astype(np.int16) - to_bgr(p)) for p in planes]
    costs["OpenCV against PyAV: max, mean abs difference"] = (f"{max(int(d.max()) for d in differences)}, "
                                                            f"{np.mean([d.mean() for d in differences]):.2f}")
    return costs


def _per_frame(runs: list[dict], *keys: str) -> float:
    """The median over `runs` of the sum of `keys`, in milliseconds per frame."""
    return statistics.median(sum(r[k] for k in keys) / r["frames"] * 1000.0 for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--engine-ms", type=float, default=5.0, help="the engine thread's Python work per frame")
    parser.add_argument("--out", type=Path, default=RESULTS / "decode.md")
    args = parser.parse_args()
    clips = [c for c in CLIPS if c.is_file()]
    turns = _turns_for(args.engine_ms)
    run_once(clips[0], "process", "none", turns)  # start the forkserver: once per program, not per stream
    results: dict[tuple[str, str, str], list[dict]] = {}
    for repeat in range(args.repeats):
        for clip in clips:
            for kind in KINDS:
                for mode in (MODES if repeat % 2 == 0 else MODES[::-1]):
                    r = run_once(clip, mode, kind, turns)
                    results.setdefault((clip.name, kind, mode), []).append(r)
                    print(f"#{repeat + 1} {clip.name:>20} {kind:>6} {mode:>7}: {r['frames']} frames, this process "
                          f"{r['owner_s']:.2f} s, workers {r['worker_s']:.2f} s, wall {r['wall_s']:.2f} s", flush=True)
    rows = ["| clip | run | decode | this process ms/frame | workers ms/frame | CPU ms/frame | CPU vs thread | "
            "wall ms/frame | wall vs thread |", "|---|---|---|---|---|---|---|---|---|"]
    for clip in clips:
        for kind in KINDS:
            base = results[(clip.name, kind, "thread")]
            for mode in MODES:
                runs = results[(clip.name, kind, mode)]
                cpu = _per_frame(runs, "owner_s", "worker_s")
                wall = _per_frame(runs, "wall_s")
                rows.append(f"| {clip.name} | {kind} | {mode} | {_per_frame(runs, 'owner_s'):.2f} | "
                            f"{_per_frame(runs, 'worker_s'):.2f} | {cpu:.2f} | "
                            f"{cpu / _per_frame(base, 'owner_s', 'worker_s'):.2f} | {wall:.2f} | "
                            f"{wall / _per_frame(base, 'wall_s'):.2f} |")
    crossing = ["| clip | size | I420 + grey sample, bytes/frame | BGR, bytes/frame | ratio |", "|---|---|---|---|---|"]
    for clip in clips:
        with av.open(str(clip)) as container:
            width, height = container.streams.video[0].codec_context.width, container.streams.video[0].codec_context.height
        step = thumbnail_step(width)
        yuv = i420_bytes(width, height) + -(-height // step) * -(-width // step)
        crossing.append(f"| {clip.name} | {width}x{height} | {yuv} | {width * height * 3} | "
                        f"{yuv / (width * height * 3):.3f} |")
    converting = None
    for clip in clips:
        costs = conversions(clip, args.repeats)
        if converting is None:
            converting = ["| clip | " + " | ".join(costs) + " |", "|---|" + "---|" * len(costs)]
        converting.append(f"| {clip.name} | " + " | ".join(costs.values()) + " |")
    text = "\n".join([
        header("Decoding a file in a worker process, against on the thread that reads it"),
        f"{args.repeats} alternating repeats, medians; `engine`: "
        f"{ENGINE_STREAMS} streams and {args.engine_ms:g} ms of GIL-holding Python per frame.", "",
        *rows, "", "What crosses a worker's ring per frame (a slot also keeps room for motion vectors when "
        "they are asked for):", "", *crossing, "",
        "Converting one frame to BGR, CPU per frame:", "", *converting, ""])
    write_page(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
