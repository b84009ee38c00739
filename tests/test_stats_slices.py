"""The run's loop spreads the streams' `stats` messages over its ticks (graph/run/reports.py
`StatsReporter.periodic`): building every stream's at once held the process for 70-120 ms each
second at 48 streams. Over one round of slices, every running stream is published exactly once,
through the run's real fan-out to a sink that takes stats."""

from __future__ import annotations

from streamlens.frame import StatsReport
from streamlens.graph.publish.fanout import FanOut
from streamlens.graph.run.reports import StatsReporter
from streamlens.config import SourceConfig
from streamlens.graph.run.stream import Stream, StreamSet
from streamlens.sinks.base import Sink


class StatsSink(Sink):
    """Keeps the streams of the stats messages it is written, in order (an inline sink: written on
    the calling thread, as a ZeroMQ publisher of results is)."""

    name = "stats"
    wants_stats = True
    inline = True

    def __init__(self) -> None:
        self.streams: list[str] = []

    def write(self, item, message, payload) -> None:
        if isinstance(item, StatsReport):
            assert message["type"] == "stats" and message["stream"] == item.stream
            self.streams.append(item.stream)


def test_one_round_of_slices_publishes_every_running_stream_once_and_no_ended_one():
    streams = StreamSet([Stream.listed(SourceConfig(name=f"cam{i}", uri=f"rtsp://cam{i}")) for i in range(10)])
    streams["cam3"].stats.reason = "eof"  # ended: its last stats went with its eos
    sink, errors = StatsSink(), []
    out = FanOut([sink], 8, on_published=lambda result, ms: None, on_error=errors.append,
                 on_close_error=errors.append)
    reporter = StatsReporter(streams, out, None, capped=set(), queue_depth=lambda name: 0)
    part, slices = 0, []
    for _ in range(4):
        before = len(sink.streams)
        part = reporter.periodic(part, 4)
        slices.append(sink.streams[before:])
    assert part == 0  # back to the first slice, with the controller's second
    assert sorted(sink.streams) == sorted(s.name for s in streams if s.name != "cam3")
    assert all(len(names) <= 3 for names in slices)  # a quarter a tick, not all at once
    sink.streams.clear()
    reporter.periodic()  # one part: every running stream at once
    assert len(sink.streams) == 9 and not errors
