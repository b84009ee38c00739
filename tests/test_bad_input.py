"""Bad input is one line naming the file and key path, exit 2, no traceback, in `validate` and `run` alike:
integers Python will not convert, input files a run would refuse (said by `validate` in the run's words),
URL ports out of range, and a camera's host that does not resolve (a warning: it may resolve later)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, streamlens

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not on PATH")
LIMIT = sys.get_int_max_str_digits()
#: every scheme a live source takes (config.model.LIVE_SCHEMES)
SCHEMES = ("rtsp", "rtsps", "http", "https", "rtmp", "rtmps", "rtmpt", "rtmpts", "udp", "tcp", "srt", "rtp")


def write(folder: Path, text: str) -> Path:
    path = folder / "p.yaml"
    path.write_text(text)
    return path


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The one line a command wrote to stderr (asserted: one line, no traceback)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# -- integers Python refuses to convert ---------------------------------------------------------

@pytest.mark.skipif(LIMIT == 0, reason="this Python converts integers of any length")
@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("text, expected", [
    ("sources: [{uri: 'rtsp://127.0.0.1:8554/a', timeout_s: %s}]\ndetector: {backend: motion}\n" % ("9" * (LIMIT + 100)),
     f"sources[0].timeout_s: integer too large: {LIMIT + 100} digits, at most {LIMIT} (line 1)"),
    ("sources: [{uri: 'rtsp://127.0.0.1:8554/a'}]\ndetector:\n  backend: motion\n  imgsz: [640, -%s]\n" % ("9" * 4400),
     f"detector.imgsz[1]: integer too large: 4400 digits, at most {LIMIT} (line 4)"),
    # hexadecimal: int() reads it whatever its length, but no message or JSON line could write it
    ("sources: [{uri: 'rtsp://127.0.0.1:8554/a'}]\ndetector: {backend: motion}\nkeyframes: {interval: 0x%s}\n"
     % ("f" * LIMIT), f"keyframes.interval: integer too large: more than {LIMIT} digits (line 3)"),
])
def test_an_integer_python_refuses_is_one_line_naming_its_key(tmp_path, command, text, expected):
    path = write(tmp_path, text)
    proc = streamlens(command, "-q", str(path)) if command == "run" else streamlens(command, str(path))
    assert proc.returncode == 2, proc.stderr
    assert one_line(proc) == f"{path}: {expected}"


def test_an_integer_written_once_under_an_anchor_is_named_where_it_is_written(tmp_path):
    path = write(tmp_path, "defaults: &cam {timeout_s: %s}\nsources: [{<<: *cam, uri: 'rtsp://127.0.0.1:8554/a'},"
                           " {<<: *cam, uri: 'rtsp://127.0.0.1:8554/b'}]\ndetector: {backend: motion}\n" % ("9" * 4400))
    proc = streamlens("validate", str(path))
    assert proc.returncode == 2
    assert one_line(proc).startswith(f"{path}: defaults.timeout_s: integer too large: 4400 digits")


def test_values_yaml_parses_but_python_cannot_hold_are_one_line_each(tmp_path):
    path = write(tmp_path, "sources: [{uri: 'rtsp://127.0.0.1:8554/a', max_fps: !!float fast}]\n"
                           "detector: {backend: motion}\nnote: 2024-13-45\n")
    proc = streamlens("validate", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"{path}: sources[0].max_fps: not a valid float: 'fast' (line 1)",
        f"{path}: note: not a valid timestamp: '2024-13-45' (month must be in 1..12) (line 3)"]


# -- input files: validate says what run says ----------------------------------------------------

def refused(tmp_path: Path, kind: str) -> Path:
    """An input file a run refuses: audio only, random bytes, or one whose reads fail."""
    if kind == "audio only":
        if shutil.which("ffmpeg") is None:
            pytest.skip("ffmpeg not on PATH")
        path = tmp_path / "tone.m4a"
        subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:duration=1", str(path)],
                       check=True, timeout=60)
        return path
    if kind == "random bytes":
        path = tmp_path / "noise.mp4"
        path.write_bytes(os.urandom(64 * 1024))
        return path
    path = Path("/proc/self/mem")  # a file that exists, and whose every read at offset 0 fails (EIO)
    if not path.is_file():
        pytest.skip("no /proc/self/mem on this system")
    return path


@pytest.mark.parametrize("kind, said", [("audio only", "has no video stream"),
                                        ("random bytes", "not a video FFmpeg can read ("),
                                        ("reads fail", "cannot open (Input/output error)")])
def test_validate_refuses_an_input_file_in_the_words_of_run(tmp_path, kind, said):
    media = refused(tmp_path, kind)
    path = write(tmp_path, f"sources: [{{uri: '{media}'}}]\ndetector: {{backend: motion}}\n")
    validated, ran = streamlens("validate", str(path)), streamlens("run", "-q", str(path))
    line = one_line(validated)
    assert validated.returncode == 2 and line.startswith(f"{path}: sources[0].uri: {media}: {said}")
    assert ran.returncode == 1
    assert one_line(ran) == "streamlens: error: " + line.removeprefix(f"{path}: sources[0].uri: ")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_file_without_read_permission_is_the_same_line_in_validate_and_run(tmp_path):
    media = tmp_path / "locked.mp4"
    shutil.copy(REPO / "samples" / "traffic.mp4", media)
    media.chmod(0)
    path = write(tmp_path, f"sources: [{{uri: '{media}'}}]\ndetector: {{backend: motion}}\n")
    validated, ran = streamlens("validate", str(path)), streamlens("run", "-q", str(path))
    assert validated.returncode == ran.returncode == 2
    assert one_line(validated) == one_line(ran) == f"{path}: sources[0].uri: cannot read {media}: permission denied"


def test_a_good_file_still_validates(tmp_path):
    path = write(tmp_path, f"sources: [{{uri: '{REPO / 'samples' / 'traffic.mp4'}'}}]\ndetector: {{backend: motion}}\n")
    proc = streamlens("validate", str(path))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith(f"{path}: ok: 1 source(s)")


# -- URL ports ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_port_out_of_range_is_refused_for_every_scheme_without_its_password(tmp_path, command):
    sources = "".join(f"  - {{uri: '{scheme}://admin:s3cret@127.0.0.1:{port}/x'}}\n"
                      for scheme in SCHEMES for port in ("99999", "notaport"))
    path = write(tmp_path, f"sources:\n{sources}  - {{uri: 'rtsp://127.0.0.1:8554/fine'}}\n"
                           "detector: {backend: motion}\n")
    proc = streamlens(command, "-q", str(path)) if command == "run" else streamlens(command, str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "s3cret" not in proc.stderr
    expected = [f"{path}: sources[{2 * i + j}].uri: port must be a number from 1 to 65535, got {shown}: "
                f"{scheme}://***@127.0.0.1:{port}/x"
                for i, scheme in enumerate(SCHEMES) for j, (port, shown) in enumerate([("99999", "99999"),
                                                                                       ("notaport", "'notaport'")])]
    assert proc.stderr.splitlines() == expected


def test_a_password_holding_a_slash_never_shows_in_the_port_line(tmp_path):
    # FFmpeg ends the host at the first '/': it reads host 'admin' and port 'pa' out of the password
    path = write(tmp_path, "sources: [{uri: 'rtsp://admin:pa/ss@cam:554/x'}]\ndetector: {backend: motion}\n")
    proc = streamlens("validate", str(path))
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.startswith(f"{path}: sources[0].uri: port must be a number from 1 to 65535: rtsp://***@cam:554/x")
    assert "pa/ss" not in line and "'pa'" not in line and "got" not in line


# -- a camera's host that does not resolve ------------------------------------------------------

def test_validate_warns_of_a_host_that_does_not_resolve_and_passes(tmp_path):
    # .invalid never resolves (RFC 6761); 127.0.0.1 is an address and localhost is in /etc/hosts
    path = write(tmp_path, "sources:\n  - {uri: 'rtsp://admin:s3cret@cam7.invalid:554/stream1'}\n"
                           "  - {uri: 'rtsp://127.0.0.1:8554/a'}\n  - {uri: 'http://localhost:8080/b.mjpg'}\n"
                           "detector: {backend: motion}\n")
    proc = streamlens("validate", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{path}: ok: 3 source(s)")
    line = one_line(proc)
    assert line.startswith(f"{path}: sources[0].uri: warning: cannot resolve host cam7.invalid")
    assert "s3cret" not in proc.stderr
