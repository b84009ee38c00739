"""An RTSP server that takes published streams (ANNOUNCE and RECORD) and serves them to players, for
tests and tools, on GStreamer's RTSP server library (Debian: gir1.2-gst-rtsp-server-1.0), as
MediaMTX would but from Debian's packages.

Run by Debian's own interpreter (`/usr/bin/python3`, which has python3-gi), not the project's. Two
servers in one process: publishers send to `rtsp://127.0.0.1:PORT/NAME` (a media factory in record
mode: rtph264depay, then rtph264pay with SPS/PPS before each keyframe, to a local UDP port), players
read `rtsp://127.0.0.1:PLAY_PORT/NAME` (a shared media: udpsrc on that UDP port, re-payloaded), over
TCP or UDP. A player that comes before the publisher waits for its first keyframe (DESCRIBE is
answered once the SPS/PPS are known). Elements used: rtph264depay, rtph264pay, udpsink, udpsrc,
rtpjitterbuffer (gstreamer1.0-plugins-good). It prints `ready PORT PLAY_PORT` once both listen.
`gi` is imported in `main()`, so that the project's own interpreter can import this file.

    /usr/bin/python3 streamlens/testing/gst_record_server.py --port 0 --play-port 0 --mount cam1=40001
    ready 38411 38413     # publish to rtsp://127.0.0.1:38411/cam1, play rtsp://127.0.0.1:38413/cam1
"""

import argparse
import signal
import sys

RECORD = ("( rtph264depay name=depay0 ! rtph264pay pt=96 config-interval=-1 "
          "! udpsink host=127.0.0.1 port={port} sync=false async=false )")
PLAY = ("( udpsrc address=127.0.0.1 port={port} caps=\"application/x-rtp,media=video,"
        "encoding-name=H264,clock-rate=90000,payload=96\" ! rtpjitterbuffer latency=50 "
        "! rtph264depay ! rtph264pay name=pay0 pt=96 config-interval=-1 )")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0, help="the publishers' RTSP port on 127.0.0.1 (0: any)")
    parser.add_argument("--play-port", type=int, default=0, help="the players' RTSP port on 127.0.0.1 (0: any)")
    parser.add_argument("--mount", action="append", default=[], help="NAME=UDP_PORT (the relay between them)")
    args = parser.parse_args()
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    Gst.init(None)
    record, play = GstRtspServer.RTSPServer(), GstRtspServer.RTSPServer()
    for server, port in ((record, args.port), (play, args.play_port)):
        server.set_address("127.0.0.1")
        server.set_service(str(port))
    for spec in args.mount:
        name, udp_port = spec.split("=", 1)
        taking = GstRtspServer.RTSPMediaFactory()
        taking.set_launch(RECORD.format(port=int(udp_port)))
        taking.set_transport_mode(GstRtspServer.RTSPTransportMode.RECORD)
        taking.set_latency(50)
        record.get_mount_points().add_factory(f"/{name}", taking)
        serving = GstRtspServer.RTSPMediaFactory()
        serving.set_launch(PLAY.format(port=int(udp_port)))
        serving.set_shared(True)
        play.get_mount_points().add_factory(f"/{name}", serving)
    for server, port in ((record, args.port), (play, args.play_port)):
        if server.attach(None) == 0:
            print(f"cannot listen on 127.0.0.1:{port}", file=sys.stderr, flush=True)
            return 1
    loop = GLib.MainLoop()
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGINT, loop.quit)
    print(f"ready {record.get_bound_port()} {play.get_bound_port()}", flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
