"""The pipeline file: the short form loads, every mistake is one line naming file and key path, and
what a run needs from the machine (files, folders, ports) is checked before it starts."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from streamlens.config import load_pipeline, preflight_problems
from streamlens.detect import build_detector
from streamlens.errors import ConfigError
from streamlens.track import build_tracker

from .conftest import DATA, REPO, streamlens


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    (tmp_path / "clip.mp4").write_bytes(b"")  # existence is all validation checks
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path: Path, env: dict | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, env=env)
    return info.value.problems


def test_design_short_form_loads_with_relative_paths(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.onnx").write_bytes(b"")
    path = write(tmp_path, """
sources:
  - name: cam1
    uri: clip.mp4
    loop: true
    max_fps: 15
  - {uri: "rtsp://user:${CAM_PASS}@10.1.1.1/s", options: {rtsp_transport: tcp}}
detector:
  backend: onnx
  model: models/m.onnx
  imgsz: 416
  conf: 0.3
  classes: [car, truck, 0]
keyframes: {interval: 5, adaptive: true, max_interval: 15}
tracker: {motion: mv}
sinks:
  - {type: jsonl, path: out/results.jsonl}
  - {type: zmq, endpoint: "tcp://127.0.0.1:5555"}
  - {type: video, path: out/annotated.mp4}
""")
    cfg = load_pipeline(path, env={"CAM_PASS": "pw"})
    file, cam = cfg.sources
    assert (file.name, file.uri, file.live, file.loop, file.max_fps) == (
        "cam1", str(tmp_path / "clip.mp4"), False, True, 15.0)
    assert (cam.name, cam.uri, cam.live, cam.options) == (
        "cam2", "rtsp://user:pw@10.1.1.1/s", True, {"rtsp_transport": "tcp"})
    assert cam.display_uri == "rtsp://***@10.1.1.1/s"
    assert cfg.detector.model == tmp_path / "models" / "m.onnx"
    assert cfg.detector.imgsz == (416, 416) and cfg.detector.classes == ["car", "truck", 0]
    assert (cfg.keyframes.interval, cfg.keyframes.adaptive) == (5, True)
    assert cfg.tracker.motion == "mv"
    assert cfg.sinks[0].options["path"] == tmp_path / "out" / "results.jsonl"
    assert cfg.sinks[1].options["endpoint"] == "tcp://127.0.0.1:5555"


def test_env_interpolation_default_and_missing(tmp_path):
    path = write(tmp_path, "sources: [{uri: '${CLIP:-clip.mp4}'}]\ndetector: {backend: '${BACKEND}'}\n")
    assert load_pipeline(path, env={"BACKEND": "motion"}).sources[0].uri == str(tmp_path / "clip.mp4")
    assert problems(path, env={}) == [
        f"{path}: detector.backend: environment variable BACKEND is not set",
        f"{path}: detector.backend: unknown '' (onnx, openvino, ultralytics, motion)",
    ]


@pytest.mark.parametrize("text, expected", [
    ("sources: [{uri: clip.mp4, colour: red}]\ndetector: {backend: motion}\n",
     "sources[0].colour: unknown key (expected one of: uri, name, live, loop, start_s, max_fps, options, "
     "max_staleness_ms, decode, fast_decode, max_pixels)"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: nosuch}\n",
     "detector.backend: unknown 'nosuch' (onnx, openvino, ultralytics, motion)"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nkeyframes: {interval: often}\n",
     "keyframes.interval: wrong type: expected an integer, got 'often'"),
    ("sources: [{uri: /nonexistent/x.mp4}]\ndetector: {backend: motion}\n",
     "sources[0].uri: file not found: /nonexistent/x.mp4"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: onnx, model: nope.onnx}\n",
     "detector.model: file not found: {tmp}/nope.onnx"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion, conf: 0.5}\n",
     "detector.conf: only for backend onnx, openvino or ultralytics"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nsinks: [{type: kafka}]\n",
     "sinks[0].type: unknown 'kafka' (jsonl, video, zmq, mqtt, webhook, rtsp)"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nsinks: [{type: mqtt, qos: 3}]\n",
     "sinks[0].qos: unknown 3 (0, 1, 2)"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nsinks: [{type: webhook, url: 'ftp://x'}]\n",
     "sinks[0].url: expected an http:// or https:// URL, got 'ftp://x'"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nsinks: [{type: mqtt, ca_file: ca.pem}]\n",
     "sinks[0].ca_file: only with tls: true"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nanalytics: {pixels_per_metre: 20, ground: "
     "{points: [[0, 0], [1, 0], [1, 1], [0, 1]], width_m: 3, length_m: 9}}\n",
     "analytics: pixels_per_metre and ground both give speed: keep one"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nanalytics: {ground: {points: [[0, 0], [1, 0]], "
     "width_m: 3, length_m: 9}}\n",
     "analytics.ground.points: expected four points [[x, y], ...], got [[0, 0], [1, 0]]"),
    ("sources: [{uri: clip.mp4, live: yes please}]\ndetector: {backend: motion}\n",
     "sources[0].live: wrong type: expected true or false, got 'yes please'"),
    ("sources: [{uri: clip.mp4, name: a.b}]\ndetector: {backend: motion}\n",
     "sources[0].name: 'a.b': use letters, digits, '_' and '-' only"),
    ("sources: [{uri: clip.mp4}]\n", "detector: missing"),
    ("detector: {backend: motion}\n", "sources: missing"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nsinks: [{type: zmq, endpoint: 5555}]\n",
     "sinks[0].endpoint: wrong type: expected a string, got 5555"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\ntracker: {motion: teleport}\n",
     "tracker.motion: unknown 'teleport' (kalman, flow, mv)"),
    ("sources: [{uri: clip.mp4}\n", "line 2, column 1: invalid YAML"),
])
def test_each_mistake_is_one_line_naming_file_and_key(tmp_path, text, expected):
    path = write(tmp_path, text)
    found = problems(path)
    assert len(found) == 1, found
    assert found[0].startswith(f"{path}: {expected.replace('{tmp}', str(tmp_path))}"), found


def test_several_mistakes_are_reported_together(tmp_path):
    path = write(tmp_path, """
