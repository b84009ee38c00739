"""Log lines and the terminal show what they were given, escaped (streamlens/logs.py): a newline,
a carriage return or an ANSI escape in a name, a URI or a path never reaches a log line, an error
line or the progress display raw, whatever let it in (the pipeline file refuses them in its own
strings; a path made from the file's folder, a logger called directly, still carry them)."""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import subprocess
import sys
import time

from streamlens.graph.run.stats import RunReport, StreamStats
from streamlens.logs import EscapingFormatter, escape
from streamlens.progress import ProgressDisplay, stream_line, summary

from .conftest import REPO

SAMPLE = REPO / "samples" / "traffic.mp4"
NASTY = "cam\n1\r\x1b[31mERROR forged\x1b[0m\x85\u202e"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")  # all but the line's own \n


def lines_of(logger_name: str, *calls) -> str:
    """What a handler with the `EscapingFormatter` (the command's layout) writes for `calls`, each
    `(level, msg, args, exc_info)` on logger `logger_name`."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(EscapingFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    before = logger.propagate, logger.level
    logger.propagate = False
    logger.setLevel(logging.DEBUG)  # setLevel, not .level: it clears what an earlier test left cached
    try:
        for level, msg, args, exc_info in calls:
            logger.log(level, msg, *args, exc_info=exc_info)
    finally:
        logger.removeHandler(handler)
        logger.propagate = before[0]
        logger.setLevel(before[1])
    return out.getvalue()


def test_a_log_lines_arguments_are_shown_escaped_and_its_layout_kept():
    try:
        raise OSError(f"cannot open {NASTY}")
    except OSError as e:
        error = e
    text = lines_of("streamlens.sources",
                    (logging.WARNING, "%s: cannot connect to %s (%s); retrying in %.1f s (attempt %d)",
                     (NASTY, f"rtsp://{NASTY}/1", error, 2.0, 3), None),
                    (logging.INFO, "%r is 100%%", (NASTY,), None),
                    (logging.ERROR, "%s: stopped", (NASTY,), error))
    lines = text.split("\n")
    assert lines[0] == (r"WARNING streamlens.sources: cam\n1\r\x1b[31mERROR forged\x1b[0m\x85\u202e: cannot connect "
                        r"to rtsp://cam\n1\r\x1b[31mERROR forged\x1b[0m\x85\u202e/1 (cannot open cam\n1\r\x1b[31m"
                        r"ERROR forged\x1b[0m\x85\u202e); retrying in 2.0 s (attempt 3)")
    assert lines[1] == "INFO streamlens.sources: " + escape(repr(NASTY)) + " is 100%"
    assert lines[2] == r"ERROR streamlens.sources: cam\n1\r\x1b[31mERROR forged\x1b[0m\x85\u202e: stopped"
    assert lines[3] == "Traceback (most recent call last):"  # a traceback keeps its own line breaks
    assert lines[-2].startswith("OSError: cannot open cam\\n1\\r\\x1b[31m")  # the message's, escaped
    assert not RAW.search(text)
    assert text.count("\n") == 3 + sum(1 for line in lines[3:] if line)  # no line was forged


def test_another_librarys_messages_are_escaped_whole():
    """A logger outside streamlens may put what it was given in the message itself."""
    text = lines_of("aiohttp.access", (logging.INFO, f"GET /{NASTY} HTTP/1.1", (), None))
    assert text == f"INFO aiohttp.access: GET /{escape(NASTY)} HTTP/1.1\n"
    assert not RAW.search(text)


def test_the_progress_display_and_the_summary_show_names_escaped():
    st = StreamStats(NASTY, "rtsp://cam/1", total=10, frames=4, state="running")
    st.clip_lost(f"{NASTY}: No space left on device")
    line = stream_line(st)
    assert line.startswith(escape(NASTY)) and not RAW.search(line) and "\n" not in line
    text = summary(RunReport("done", None, 1.0, [st], sink_losses={f"sinks[0] ({NASTY})": 2}))
    assert not RAW.search(text)
    assert f"{escape(NASTY)}: 1 clip(s) lost (the last: {escape(NASTY)}: No space left on device)" in text
    assert len(text.split("\n")) == 5  # heading, the stream, its clips, the sink, the total: none forged
    # a note on a real terminal (a pty): the display's own escapes only, what it was given escaped
    leader, follower = os.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as terminal:
            display = ProgressDisplay(terminal)
            assert display.tty
            display.note(f"budget: {NASTY} keyframes stretched")
        written = os.read(leader, 4096).decode()
    finally:
        os.close(leader)
        os.close(follower)
    assert written.replace("\r\n", "\n") == f"budget: {escape(NASTY)} keyframes stretched\n"


def test_the_command_shows_a_path_it_was_given_escaped(tmp_path):
    """`streamlens validate` and `run` of a pipeline file in a folder whose name holds a newline and
    an ANSI escape: the error lines name it escaped, one line per mistake; and a real run's warning
    (its clips folder, under that folder, cannot be made) is one log line, escaped."""
    folder = tmp_path / "site\n\x1b[31mERROR forged"
    folder.mkdir()
    (folder / "blocked").write_text("a file where the clips folder should be")
    pipeline = folder / "p.yaml"
    pipeline.write_text("""
sources: [{name: cam1, uri: missing.mp4}]
detector: {backend: motion}
sinks: []
""")
    checked = subprocess.run([sys.executable, "-m", "streamlens", "validate", str(pipeline)], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 2, checked.stderr
    assert not RAW.search(checked.stderr), ascii(checked.stderr)
    shown = escape(str(folder))
    assert checked.stderr.splitlines() == [line for line in checked.stderr.splitlines() if line.startswith(shown)]
    assert f"{shown}/missing.mp4" in checked.stderr, checked.stderr

    pipeline.write_text(f"""
sources: [{{name: cam1, uri: {SAMPLE}, live: true, loop: true}}]
detector: {{backend: motion}}
keyframes: {{interval: 3}}
analytics:
  lines: [{{name: across, points: [[0.5, 0.0], [0.5, 1.0]]}}]
  clips: {{events: [line_cross], pre_s: 1, post_s: 1, path: blocked/clips}}
sinks: []
""")
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", str(pipeline)], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        try:  # a crossing comes within the sample's first seconds, and its clip is lost once its window passed
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None and "clips are lost" not in log.read_text():
                time.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    err = log.read_text()
    assert not RAW.search(err), ascii(err)
    warned = [line for line in err.splitlines() if "clips are lost" in line]
    assert len(warned) == 1 and f"({shown}/blocked/clips/cam1/" in warned[0], err
    assert "Traceback" not in err
