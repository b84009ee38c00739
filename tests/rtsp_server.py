"""The tests' RTSP servers: they live in streamlens/testing/rtsp_server.py, which the benchmarks in
tools/ import too; this name stays for the tests that import it (`from .rtsp_server import ...`)."""

from streamlens.testing.rtsp_server import (GST_PYTHON, GST_SCRIPT, PERL_SERVER, ChildProcess,  # noqa: F401
                                            GstRtspServer, PerlRtspServer, annexb_copy, die_with_parent,
                                            ffmpeg_missing, free_port, gst_missing, perl_missing, rtsp_ready)