sources: [{uri: clip.mp4, fps: 3}, {uri: missing.mp4}]
detector: {backend: motion, min_area: -1}
sinks: [{type: jsonl}]
""")
    assert problems(path) == [
        f"{path}: sources[0].fps: unknown key (expected one of: uri, name, live, loop, start_s, max_fps, options, "
        "max_staleness_ms, decode, fast_decode, max_pixels)",
        f"{path}: sources[1].uri: file not found: {tmp_path / 'missing.mp4'}",
        f"{path}: detector.min_area: must be >= 0, got -1",
        f"{path}: sinks[0].path: missing",
    ]


@pytest.mark.parametrize("text, expected", [
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nbogus: 1\n", "bogus: unknown key"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nkeyframes: {interval: x}\n",
     "keyframes.interval: wrong type"),
    ("sources: [{uri: /no/such/clip.mp4}]\ndetector: {backend: motion}\n",
     "sources[0].uri: file not found: /no/such/clip.mp4"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: nosuch}\n",
     "detector.backend: unknown 'nosuch' (onnx, openvino, ultralytics, motion)"),
])
def test_cli_reports_one_line_and_exit_2(tmp_path, text, expected):
    path = write(tmp_path, text)
    for command in ("validate", "run"):
        proc = streamlens(command, str(path))
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{path}: {expected}"), proc.stderr
        assert "Traceback" not in proc.stderr


def test_cli_missing_pipeline_file_and_debug_traceback(tmp_path):
    proc = streamlens("validate", str(tmp_path / "nope.yaml"))
    assert (proc.returncode, proc.stderr.strip()) == (2, f"{tmp_path / 'nope.yaml'}: file not found")
    proc = streamlens("validate", "--debug", str(tmp_path / "nope.yaml"))
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_shipped_pipelines_validate_from_a_clone_and_the_models_they_pull(tmp_path):
    """Every pipeline under pipelines/ runs from a clone plus `streamlens models pull` (issue 49): it
    reads no file outside the repository; one naming a cached model says the pull command until the
    model is pulled (here from the shared copy, through the mirror setting), and validates after."""
    import re

    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "STREAMLENS_MODEL_MIRROR": str(tmp_path / "mirror")}
    shipped = sorted((REPO / "pipelines").glob("*.yaml"))
    pulled: set[str] = set()
    for path in shipped:
        text = path.read_text()
        assert "shared/data" not in text, f"{path.name} reads ../shared/data, which a clone lacks"
        names = set(re.findall(r"model: models:([A-Za-z0-9_]+)", text))
        if names:
            proc = streamlens("validate", str(path), env=env)
            assert proc.returncode == 2 and "get it with `streamlens models pull " in proc.stderr, proc.stderr
        pulled |= names
    for name in sorted(pulled):
        copy = DATA / "models" / name / f"{name}.onnx"
        if not copy.is_file():
            pytest.skip(f"{copy} not found: the shipped pipelines' {name} is pulled from the shared copy here")
        (tmp_path / "mirror").mkdir(exist_ok=True)
        (tmp_path / "mirror" / copy.name).symlink_to(copy)
        proc = streamlens("models", "pull", name, env=env)
        assert proc.returncode == 0, proc.stderr
    for path in shipped:
        proc = streamlens("validate", str(path), env=env)
        assert proc.returncode == 0, proc.stderr
        assert "ok" in proc.stdout


HEAD = "sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\n"
CAMERA = "sources: [{uri: 'rtsp://cam/1', %s}]\ndetector: {backend: motion}\n"


@pytest.mark.parametrize("text, expected", [
    (HEAD + "tracker: {lost_s: 0}\n", "tracker.lost_s: must be > 0, got 0"),
    (HEAD + "tracker: {lost_s: .inf}\n", "tracker.lost_s: must be a finite number, got .inf"),
    (HEAD + "tracker: {coast_s: .nan}\n", "tracker.coast_s: must be a finite number, got .nan"),
    (HEAD + "tracker: {coast_s: -0.5}\n", "tracker.coast_s: must be >= 0, got -0.5"),
    (HEAD + "tracker: {high_score: 1.5}\n", "tracker.high_score: must be <= 1, got 1.5"),
    (HEAD + "keyframes: {interval: 2.5}\n", "keyframes.interval: wrong type: expected an integer, got 2.5"),
    (HEAD + "keyframes: {interval: 100000000000000000000}\n", "keyframes.interval: must be <= 2147483647"),
    (HEAD + "runtime: {queue_size: 100000}\n", "runtime.queue_size: must be <= 1024, got 100000"),
    (HEAD + "runtime: {queue_size: 0}\n", "runtime.queue_size: must be >= 1, got 0"),
    (HEAD + "runtime: {budget_ms: 1.0e+12}\n", "runtime.budget_ms: must be <= 86400000"),
    (HEAD + "runtime: {http: {port: 70000}}\n", "runtime.http.port: must be <= 65535, got 70000"),
    ("sources: [{uri: clip.mp4, max_fps: 0}]\ndetector: {backend: motion}\n", "sources[0].max_fps: must be > 0"),
    (CAMERA % "timeout_s: .nan", "sources[0].timeout_s: must be a finite number, got .nan"),
    (CAMERA % "stall_s: 1.0e+9", "sources[0].stall_s: must be <= 86400"),
    (CAMERA % f"backoff_max_s: {10**400}", "sources[0].backoff_max_s: must be a finite number, got 1000"),
    (CAMERA % "max_staleness_ms: 0.5", "sources[0].max_staleness_ms: must be >= 1, got 0.5"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion, max_batch: 1000}\n",
     "detector.max_batch: must be <= 256, got 1000"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion, max_wait_ms: .inf}\n",
     "detector.max_wait_ms: must be a finite number"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion, min_area: 1.5}\n",
     "detector.min_area: must be < 1, got 1.5"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion, var_threshold: 0}\n",
     "detector.var_threshold: must be > 0, got 0"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion, warmup: 0}\n", "detector.warmup: must be >= 1, got 0"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion, history: 10000000000}\n",
     "detector.history: must be <= 2147483647"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: onnx, model: clip.mp4, imgsz: 100000}\n",
     "detector.imgsz: expected an integer from 32 to 8192 or [height, width], got 100000"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: onnx, model: clip.mp4, threads: 100000}\n",
     "detector.threads: must be <= 1024, got 100000"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: onnx, model: clip.mp4, input: {std: .nan}}\n",
     "detector.input.std: expected a positive number or a list of three, got .nan"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: onnx, model: clip.mp4, input: {mean: [0, .inf, 0]}}\n",
     "detector.input.mean: expected a number or a list of three"),
    (HEAD + "sinks: [{type: zmq, endpoint: 'tcp://127.0.0.1:1', hwm: 1000000000}]\n",
     "sinks[0].hwm: must be <= 100000, got 1000000000"),
    (HEAD + "sinks: [{type: zmq, endpoint: 'tcp://127.0.0.1:1', linger_ms: 100000000000}]\n",
     "sinks[0].linger_ms: must be <= 86400000"),
    (HEAD + "sinks: [{type: zmq, endpoint: 'tcp://127.0.0.1:1', mode: push, send_timeout_s: .inf}]\n",
     "sinks[0].send_timeout_s: must be a finite number"),
    (HEAD + "sinks: [{type: video, path: out.mp4, crf: 60}]\n", "sinks[0].crf: must be <= 51, got 60"),
])
def test_every_number_is_checked_against_its_range(tmp_path, text, expected):
    path = write(tmp_path, text)
    found = problems(path)
    assert len(found) == 1, found
    assert found[0].startswith(f"{path}: {expected}"), found


def test_every_value_that_works_is_admitted(tmp_path):
    path = write(tmp_path, """
