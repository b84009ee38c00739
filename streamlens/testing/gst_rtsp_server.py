"""A small RTSP server for tests and tools, on GStreamer's RTSP server library (Debian:
gir1.2-gst-rtsp-server-1.0).

Run by Debian's own interpreter (`/usr/bin/python3`, which has python3-gi), not the project's: each
mount re-serves an H.264 RTP stream that arrives on a local UDP port (an `ffmpeg -re ... -f rtp`
publisher sends it there), so one publisher keeps running while the server is killed and restarted.
The stream must carry SPS/PPS before each keyframe (rtsp_server.annexb_copy makes such a copy): the
server learns them from the stream, for its SDP. Elements used: udpsrc, rtpjitterbuffer, rtph264depay,
rtph264pay, all in gstreamer1.0-plugins-good.
The server speaks RTSP over TCP (interleaved) and over UDP. It prints `ready PORT` once it listens.
It is a script, never imported by the engine: `gi` is imported in `main()`, so that the project's
own interpreter, which has no python3-gi, can still import this file (pytest's doctest collection).

    /usr/bin/python3 streamlens/testing/gst_rtsp_server.py --port 0 --mount cam1=40001 --mount cam2=40002
    ready 38411        # rtsp://127.0.0.1:38411/cam1 now serves what arrives on udp://127.0.0.1:40001
"""

import argparse
import signal
import sys
import threading

PIPELINE = ("( udpsrc address=127.0.0.1 port={port} caps=\"application/x-rtp,media=video,"
            "encoding-name=H264,clock-rate=90000,payload=96\" ! rtpjitterbuffer latency=50 "
            "! rtph264depay ! rtph264pay name=pay0 pt=96 config-interval=-1 )")


#: tries to prepare a mount's media before the server gives up
PREPARE_TRIES = 3


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0, help="RTSP port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--mount", action="append", default=[], help="NAME=UDP_PORT")
    args = parser.parse_args()
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtsp", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtsp, GstRtspServer

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    mounts = server.get_mount_points()
    factories = {}
    for spec in args.mount:
        name, udp_port = spec.split("=", 1)
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(PIPELINE.format(port=int(udp_port)))
        factory.set_shared(True)
        mounts.add_factory(f"/{name}", factory)
        factories[name] = factory
    if server.attach(None) == 0:
        print(f"cannot listen on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
        return 1
    loop = GLib.MainLoop()
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGINT, loop.quit)
    kept = []

    def prepare_then_announce() -> None:
        # Like a camera, serve only once the stream runs: prepare each mount's (shared) media now,
        # which waits for its first keyframe (the main loop must run meanwhile), and keep it prepared,
        # so that a client's DESCRIBE is answered at once, however often clients come and go.
        for name, factory in factories.items():
            _, url = GstRtsp.RTSPUrl.parse(f"rtsp://127.0.0.1:{server.get_bound_port()}/{name}")
            # on a loaded machine a prepare can give up before the publisher's first keyframe
            # comes: try again
            for _ in range(PREPARE_TRIES):
                media = factory.construct(url)
                if media is not None and media.prepare(None):
                    break
            else:
                print(f"cannot prepare /{name}: is its publisher sending?", file=sys.stderr, flush=True)
                GLib.idle_add(loop.quit)
                return
            kept.append(media)
        print(f"ready {server.get_bound_port()}", flush=True)

    threading.Thread(target=prepare_then_announce, daemon=True).start()
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
