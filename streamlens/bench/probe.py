"""What the machine can do without the engine: the decode-only limit, and what the machine is.

`decode_limit(video, seconds, export_mvs)` starts one worker process per CPU core; each decodes the
video on one thread (FFmpeg's own threads off), converts every frame to a BGR ndarray, and, when
the pipeline's tracker uses motion vectors, asks the decoder for them and reads them as the sources
do. Each loops over the file for `seconds` after all workers are ready. Their frames per second,
summed, divided by the video's frame rate, is the number of real-time streams that decoding alone
could carry on this machine when every frame's pixels are read. (The pipeline converts only the
frames whose pixels something reads, keyframes and the frames of a video sink; decoding without
any conversion is about a third cheaper, 3.5 against 5 ms a 720p frame here.)

`machine()` and `versions()` describe where a result was measured: the CPU's model and the flags
that decide which kernels the detector's runtime takes (`CPU_FLAGS`: AVX2, AVX-512, VNNI, BF16,
AMX), cores, memory; the versions of the packages that matter. tools/ says them on every results
page through `streamlens.bench.harness`.

Example:
    >>> limit = decode_limit("samples/traffic.mp4", seconds=1, workers=1)   # doctest: +SKIP
    >>> limit["fps"] > 0 and limit["streams"] > 0                          # doctest: +SKIP
    True
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import queue
import sys
import threading
import time
import traceback
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..cpu import CPU_FLAGS, cpu_flags  # noqa: F401 - named here too: the pages import them from the bench
from ..errors import StreamlensError

#: the distributions whose versions a bench result records (the first one installed of each group)
PACKAGES = (("streamlens",), ("av",), ("numpy",), ("onnxruntime", "onnxruntime-gpu"), ("torch",),
            ("ultralytics",), ("opencv-python", "opencv-python-headless", "opencv-contrib-python"),
            ("pyzmq",), ("msgpack",), ("supervision",))


def video_info(path: str) -> dict:
    """The video's frame rate, frame count, size and codec (raises av's error if unreadable)."""
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate
        return {"path": path, "fps": float(rate) if rate else None, "frames": stream.frames or None,
                "width": stream.codec_context.width, "height": stream.codec_context.height,
                "codec": stream.codec_context.name}


def _decode_worker(path: str, seconds: float, export_mvs: bool, ready, results) -> None:
    """One worker: open the file and decode one frame (warm), wait for the others, then decode,
    looping over the file, for `seconds`; put `{"frames", "seconds"}` (or `{"error"}`) on `results`."""
    import av

    from ..pictures import to_bgr
    from ..sources.motion_vectors import ReferenceDistance, frame_motion_vectors

    def opened():
        container = av.open(path)
        stream = container.streams.video[0]
        stream.thread_type = "NONE"
        stream.codec_context.thread_count = 1
        if export_mvs:
            stream.codec_context.options = {"flags2": "+export_mvs"}
        return container, stream

    try:
        container, stream = opened()  # warm: the first frame, in a container of its own
        for _ in container.decode(stream):
            break
        container.close()
        container, stream = opened()
        ready.wait(120)
        frames, index = 0, 0
        started = time.perf_counter()
        end = started + seconds
        while time.perf_counter() < end:
            anchors, decoded = ReferenceDistance(), 0
            for frame in container.decode(stream):
                distance = anchors.step(frame.pict_type, index) if export_mvs else 1
                to_bgr(frame, threads=1)  # as the pipeline converts, on one thread: one process per core
                if export_mvs:
                    frame_motion_vectors(frame, distance)
                index += 1
                decoded += 1
                if time.perf_counter() >= end:
                    break
            frames += decoded
            if decoded == 0:
                break
            container.seek(0)
        elapsed = time.perf_counter() - started
        container.close()
        results.put({"frames": frames, "seconds": elapsed})
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line, with where it was raised
        where = traceback.extract_tb(e.__traceback__)[-1]
        results.put({"error": f"{type(e).__name__}: {e} ({Path(where.filename).name}:{where.lineno})"})


def decode_limit(video: str, seconds: float, export_mvs: bool = False, workers: int | None = None) -> dict:
    """The decode-only limit of this machine for `video` (see the module docs): `fps` (frames a
    second, all workers), `streams` (fps / the video's frame rate), and how it was measured."""
    workers = workers or os.cpu_count() or 1
    fps_video = video_info(video)["fps"] or 30.0
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(workers + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=_decode_worker, args=(video, seconds, export_mvs, ready, results), daemon=True)
             for _ in range(workers)]
    for p in procs:
        p.start()
    try:
        ready.wait(120)
        got = [results.get(timeout=seconds + 120) for _ in procs]
    except (queue.Empty, threading.BrokenBarrierError):
        raise StreamlensError("decode-only limit: a decoding worker did not start or did not report") from None
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    errors = [g["error"] for g in got if "error" in g]
    if errors:
        raise StreamlensError(f"decode-only limit: a worker failed: {errors[0]}")
    fps = sum(g["frames"] / g["seconds"] for g in got if g["seconds"] > 0)
    return {"workers": workers, "seconds": seconds, "threads_per_worker": 1, "export_mvs": export_mvs,
            "frames": sum(g["frames"] for g in got), "fps": round(fps, 1), "video_fps": fps_video,
            "streams": round(fps / fps_video, 2)}


def machine() -> dict:
    """CPU model, its flags that matter (`cpu_flags()`), cores and memory (GiB) of this machine."""
    cpu = platform.processor() or platform.machine()
    memory_gib = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "flags": cpu_flags(), "cores": os.cpu_count(), "usable_cores": usable,
            "memory_gib": memory_gib, "system": f"{platform.system()} {platform.release()}"}


def versions() -> dict:
    """Python's version and those of the installed packages that matter here (not imported)."""
    out = {"python": sys.version.split()[0]}
    for group in PACKAGES:
        for name in group:
            try:
                out[group[0]] = version(name) if name == group[0] else f"{version(name)} ({name})"
                break
            except PackageNotFoundError:
                continue
    return out


__all__ = ["CPU_FLAGS", "cpu_flags", "decode_limit", "machine", "versions", "video_info"]
