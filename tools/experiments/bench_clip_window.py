"""What a stream's packet window for `analytics.clips` holds: bytes and Python memory, for a 720p
camera at 2 Mbit/s with `pre_s: 5` (issue 28's target: at most 2 MB).

The shared 720p clip is encoded once with FFmpeg as a camera would send it (H.264, 2 Mbit/s, a key
frame every 1 or 2 s), then its packets, demuxed with PyAV, go through `PacketWindow` as a reader
adds them (`keep_s` = `pre_s` + a live source's margin, as `clips_spec` makes it). Reported per GOP:
the most bytes the window held, the most packets, and the Python memory it took at its largest
(tracemalloc: the packets' copies and the bookkeeping). Bytes, not time: the machine's load does not
change them. A one-off experiment (issue 28): it made tools/results/clip_window.md.

    python tools/experiments/bench_clip_window.py        # writes tools/results/clip_window.md
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import av

from streamlens.bench.harness import RESULTS, VIDEOS, header, need, write_page
from streamlens.sources import CLIP_MARGIN_S
from streamlens.sources.clips import MAX_MARGIN_S, Packet, PacketWindow

CLIP = VIDEOS / "highway_720p30.mp4"
BITRATE = "2M"
PRE_S = 5.0


def camera_copy(folder: Path, gop_s: float) -> Path:
    """The clip as a 2 Mbit/s camera with a key frame every `gop_s` seconds, looped to 60 s."""
    out = folder / f"cam_gop{gop_s:g}.mp4"
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-stream_loop", "-1", "-i", str(CLIP), "-t", "60",
                    "-an", "-c:v", "libx264", "-preset", "veryfast", "-b:v", BITRATE, "-maxrate", BITRATE,
                    "-bufsize", "4M", "-g", str(round(30 * gop_s)), "-keyint_min", str(round(30 * gop_s)),
                    "-sc_threshold", "0", str(out)], check=True)
    return out


def measure(path: Path) -> dict:
    window = PacketWindow(PRE_S + CLIP_MARGIN_S)
    most_bytes = most_packets = 0
    payload = 0
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    most_memory = 0
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        tb = float(stream.time_base)
        for packet in container.demux(stream):
            if packet.size == 0 or packet.pts is None:
                continue
            payload += packet.size
            window.add(Packet(bytes(packet), packet.pts, packet.dts, bool(packet.is_keyframe), packet.pts * tb))
            if window.bytes > most_bytes:
                most_bytes, most_packets = window.bytes, len(window.packets)
                most_memory = max(most_memory, tracemalloc.get_traced_memory()[0] - base)
        seconds = float(stream.duration * tb) if stream.duration else 60.0
    tracemalloc.stop()
    return {"bytes": most_bytes, "packets": most_packets, "memory": most_memory,
            "mbit_s": payload * 8 / seconds / 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS / "clip_window.md")
    args = parser.parse_args()
    need(CLIP)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for gop_s in (1.0, 2.0, 4.0):
            found = measure(camera_copy(Path(folder), gop_s))
            rows.append(f"| {gop_s:g} s | {found['mbit_s']:.2f} | {found['packets']} | {found['bytes'] / 1e6:.2f} | "
                        f"{found['memory'] / 1e6:.2f} |")
    text = header("The packet window of `analytics.clips`: what one camera holds", more=[f"PyAV {av.__version__}"])
    text += f"""
`{CLIP.name}` (1280x720, 30 fps) encoded by FFmpeg as a camera sends it: H.264 at {BITRATE}bit/s
(`-b:v {BITRATE} -maxrate {BITRATE}`), a key frame every 1, 2 or 4 s, 60 s; its packets through
`PacketWindow` with `pre_s: {PRE_S:g}` (a live source's window keeps `pre_s` + {CLIP_MARGIN_S:g} s, the
margin for the event's way back from the engine, and back to the key frame before).
Target (issue 28): at most 2 MB per 720p camera at 2 Mbit/s with `pre_s: 5`.

| key frame every | Mbit/s delivered | most packets held | most bytes held (MB) | Python memory at most (MB) |
|---|---|---|---|---|
{chr(10).join(rows)}

Bytes and memory, not time: the same on a loaded machine. The window holds at most `pre_s` +
{CLIP_MARGIN_S:g} s plus one GOP of packets, so a longer GOP costs more in proportion (the key frame at
or before `pts - pre_s` must be kept); `MAX_WINDOW_BYTES` (64 MB) bounds it whatever the camera
sends. An event that comes back later than the margin widens it to twice its lag, up to
{MAX_MARGIN_S:g} s (`ClipRecorder.request`); on a machine that keeps up it never does
(`tests/test_clips.py` measured lags of -0.30 to +0.17 s with `pre_s: 2` on a camera and a live file).
"""
    write_page(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