sources: [{uri: clip.mp4, max_fps: 0.0167}]
detector: {backend: motion, min_area: 0, work_width: 16, warmup: 1, max_wait_ms: 0, budget_ms: 0}
keyframes: {interval: 1000000, max_interval: 1000000}
tracker: {lost_s: 0.001, coast_s: 0}
runtime: {queue_size: 1024, http: {port: 0}}
sinks: [{type: zmq, endpoint: "tcp://127.0.0.1:*", hwm: 100000, linger_ms: 0, wait_subscribers: 0}]
""")
    cfg = load_pipeline(path)
    assert (cfg.sources[0].max_fps, cfg.tracker.lost_s, cfg.tracker.coast_s) == (0.0167, 0.001, 0.0)
    assert cfg.detector.budget_ms is None and cfg.detector.options["work_width"] == 16
    build_detector(cfg.detector).close()  # the components take them too
    build_tracker(cfg.tracker, fps=30)
    assert (cfg.keyframes.interval, cfg.runtime.queue_size, cfg.runtime.http_port) == (1000000, 1024, 0)
    (tmp_path / "m.onnx").write_bytes(b"")
    big = write(tmp_path, "sources: [{uri: clip.mp4}]\ndetector: {backend: onnx, model: m.onnx, imgsz: [2176, 3840]}\n")
    assert load_pipeline(big).detector.imgsz == (2176, 3840)


@pytest.mark.parametrize("name", ["cam.1", "cam 1", "kamera-ü", "cam1/../x", ""])  # "cam1\n": faults/test_stream_api_limits.py
def test_stream_names_are_ascii_letters_digits_underscore_and_dash(tmp_path, name):
    path = write(tmp_path, f"sources: [{{uri: clip.mp4, name: {json.dumps(name)}}}]\ndetector: {{backend: motion}}\n")
    assert problems(path) == [f"{path}: sources[0].name: {name!r}: use letters, digits, '_' and '-' only"]


def alias_bomb(levels: int = 12) -> str:
    """A 'billion laughs' file: under 1 KB, 9**levels strings once its aliases are expanded."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return HEAD + "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_its_line(tmp_path):
    path = write(tmp_path, alias_bomb())
    assert len(path.read_bytes()) < 1000
    assert problems(path) == [f"{path}: line 8, column 5: more than 100000 values here once aliases are expanded"]


