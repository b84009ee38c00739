"""What decoding one RTSP camera costs this host, with nothing of streamlens around it: PyAV reading
one mount of GStreamer's RTSP server over TCP (the clip looped by an `ffmpeg -re` publisher) for
`--seconds`, in four ways: decoded; decoded with the motion vectors exported (the `mv` tracker's
input); decoded with the loop filter skipped; demuxed only. Prints CPU per frame and per cent of a
core, the figures tools/results/cameras.md quotes: a one-off experiment, which prints them under a
line naming the machine.

Run: python tools/experiments/bench_rtsp_decode.py [--clip PATH] [--seconds 8]
Needs ffmpeg and Debian's GStreamer RTSP server (see streamlens/testing/rtsp_server.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import av

from streamlens.bench.harness import VIDEOS, command_line, machine_line, need
from streamlens.testing.rtsp_server import GstRtspServer, annexb_copy, gst_missing

WAYS = [("decoded", {}), ("decoded, motion vectors", {"flags2": "+export_mvs"}),
        ("decoded, loop filter skipped", {"skip_loop_filter": "all"}), ("demuxed only", None)]


def measure(url: str, codec_options: dict | None, seconds: float) -> tuple[float, float]:
    """(frames a second, CPU seconds a frame) over `seconds`, after the first 30 frames."""
    container = av.open(url, options={"rtsp_transport": "tcp"})
    try:
        stream = container.streams.video[0]
        stream.thread_type = "SLICE"  # as the decode worker does
        if codec_options:
            stream.codec_context.options = codec_options
        frames, started = 0, None
        for packet in container.demux(stream):
            if codec_options is None:
                frames += packet.pts is not None
            else:
                frames += len(packet.decode())
            if frames >= 30 and started is None:
                started, cpu0, first = time.monotonic(), time.process_time(), frames
            if started is not None and time.monotonic() - started > seconds:
                break
        wall, cpu = time.monotonic() - started, time.process_time() - cpu0
        return (frames - first) / wall, cpu / (frames - first)
    finally:
        container.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clip", type=Path, default=VIDEOS / "highway_720p30.mp4")
    p.add_argument("--seconds", type=float, default=8.0)
    args = p.parse_args()
    need(args.clip)
    reason = gst_missing()
    if reason:
        print(f"bench_rtsp_decode: {reason}", file=sys.stderr)
        return 2
    print(f"{command_line()}\nmachine: {machine_line()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        media = annexb_copy(args.clip, Path(tmp))
        with GstRtspServer({"cam1": media}, Path(tmp)) as server:
            for name, options in WAYS:
                fps, cpu = measure(server.url("cam1"), options, args.seconds)
                print(f"{name:30s} {fps:5.1f} fps  {cpu * 1000:5.2f} ms CPU a frame  {cpu * fps * 100:5.1f}% of a core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
