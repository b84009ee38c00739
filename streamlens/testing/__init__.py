"""Test support that the tests and the benchmarks share: real servers and small models built offline.

- `rtsp_server`: GStreamer's and rtsp-server-perl's RTSP servers fed by `ffmpeg -re` publishers
  (`GstRtspServer`, `PerlRtspServer`), `free_port`, `annexb_copy`, `ChildProcess`;
  `gst_rtsp_server` is the script Debian's /usr/bin/python3 runs for the first (python3-gi);
- `rtsp_record`: GStreamer's RTSP server taking published streams (RECORD) and serving them to
  players (`RecordServer`, for the rtsp sink); `gst_record_server` is its script;
- `mosquitto`: a Mosquitto broker and a recording paho subscriber; `redis_server`: a Redis server;
- `http_flood`: slow HTTP clients (issue 25's attack);
- `sam_models`, `cell_detector`, `colour_model`: SAM-format, detector and classifier models with
  known answers, built here (nothing downloaded).

Why here and not in tests/: the benchmarks in tools/ are scripts (`python tools/bench_x.py`), for
which tests/ is not importable without editing `sys.path`; the package is installed (editable), so
tests and tools both import `streamlens.testing`. The old `tests/<module>.py` names re-export these
modules, so that `from .rtsp_server import free_port` in a test keeps working. Nothing in the engine
imports this package (tests/test_structure.py checks it), and nothing here imports pytest: a missing
server is an error that says what to install (`gst_missing()`, `redis_missing()`,
`mosquitto_missing()`), which the tests turn into a skip.
"""
