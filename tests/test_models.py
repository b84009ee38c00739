"""`streamlens models` (streamlens/models): pulls from a real HTTP server on 127.0.0.1 checked against
their sha256 (kept when right, nothing left when wrong), the mirror setting, a pipeline naming a
cached model, the one wording of a missing model, and an Ultralytics export made offline.

Every command runs as a user runs it, in a subprocess, with XDG_CACHE_HOME in the test's folder so
the user's own cache is never touched.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

from streamlens.config import load_pipeline, preflight_problems
from streamlens.errors import ConfigError, DetectorError
from streamlens.models.cache import cache_dir, model_problem, reference_path

from .conftest import DATA, REPO, streamlens

YOLOX_NANO = DATA / "models" / "yolox_nano" / "yolox_nano.onnx"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request on the test's stderr
        pass


@pytest.fixture
def served(tmp_path):
    """(folder, base URL): a real HTTP server on 127.0.0.1 serving the folder, in a thread."""
    folder = tmp_path / "served"
    folder.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> dict:
    """The environment of a user whose cache is in the test's folder (and no mirror set)."""
    monkeypatch.delenv("STREAMLENS_MODEL_MIRROR", raising=False)
    return {"XDG_CACHE_HOME": str(tmp_path / "xdg")}


def models_folder(env: dict) -> Path:
    return Path(env["XDG_CACHE_HOME"]) / "streamlens" / "models"


