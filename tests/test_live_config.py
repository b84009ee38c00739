"""The live-source keys of the pipeline file, and what `build_source` makes of a camera URL."""

from __future__ import annotations

import time

import pytest

from streamlens.config import parse_pipeline
from streamlens.errors import ConfigError
from streamlens.sources import build_source
from streamlens.sources.live import LiveSource

from .conftest import REPO

SAMPLE = REPO / "samples" / "traffic.mp4"


def _parse(sources: list, env: dict | None = None):
    return parse_pipeline({"sources": sources, "detector": {"backend": "motion"}}, REPO / "p.yaml", "p.yaml",
                          env or {})


def _problems(sources: list, env: dict | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        _parse(sources, env)
    return info.value.problems


def test_live_keys_are_read_with_their_defaults():
    cfg = _parse([{"uri": "rtsp://u:${PW}@cam/1", "transport": "udp", "timeout_s": 2, "stall_s": 3,
                   "backoff_initial_s": 0.2, "backoff_max_s": 8, "max_staleness_ms": 500, "decode": "thread"},
                  {"uri": "http://cam/live.m3u8"}], env={"PW": "pw"})
    first, second = cfg.sources
    assert (first.uri, first.transport, first.timeout_s, first.stall_s) == ("rtsp://u:pw@cam/1", "udp", 2.0, 3.0)
    assert (first.backoff_initial_s, first.backoff_max_s, first.max_staleness_ms, first.decode) == (0.2, 8.0, 500.0,
                                                                                                     "thread")
    assert first.display_uri == "rtsp://***@cam/1" and first.live
    assert (second.transport, second.timeout_s, second.stall_s, second.backoff_initial_s, second.backoff_max_s,
            second.max_staleness_ms, second.decode) == ("tcp", 5.0, 5.0, 0.5, 5.0, None, "process")


def test_live_key_mistakes_are_one_line_each_and_never_show_a_password():
    problems = _problems([
        {"uri": str(SAMPLE), "transport": "tcp", "stall_s": 2},
        {"uri": "http://cam/live.m3u8", "transport": "udp"},
        {"uri": "foo://admin:hunter2@cam/1"},
        {"uri": "rtsp://cam/1", "backoff_initial_s": 2, "backoff_max_s": 1, "decode": "gpu", "timeout_s": 0},
        {"uri": str(SAMPLE), "max_staleness_ms": 100},
    ])
    assert problems == [
        "p.yaml: sources[0].transport: only for camera URLs and devices (rtsp://, http://, /dev/videoN, ...)",
        "p.yaml: sources[0].stall_s: only for camera URLs and devices (rtsp://, http://, /dev/videoN, ...)",
        "p.yaml: sources[1].transport: only for rtsp:// and rtsps:// sources",
        "p.yaml: sources[2].uri: unsupported URL scheme 'foo' in foo://***@cam/1 (one of: rtsp, rtsps, http, "
        "https, rtmp, rtmps, rtmpt, rtmpts, udp, tcp, srt, rtp)",
        "p.yaml: sources[3].timeout_s: must be >= 0.1, got 0",
        "p.yaml: sources[3].backoff_max_s: must be >= backoff_initial_s (2)",
        "p.yaml: sources[3].decode: unknown 'gpu' (process, thread)",
        "p.yaml: sources[4].max_staleness_ms: only for live sources (cameras, or files with live: true)",
    ]
    assert not any("hunter2" in line for line in problems)


def test_a_camera_url_becomes_a_live_source_without_connecting():
    cfg = _parse([{"name": "door", "uri": "rtsp://admin:pw@192.0.2.1:554/s1", "transport": "udp",
                   "timeout_s": 60}])
    started = time.monotonic()
    source = build_source(cfg.sources[0])
    assert time.monotonic() - started < 30  # an unreachable camera never delays the build by its timeout
    assert isinstance(source, LiveSource) and source.state == "connecting"
    assert source.spec.options["rtsp_transport"] == "udp" and source.spec.options["timeout"] == "60000000"
    assert source.display_uri == "rtsp://***@192.0.2.1:554/s1" and source.total_frames is None
    source.close()


@pytest.mark.parametrize("per_core, live, expected", [(5, True, True), (4, True, False), (5, False, False)])
def test_fast_decode_is_on_by_default_where_live_streams_fill_the_cores(monkeypatch, per_core, live, expected):
    """Unset, `fast_decode` is on for live sources when the run has at least 5 live streams per
    usable core (decoding then takes most of the CPU: issue 47), off below that and for files read
    as files; what the file says wins, and the key stays as the user wrote it (a bench copy of the
    source resolves it for its own run)."""
    import streamlens.cpu

    monkeypatch.setattr(streamlens.cpu, "usable_cores", lambda: 2)
    sources = [{"name": f"c{i}", "uri": str(REPO / "samples" / "traffic.mp4"), "live": live} for i in range(2 * per_core)]
    sources.append({"name": "mine", "uri": str(REPO / "samples" / "traffic.mp4"), "live": live, "fast_decode": False})
    config = parse_pipeline({"sources": sources, "detector": {"backend": "motion"}}, REPO / "p.yaml")
    assert [s.fast_decode for s in config.sources] == [expected] * (2 * per_core) + [False]
    assert "fast_decode" not in config.sources[0].model_fields_set


def test_a_stream_added_while_running_takes_fast_decode_by_the_streams_then_open(monkeypatch):
    import streamlens.cpu
    from streamlens.config.added import added_source

    monkeypatch.setattr(streamlens.cpu, "usable_cores", lambda: 2)
    config = parse_pipeline({"sources": [{"name": "a", "uri": "rtsp://127.0.0.1:1/a"}],
                             "detector": {"backend": "motion"}}, REPO / "p.yaml")
    few, _ = added_source({"uri": "rtsp://127.0.0.1:1/b"}, config, {"a"})
    many, _ = added_source({"uri": "rtsp://127.0.0.1:1/c"}, config, {f"s{i}" for i in range(9)})
    assert (few.fast_decode, many.fast_decode) == (False, True)