def test_a_recursive_alias_is_refused_at_its_line(tmp_path):
    path = write(tmp_path, HEAD + "x: &a [*a]\n")
    assert problems(path) == [f"{path}: line 3, column 8: alias *a is inside the node it names"]


def test_aliases_that_expand_to_a_little_still_work(tmp_path):
    path = write(tmp_path, """
sources:
  - &camera {uri: "rtsp://cam/1", max_fps: 10, options: {rtsp_transport: tcp}}
  - {<<: *camera, uri: "rtsp://cam/2", max_fps: 5}
detector: {backend: motion}
""")
    first, second = load_pipeline(path).sources
    assert [(s.name, s.uri, s.max_fps, s.options) for s in (first, second)] == [
        ("cam1", "rtsp://cam/1", 10.0, {"rtsp_transport": "tcp"}),
        ("cam2", "rtsp://cam/2", 5.0, {"rtsp_transport": "tcp"})]


def test_a_file_nested_too_deep_is_refused(tmp_path):
    path = write(tmp_path, HEAD + "x: " + "[" * 5000 + "]" * 5000 + "\n")
    assert problems(path) == [f"{path}: line 3, column 67: nested more than 64 levels deep"]


def test_a_file_over_one_mib_is_refused_before_it_is_parsed(tmp_path):
    path = write(tmp_path, HEAD + "# padding\n" * 110_000)
    assert problems(path) == [f"{path}: larger than 1 MiB: not a pipeline file"]


