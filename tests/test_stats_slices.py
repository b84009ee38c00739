"""The run's loop spreads the streams' `stats` messages over its ticks (graph/reports.py
`StatsReporter.periodic`): building every stream's at once held the process for 70-120 ms each
second at 48 streams. Over one round of slices, every running stream is published exactly once."""

from __future__ import annotations

from streamlens.graph.reports import StatsReporter
from streamlens.graph.stats import StreamStats


class Published:
    """Where the reporter hands its messages (the fan-out's face for stats)."""

    wants_stats = True

    def __init__(self) -> None:
        self.names: list[str] = []

    def publish_stats(self, reports) -> None:
        self.names.extend(report.stream for report in reports)


def test_one_round_of_slices_publishes_every_running_stream_once_and_no_ended_one():
    stats = {f"cam{i}": StreamStats(f"cam{i}", f"rtsp://cam{i}") for i in range(10)}
    stats["cam3"].reason = "eof"  # ended: its last stats went with its eos
    out = Published()
    reporter = StatsReporter(stats, out, None, capped=set(), queue_depth=lambda name: 0)
    part, seen = 0, []
    for _ in range(4):
        before = len(out.names)
        part = reporter.periodic(part, 4)
        seen.append(out.names[before:])
    assert part == 0  # back to the first slice, with the controller's second
    assert sorted(out.names) == sorted(name for name in stats if name != "cam3")
    assert all(len(names) <= 3 for names in seen)  # a quarter a tick, not all at once
    out.names.clear()
    reporter.periodic()  # one part: every running stream at once
    assert len(out.names) == 9
