"""The live progress display of `streamlens run`, and the summary printed at the end.

On a terminal the per-stream lines are redrawn in place a few times a second; elsewhere (a log
file, CI) a plain line per stream is written every `every_s` seconds. Once the run's HTTP server
listens (`runtime.http`), one line above them gives its address (`live page: http://...`). What a stream's name (or a
note, a loss's reason) holds is shown escaped (streamlens/logs.py): its control characters never
reach the terminal raw.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

from .graph.run.stats import RunReport, StreamStats
from .logs import escape
from .segment.figures import summary_line

if TYPE_CHECKING:  # a supervisor of engines shows its progress too, without the engine's modules
    from .graph.run.pipeline import Pipeline


def stream_line(st: StreamStats) -> str:
    """One stream's progress: `cam1  412/897  46%  58.3 fps  1203 objects  0 dropped  running`."""
    done = f"{st.frames}/{st.total} {100 * st.frames / st.total:3.0f}%" if st.total else f"{st.frames}"
    return (f"{escape(st.name):<12} {done:>14}  {st.fps:6.1f} fps  {st.objects:>7} objects  "
            f"{st.dropped:>4} dropped  {escape(st.state)}")


def http_line(host: str, port: int, page: bool = True) -> str:
    """The line that says where a run's HTTP server answers: its live page, or its `/metrics` when
    `page` is off. `host` as `runtime.http.host` gives it (an IPv6 address is put in brackets).

        >>> http_line("127.0.0.1", 9464)
        'live page: http://127.0.0.1:9464/'
        >>> http_line("::1", 9464, page=False)
        'metrics: http://[::1]:9464/metrics'
    """
    host = host.strip("[]")
    base = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    return f"live page: {base}/" if page else f"metrics: {base}/metrics"


class ProgressDisplay:
    def __init__(self, out: TextIO = sys.stderr, every_s: float = 5.0):
        self.out = out
        self.tty = out.isatty()
        self.every_s = every_s
        self._drawn = 0
        self._last = time.monotonic()
        self._actions = 0  # budget controller actions already shown
        self._http_shown = False  # the HTTP server's address, printed once it listens

    def note(self, text: str) -> None:
        """Print a line below the progress lines (escaped); the next redraw starts under it."""
        self.out.write(escape(text) + "\n")
        self.out.flush()
        self._drawn = 0

    def __call__(self, pipeline: Pipeline) -> None:
        if not self._http_shown and pipeline.http_port is not None:
            self._http_shown = True
            http = pipeline.config.runtime.http
            self.note(http_line(http.host, pipeline.http_port, http.page))
        control = pipeline.controller
        if control is not None and control.steps > self._actions:
            for text in list(control.actions)[-(control.steps - self._actions):]:
                self.note(f"budget: {text}")
            self._actions = control.steps
        stats = list(pipeline.stats.values())
        if self.tty:
            lines = [stream_line(st) for st in stats]
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            self.out.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
            self.out.flush()
            self._drawn = len(lines)
        elif time.monotonic() - self._last >= self.every_s:
            self._last = time.monotonic()
            for st in stats:
                self.out.write(stream_line(st) + "\n")
            self.out.flush()


def summary(report: RunReport) -> str:
    """The table printed when a run ends. `late`: keyframes whose detections came after the frame
    had to go out (they were applied to the tracks afterwards); `dropped`: frames lost anywhere,
    of which `shed` by the budget controller; `p95 ms`: from a frame becoming available to its
    publication, over the last frames; `state`: how the stream ended (`truncated`: the command
    then names the input in an error line). Under the table, a line for each stream that lost
    anything, by cause, whose detections came back too late to apply, or that lost clips (how many,
    and why the last one was lost: `analytics.clips`); a line for each sink that
    could not deliver everything, one per secondary model, and one for the masks."""
    rows = [f"{'stream':<12} {'frames':>7} {'keyframes':>9} {'late':>5} {'objects':>8} {'dropped':>7} "
            f"{'shed':>6} {'p95 ms':>7} {'wall s':>7} {'fps':>7}  state"]
    for st in report.streams:
        p95 = st.latency_percentiles()["p95"]
        rows.append(f"{escape(st.name):<12} {st.frames:>7} {st.keyframes:>9} {st.late_keyframes:>5} {st.objects:>8} "
                    f"{st.dropped:>7} {st.shed:>6} {p95:>7.1f} {st.wall_s:>7.1f} {st.mean_fps:>7.1f}  {st.state}")
    for st in report.streams:
        name = escape(st.name)
        causes = ", ".join(f"{cause} {n}" for cause, n in st.lost.items() if n)
        if causes:
            rows.append(f"{name} lost: {causes}")
        if st.discarded_detections:
            rows.append(f"{name}: {st.discarded_detections} keyframes' detections came back too late to apply")
        if st.clips_lost:
            rows.append(f"{name}: {st.clips_lost} clip(s) lost (the last: {escape(str(st.clip_loss))})")
    for where, n in report.sink_losses.items():
        rows.append(f"{escape(where)}: {n} message(s) not delivered")
    for name, fig in report.secondary.items():
        if name != "cache":
            rows.append(f"secondary {name}: {fig['calls']} looks on {fig['tracks']} tracks"
                        f" ({fig['attempts_per_track'] or 0} per track), {fig['computed']} computed,"
                        f" {fig['cached']} from the cache, {fig['dropped']} dropped")
    if report.segment:
        rows.append(summary_line(report.segment))
    if report.control_actions:
        rows.append(f"budget controller: {report.control_steps} steps, ended on rung {report.control_level}"
                    f" (last: {escape(report.control_actions[-1])})")
    total = sum(st.frames for st in report.streams)
    rows.append(f"{report.status}: {total} frames in {report.wall_s:.1f} s "
                f"({total / report.wall_s if report.wall_s else 0:.1f} fps overall)")
    return "\n".join(rows)