def left_in(folder: Path) -> list[str]:
    """Every name in `folder`, hidden ones too (a `.part` left behind would show)."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def a_model(folder: Path, name: str = "det.onnx", size: int = 300_000) -> tuple[Path, str]:
    path = folder / name
    path.write_bytes(os.urandom(size))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_pull_with_the_right_sum_keeps_the_file_and_lists_it_as_cached(served, cache):
    folder, base = served
    model, digest = a_model(folder)
    done = streamlens("models", "pull", "--url", f"{base}/det.onnx", "--sha256", digest.upper(), env=cache)
    assert done.returncode == 0, done.stderr
    kept = models_folder(cache) / "det.onnx"
    assert kept.read_bytes() == model.read_bytes() and left_in(kept.parent) == ["det.onnx"]
    assert f"sha256 {digest} checked" in done.stdout and "model: models:det.onnx" in done.stdout
    again = streamlens("models", "pull", "--url", f"{base}/det.onnx", "--sha256", digest, env=cache)
    assert again.returncode == 0 and "already there" in again.stdout
    listed = streamlens("models", "list", env=cache)
    assert listed.returncode == 0 and "\n  det.onnx\n" in listed.stdout
    assert "yolox_nano  (Apache-2.0, 3.7 MB, not cached)" in listed.stdout


def test_a_wrong_sum_leaves_nothing_and_is_one_line_without_credentials(served, cache):
    folder, base = served
    a_model(folder)
    url = base.replace("http://", "http://alice:s3cret@") + "/det.onnx"
    done = streamlens("models", "pull", "--url", url, "--sha256", "0" * 64, "--name", "mine.onnx", env=cache)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "s3cret" not in done.stderr and "alice" not in done.stderr
    assert done.stderr.startswith(f"streamlens: error: {base.replace('http://', 'http://***@')}/det.onnx: sha256 ")
    assert f"is not the {'0' * 64} expected; nothing kept" in done.stderr
    assert left_in(models_folder(cache)) == []


def test_a_file_already_there_is_kept_when_a_pull_fails(served, cache):
    folder, base = served
    _, digest = a_model(folder)
    kept = models_folder(cache) / "det.onnx"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"the user's own file")
    done = streamlens("models", "pull", "--url", f"{base}/det.onnx", "--sha256", "1" * 64, env=cache)
    assert done.returncode == 1 and kept.read_bytes() == b"the user's own file"
    done = streamlens("models", "pull", "--url", f"{base}/det.onnx", "--sha256", digest, env=cache)
    assert done.returncode == 0 and hashlib.sha256(kept.read_bytes()).hexdigest() == digest
    assert left_in(kept.parent) == ["det.onnx"]


def test_what_cannot_be_fetched_is_one_line_and_leaves_nothing(served, cache, tmp_path):
    folder, base = served
    a_model(folder, "big.onnx", size=1_600_000)
    missing = streamlens("models", "pull", "--url", f"{base}/nope.onnx", "--sha256", "2" * 64, env=cache)
    assert (missing.returncode, missing.stderr) == (1, f"streamlens: error: GET {base}/nope.onnx: 404 File not found\n")
    big = streamlens("models", "pull", "--url", f"{base}/big.onnx", "--sha256", "3" * 64, "--max-mb", "1", env=cache)
    assert big.returncode == 1
    assert big.stderr == f"streamlens: error: GET {base}/big.onnx: 1600000 bytes, more than the 1048576 expected\n"
    mine = tmp_path / "mine"
    into = streamlens("models", "pull", "--url", "http://127.0.0.1:9/x.onnx", "--sha256", "4" * 64,
                      "--dir", str(mine), env=cache)
    assert into.returncode == 1 and into.stderr.startswith("streamlens: error: GET http://127.0.0.1:9/x.onnx: ")
    assert into.stderr.count("\n") == 1 and left_in(mine) == [] and left_in(models_folder(cache)) == []


def test_usage_mistakes_say_what_to_give(cache):
    unknown = streamlens("models", "pull", "yolov9000", env=cache)
    assert unknown.returncode == 2 and "unknown model 'yolov9000' (known: yolox_nano," in unknown.stderr
    no_sum = streamlens("models", "pull", "yolox_tiny", env=cache)
    assert no_sum.returncode == 2 and "give --sha256 SUM" in no_sum.stderr
    other_sum = streamlens("models", "pull", "yolox_nano", "--sha256", "5" * 64, env=cache)
    assert other_sum.returncode == 2 and "is not the listed 695e750a" in other_sum.stderr
    no_check = streamlens("models", "pull", "--url", "http://127.0.0.1:9/x.onnx", env=cache)
    assert no_check.returncode == 2 and "--url needs --sha256" in no_check.stderr
    bad_sum = streamlens("models", "pull", "--url", "http://127.0.0.1:9/x.onnx", "--sha256", "abc", env=cache)
    assert bad_sum.returncode == 2 and "--sha256: expected 64 hexadecimal digits" in bad_sum.stderr
    odd_name = streamlens("models", "pull", "--url", "http://127.0.0.1:9/my%20model.onnx", "--sha256", "6" * 64,
                          env=cache)
    assert odd_name.returncode == 2 and "--name: expected a file name of letters" in odd_name.stderr
    assert left_in(models_folder(cache)) == []


def need_yolox_nano() -> Path:
    if not YOLOX_NANO.is_file():
        pytest.skip(f"{YOLOX_NANO} not found: the real model lives in ../shared/data outside the repository")
    return YOLOX_NANO


def pipeline(folder: Path, model: str) -> Path:
    path = folder / "p.yaml"
    path.write_text(f"sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}}}]\n"
                    f"detector: {{backend: onnx, model: '{model}', conf: 0.3}}\n"
                    "sinks: [{type: jsonl, path: out/r.jsonl}]\n")
    return path


def test_a_known_model_from_a_mirror_is_checked_cached_and_named_by_a_pipeline(served, cache, tmp_path):
    """The mirror setting replaces the publisher's address: the real YOLOX-Nano, served from
    127.0.0.1 under its published name, is checked against the catalogue's sum; a pipeline naming
    `models:yolox_nano` then validates (the model loads) and runs."""
    real = need_yolox_nano()
    folder, base = served
    (folder / "models").mkdir()
    shutil.copyfile(real, folder / "models" / "yolox_nano.onnx")
    path = pipeline(tmp_path, "models:yolox_nano")
    before = streamlens("validate", str(path), env=cache)
    assert before.returncode == 2
    assert before.stderr == (f"{path}: detector.model: file not found: {models_folder(cache) / 'yolox_nano.onnx'} "
                             "(streamlens never downloads models: get it with `streamlens models pull yolox_nano`)\n")
    mirrored = {**cache, "STREAMLENS_MODEL_MIRROR": f"{base}/models/"}
    done = streamlens("models", "pull", "yolox_nano", env=mirrored)
    assert done.returncode == 0, done.stderr
    assert f"from {base}/models/yolox_nano.onnx" in done.stdout and "model: models:yolox_nano" in done.stdout
    assert left_in(models_folder(cache)) == ["yolox_nano.onnx"]
    assert "yolox_nano  (Apache-2.0, 3.7 MB, cached: " in streamlens("models", "list", env=cache).stdout
    assert streamlens("validate", str(path), env=cache).returncode == 0
    ran = streamlens("run", "-q", str(path), env=cache)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "out" / "r.jsonl").stat().st_size > 0


def test_a_mirror_with_other_bytes_is_refused(served, cache, tmp_path):
    folder, base = served
    (folder / "yolox_nano.onnx").write_bytes(b"not the model" * 1000)
    done = streamlens("models", "pull", "yolox_nano", "--mirror", base, env=cache)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert f"{base}/yolox_nano.onnx: sha256 " in done.stderr and "695e750a" in done.stderr
    assert left_in(models_folder(cache)) == []
    local = tmp_path / "usb"
    local.mkdir()
    (local / "yolox_nano.onnx").write_bytes(b"x" * 4_000_000)  # past the listed size: cut off there
    done = streamlens("models", "pull", "yolox_nano", "--mirror", f"file://{local}", env=cache)
    assert done.returncode == 1 and "more than the 3660092 bytes expected; nothing kept" in done.stderr
    assert left_in(models_folder(cache)) == []


def test_a_folder_mirror_serves_an_air_gapped_site(cache, tmp_path):
    real = need_yolox_nano()
    local = tmp_path / "usb"
    local.mkdir()
    shutil.copyfile(real, local / "yolox_nano.onnx")
    done = streamlens("models", "pull", "yolox_nano", env={**cache, "STREAMLENS_MODEL_MIRROR": str(local)})
    assert done.returncode == 0, done.stderr
    assert (models_folder(cache) / "yolox_nano.onnx").read_bytes() == real.read_bytes()


def test_a_missing_model_is_one_wording_wherever_it_is_checked(tmp_path, monkeypatch):
    """The config's check, preflight's recheck and the detectors say a missing model the same way,
    with the command that gets it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cached = cache_dir() / "yolox_nano.onnx"
    assert reference_path("models:yolox_nano") == cached
    wording = (f"file not found: {cached} (streamlens never downloads models: get it with "
               "`streamlens models pull yolox_nano`)")
    assert model_problem(cached) == wording
    path = pipeline(tmp_path, "models:yolox_nano")
    with pytest.raises(ConfigError) as e:
        load_pipeline(path)
    assert e.value.problems == [f"{path}: detector.model: {wording}"]
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"")
    cfg = load_pipeline(path)
    cached.unlink()
    assert preflight_problems(cfg) == [f"{path}: detector.model: {wording}"]
    from streamlens.detect.onnx import OnnxDetector

    with pytest.raises(DetectorError) as e:
        OnnxDetector(cached)
    assert str(e.value) == f"detector.model: {wording}"
    for bad in ("models:../etc/passwd", "models:", "models:.hidden"):
        with pytest.raises(ConfigError, match=r"detector\.model: '.*': expected models:NAME"):
            load_pipeline(pipeline(tmp_path, bad))


