"""The pipeline file: the short form loads, and every mistake is one line naming file and key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamlens.config import load_pipeline
from streamlens.errors import ConfigError

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
        f"{path}: detector.backend: unknown '' (onnx, ultralytics, motion)",
    ]


@pytest.mark.parametrize("text, expected", [
    ("sources: [{uri: clip.mp4, colour: red}]\ndetector: {backend: motion}\n",
     "sources[0].colour: unknown key (expected one of: name, uri, live, loop, max_fps, options, "
     "transport, timeout_s, stall_s, backoff_initial_s, backoff_max_s, max_staleness_ms, decode)"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: nosuch}\n",
     "detector.backend: unknown 'nosuch' (onnx, ultralytics, motion)"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nkeyframes: {interval: often}\n",
     "keyframes.interval: wrong type: expected an integer, got 'often'"),
    ("sources: [{uri: /nonexistent/x.mp4}]\ndetector: {backend: motion}\n",
     "sources[0].uri: file not found: /nonexistent/x.mp4"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: onnx, model: nope.onnx}\n",
     "detector.model: file not found: {tmp}/nope.onnx"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion, conf: 0.5}\n",
     "detector.conf: only for backend onnx or ultralytics"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nsinks: [{type: kafka}]\n",
     "sinks[0].type: unknown 'kafka' (jsonl, video, zmq)"),
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
        f"{path}: sources[0].fps: unknown key (expected one of: name, uri, live, loop, max_fps, options, "
        "transport, timeout_s, stall_s, backoff_initial_s, backoff_max_s, max_staleness_ms, decode)",
        f"{path}: sources[1].uri: file not found: {tmp_path / 'missing.mp4'}",
        f"{path}: detector.min_area: must be >= 0, got -1.0",
        f"{path}: sinks[0].path: missing",
    ]


@pytest.mark.parametrize("text, expected", [
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nbogus: 1\n", "bogus: unknown key"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: motion}\nkeyframes: {interval: x}\n",
     "keyframes.interval: wrong type"),
    ("sources: [{uri: /no/such/clip.mp4}]\ndetector: {backend: motion}\n",
     "sources[0].uri: file not found: /no/such/clip.mp4"),
    ("sources: [{uri: clip.mp4}]\ndetector: {backend: nosuch}\n",
     "detector.backend: unknown 'nosuch' (onnx, ultralytics, motion)"),
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


def test_shipped_pipelines_validate():
    for path in sorted((REPO / "pipelines").glob("*.yaml")):
        if "shared/data" in path.read_text() and not DATA.is_dir():
            continue  # an example on the real clips in ../shared/data, absent from this checkout
        proc = streamlens("validate", str(path))
        assert proc.returncode == 0, proc.stderr
        assert "ok" in proc.stdout