@pytest.mark.parametrize("text, expected", [
    (alias_bomb(), "line 8, column 5: more than 100000 values"),
    (HEAD + "x: &a [*a]\n", "line 3, column 8: alias *a is inside the node it names"),
])
def test_cli_refuses_alias_tricks_in_one_line(tmp_path, text, expected):
    path = write(tmp_path, text)
    proc = streamlens("validate", str(path))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"{path}: {expected}") and proc.stderr.count("\n") == 1, proc.stderr


def test_preflight_finds_nothing_in_a_pipeline_that_can_run(tmp_path):
    path = write(tmp_path, """
sources: [{uri: clip.mp4, name: a}, {uri: clip.mp4, name: b}]
detector: {backend: motion}
runtime: {http: {port: 0}}
sinks:
  - {type: jsonl, path: out/results.jsonl}
  - {type: video, path: "out/{stream}/annotated.mp4"}
  - {type: zmq, endpoint: "tcp://127.0.0.1:*"}
  - {type: zmq, endpoint: "ipc:///tmp/streamlens-test"}
""")
    assert preflight_problems(load_pipeline(path)) == []
    assert not (tmp_path / "out").exists()  # checked, not made


def test_preflight_reports_ports_that_test_sockets_hold(tmp_path):
    with socket.socket() as plain, socket.create_server(("127.0.0.1", 0)) as reusing:
        plain.bind(("127.0.0.1", 0))  # no SO_REUSEADDR, listening
        plain.listen()
        first, second = plain.getsockname()[1], reusing.getsockname()[1]
        path = write(tmp_path, HEAD + f"runtime: {{http: {{port: {first}}}}}\n"
                     f"sinks: [{{type: zmq, endpoint: 'tcp://*:{second}'}}]\n")
        found = preflight_problems(load_pipeline(path))
    assert found == [f"{path}: runtime.http.port: cannot listen on 127.0.0.1:{first}: Address already in use",
                     f"{path}: sinks[0].endpoint: cannot listen on 0.0.0.0:{second}: Address already in use"]
    assert preflight_problems(load_pipeline(path)) == []  # closed: free again