def test_export_writes_onnx_and_openvino_offline_and_a_pipeline_names_them(tmp_path, cache):
    """`streamlens models export` through Ultralytics' own exporter, offline: a YOLOv8n built from
    its yaml (random weights, nothing downloaded) exported beside itself in the cache, to ONNX at
    320 and to OpenVINO; both are named by pipelines as `models:...` and load."""
    pytest.importorskip("ultralytics", reason="the ultralytics extra is not installed")
    pytest.importorskip("onnx", reason="exporting to ONNX needs the onnx package (the ultralytics extra)")
    from streamlens.detect.ultralytics_offline import import_ultralytics_offline

    import_ultralytics_offline()
    from ultralytics import YOLO

    folder = models_folder(cache)
    folder.mkdir(parents=True)
    YOLO("yolov8n.yaml").save(folder / "tiny.pt")
    done = streamlens("models", "export", str(folder / "tiny.pt"), "--format", "onnx", "--imgsz", "320", env=cache)
    assert done.returncode == 0, done.stderr
    assert "model: models:tiny.onnx" in done.stdout and left_in(folder) == ["tiny.onnx", "tiny.pt"]
    assert streamlens("validate", str(pipeline(tmp_path, "models:tiny.onnx")), env=cache).returncode == 0
    from streamlens.detect.onnx import OnnxDetector

    assert OnnxDetector(folder / "tiny.onnx").spec.size == (320, 320)
    if importlib_spec("openvino"):
        out = tmp_path / "exports"
        done = streamlens("models", "export", str(folder / "tiny.pt"), "--format", "openvino", "--imgsz", "320",
                          "--dir", str(out), env=cache)
        assert done.returncode == 0, done.stderr
        assert left_in(out) == ["tiny_openvino_model"] and (out / "tiny_openvino_model" / "tiny.xml").is_file()
    missing = streamlens("models", "export", str(tmp_path / "nope.pt"), "--format", "onnx", env=cache)
    assert missing.returncode == 1 and missing.stderr.startswith(
        f"streamlens: error: models export: file not found: {tmp_path / 'nope.pt'} (streamlens never downloads")


def importlib_spec(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