def test_preflight_counts_a_port_in_time_wait_as_free_as_zeromq_does(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:  # SO_REUSEADDR, as ZeroMQ and http.server set
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end stays in TIME_WAIT on `port`
        client.close()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # without SO_REUSEADDR the port still looks taken
    path = write(tmp_path, HEAD + f"sinks: [{{type: zmq, endpoint: 'tcp://127.0.0.1:{port}'}}]\n")
    assert preflight_problems(load_pipeline(path)) == []


def test_preflight_reports_two_listeners_on_one_port(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    path = write(tmp_path, HEAD + f"runtime: {{http: {{port: {port}}}}}\n"
                 f"sinks: [{{type: zmq, endpoint: 'tcp://*:{port}'}},\n"
                 f"        {{type: zmq, endpoint: 'tcp://127.0.0.1:{port}'}}]\n")
    assert preflight_problems(load_pipeline(path)) == [
        f"{path}: sinks[0].endpoint: port {port} is also listened on by runtime.http.port",
        f"{path}: sinks[1].endpoint: port {port} is also listened on by runtime.http.port",
    ]


def test_preflight_reports_outputs_that_cannot_be_written(tmp_path):
    (tmp_path / "afile").write_text("")
    path = write(tmp_path, """
sources: [{uri: clip.mp4, name: a}, {uri: clip.mp4, name: b}]
detector: {backend: motion}
sinks:
  - {type: jsonl, path: afile/out.jsonl}
  - {type: video, path: clip.mp4}
  - {type: jsonl, path: out/a.jsonl}
  - {type: jsonl, path: out/../out/a.jsonl}
  - {type: video, path: "afile/{stream}/v.mp4"}
  - {type: jsonl, path: .}
""")
    a, out = tmp_path / "afile", tmp_path / "out"
    assert preflight_problems(load_pipeline(path)) == [
        f"{path}: sinks[0].path: cannot make folder {a}: {a} is a file",
        f"{path}: sinks[1].path: {tmp_path / 'clip.mp4'} is the input of sources[0]: the sink would overwrite it",
        f"{path}: sinks[3].path: {out / 'a.jsonl'} is also written by sinks[2]",
        f"{path}: sinks[4].path: cannot make folder {a / 'a'}: {a} is a file",
        f"{path}: sinks[4].path: cannot make folder {a / 'b'}: {a} is a file",
        f"{path}: sinks[5].path: is a folder: {tmp_path}",
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any folder")
def test_preflight_reports_a_folder_it_cannot_write_in(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    path = write(tmp_path, HEAD + "sinks: [{type: jsonl, path: locked/deeper/out.jsonl}]\n")
    try:
        assert preflight_problems(load_pipeline(path)) == [
            f"{path}: sinks[0].path: cannot write in folder {locked}: permission denied"]
    finally:
        locked.chmod(0o700)


def test_preflight_rechecks_inputs_that_went_away_after_loading(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"")
    path = write(tmp_path, "sources: [{uri: clip.mp4}]\ndetector: {backend: onnx, model: m.onnx}\n")
    cfg = load_pipeline(path)
    assert preflight_problems(cfg) == []
    (tmp_path / "clip.mp4").unlink()
    (tmp_path / "m.onnx").unlink()
    assert preflight_problems(cfg) == [f"{path}: sources[0].uri: file not found: {tmp_path / 'clip.mp4'}",
                                       f"{path}: detector.model: file not found: {tmp_path / 'm.onnx'} (streamlens "
                                       "never downloads models: give a local file, or models:NAME of one "
                                       "`streamlens models pull` put in the cache)"]


def test_a_names_file_is_read_with_the_same_bounds(tmp_path):
    """A class names file in YAML is bounded as a pipeline file is: the bomb is one clear line."""
    from streamlens.detect.names import read_names_file
    from streamlens.errors import DetectorError

    names = tmp_path / "names.yaml"
    names.write_text(alias_bomb())
    with pytest.raises(DetectorError, match=r"detector\.names: .*names\.yaml: line \d+, column \d+: more than"):
        read_names_file(names)


@pytest.mark.parametrize("tracker, motion", [("none", None), ("false", None), ("mv", "mv"), ("", "kalman"),
                                            ("{motion: flow}", "flow"), ("{motion: ~}", "kalman")])
def test_the_tracker_short_forms(tmp_path, tracker, motion):
    path = write(tmp_path, f"sources: [{{uri: clip.mp4}}]\ndetector: {{backend: motion}}\ntracker: {tracker}\n")
    assert load_pipeline(path).tracker.motion == motion


def test_the_shared_keyframe_schedule_is_the_default_and_min_interval_is_checked(tmp_path):
    path = write(tmp_path, "sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nkeyframes: {interval: 4}\n")
    keys = load_pipeline(path).keyframes
    assert (keys.shared, keys.min_interval) == (True, 1)
    path = write(tmp_path, "sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\n"
                           "keyframes: {interval: 4, min_interval: 5, shared: maybe}\n")
    assert problems(path) == [
        f"{path}: keyframes.shared: wrong type: expected true or false, got 'maybe'",
        f"{path}: keyframes.min_interval: must be <= keyframes.interval (4)",
    ]


def test_the_published_schema_checks_pipeline_files_as_an_editor_would():
    """`streamlens schema` is a JSON Schema that every shipped pipeline file meets and a file with a
    typo or a value of the wrong kind does not: what an editor (yaml-language-server) would show."""
    import jsonschema
    import yaml

    proc = streamlens("schema")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    check = jsonschema.Draft202012Validator(schema)
    shipped = sorted((REPO / "pipelines").glob("*.yaml"))
    assert shipped
    for path in shipped:
        assert list(check.iter_errors(yaml.safe_load(path.read_text()))) == [], path
    short = {"sources": [{"uri": "clip.mp4"}], "detector": {"backend": "motion"}, "tracker": "mv",
             "detector_typo": 1}
    assert [e.validator for e in check.iter_errors(short)] == ["additionalProperties"]
    wrong = {"sources": [{"uri": "clip.mp4"}], "detector": {"backend": "onnx", "model": "m.onnx", "imgsz": "big"},
             "sinks": [{"type": "zmq", "endpoint": "tcp://127.0.0.1:5555", "hwm": 0}]}
    assert sorted(".".join(map(str, e.absolute_path)) for e in check.iter_errors(wrong)) == [
        "detector.imgsz", "sinks.0"]


def test_bulk_mode_batches_big_unless_the_file_says(tmp_path):
    path = write(tmp_path, HEAD + "runtime: {mode: bulk}\nkeyframes: {interval: 5}\n")
    cfg = load_pipeline(path)
    assert (cfg.detector.max_batch, cfg.detector.budget_ms, cfg.keyframes.interval, cfg.runtime.control) == (
        32, None, 1, False)
    path = write(tmp_path, "sources: [{uri: clip.mp4}]\ndetector: {backend: motion, max_batch: 4}\n")
    assert load_pipeline(path, overrides={"runtime": {"mode": "bulk"}}).detector.max_batch == 4


def test_analytics_rules_are_checked_key_by_key(tmp_path):
    path = write(tmp_path, HEAD + "analytics:\n  lines: [{name: a, points: [[0, 0]]}, {name: b, points: [[0, 0], [1, 1]], "
                                  "margin: 3}]\n  zones: [{name: c, polygon: [[0, 0], [1, 0], [1, 1]], loiter_s: -1}]\n")
    assert problems(path) == [
        f"{path}: analytics.lines[0].points: expected two points [[x, y], [x, y]], got [[0, 0]]",
        f"{path}: analytics.lines[1].margin: unknown key (expected one of: name, classes, streams, points, margin_px, min_frames)",
        f"{path}: analytics.zones[0].loiter_s: must be > 0, got -1"]
    path = write(tmp_path, HEAD + "analytics:\n  lines: [{name: a, points: [[0, 0], [1, 1]]}]\n"
                                  "  zones: [{name: a, polygon: [[0, 0], [1, 0], [1, 1]]}]\n")
    assert problems(path) == [f"{path}: analytics: rule names must differ: a used twice"]
