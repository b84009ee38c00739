"""One owner per stream: `Stream` builds and holds everything a stream of a run has, and `StreamSet`
is the run's streams as an immutable snapshot.

A stream has its source mapping (`config`), its figures (`stats`), its source (decoding on a thread
of its own), its `Lane` in the engine (its tracker, its frames in order), its keyframe schedule and
`Admission`, the budget controller's `Shedder` when it is live and watched, the `StreamStop` that
ends its source, and that thread. Streams of the pipeline file, streams added over HTTP or by an
embedding program (graph/run/changes.py), and so the streams of each engine of a supervised run, are
all made here the same way, in two steps:

- `Stream.listed` / `open_stream`: its figures, then its source built (a file is opened; a camera
  connects on its own thread once it runs);
- `Stream.join`: its lane, schedule, admission and shedder, on the thread that builds the engine
  (the engine thread for an added stream), then `start` starts its source's thread.

Readers (the loss accounting, the stats and `eos` messages, the clips, the HTTP API) ask the
`StreamSet` for a stream and then the stream for its parts; none keeps a table of its own. The set
is replaced whole when a stream is listed or dropped, so a reader on any thread iterates `now`
without a lock; the pipeline file's validated `sources` are never changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ...config import PipelineConfig, SourceConfig
from ...sources import Source, build_source, clips_spec
from ...track import build_tracker
from ..admit import Admission, StreamStop, run_source
from ..engine import Lane
from ..schedule.keyframes import SceneCutDetector, build_scheduler, longest_gap
from .stats import StreamStats

#: the causes of loss, in the order `eos` messages and /metrics give them
CAUSES = ("corrupt", "decoder", "refused", "inbox", "stale", "shed")


@dataclass(eq=False)
class Stream:
    """One stream of a run and its parts (see the module); `source`, `lane` and `admission` are
    None until built."""

    config: SourceConfig
    stats: StreamStats
    source: Source | None = None
    lane: Lane | None = None
    admission: Admission | None = None
    shedder: object = None  # the budget controller's `Shedder` (graph/overload/shedding.py), when it watches the stream
    stop: StreamStop = field(default_factory=StreamStop)
    thread: threading.Thread | None = None

    @classmethod
    def listed(cls, config: SourceConfig) -> Stream:
        """A stream with its figures alone (state `starting`): listed before anything is built."""
        return cls(config, StreamStats(config.name, config.display_uri))

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def live(self) -> bool:
        return self.config.live

    @property
    def credited(self) -> bool:
        """Whether its source holds a credit for each frame until published: a file's (graph/channel.py)."""
        return not self.config.live

    def open(self, cfg: PipelineConfig, on_state: Callable[[str, str], None]) -> Source:
        """Build its source (a file is opened), its length in `stats`; a camera's states (streaming,
        reconnecting, ...) go to `on_state(name, state)`."""
        built = build_source(self.config, export_mvs=cfg.tracker.motion == "mv", clips=clips_spec(cfg))
        self.stats.total = built.total_frames
        built.on_state = on_state
        self.source = built
        return built

    def join(self, cfg: PipelineConfig, *, shared: bool, offset: int, prepare, controller, seq: int = 0,
             order=None) -> Lane:
        """Make its lane (its tracker at the stream's rate, its `seq` from `seq`), its keyframe schedule
        (`shared`: a live stream only tells scene cuts, the engine chooses; otherwise its own
        scheduler at `offset`), its admission (`prepare`: the detector's input made ahead, or None)
        and, when `controller` watches live streams, its shedder; `order`: its reid group's
        `MediaOrder` (graph/order.py), None for most streams. Returns the lane."""
        src, fps = self.config, self.source.fps
        tracker = build_tracker(cfg.tracker, fps, detector_conf=cfg.detector.conf, adaptive=cfg.keyframes.adaptive)
        self.lane = Lane(src.name, tracker, src.live, longest_gap(cfg.keyframes),
                         max_staleness_s=src.max_staleness_ms / 1000 if src.max_staleness_ms else None,
                         period_s=1 / (fps or 30.0), seq=seq, order=order)
        if order is not None:
            order.joined(src.name)
        if controller is not None and src.live:
            self.shedder = controller.shedder(src.name)
            self.shedder.attach(self.source)
        schedule = SceneCutDetector() if shared and src.live else build_scheduler(cfg.keyframes, offset)
        self.admission = Admission(self.lane, schedule, prepare,
                                   self.shedder.drop if self.shedder is not None else None, self.stop)
        return self.lane

    def start(self, inbox, credits) -> threading.Thread:
        """Start its source's thread (`credits`: the file sources' credits)."""
        self.thread = threading.Thread(target=run_source, name=f"source-{self.name}", daemon=True, args=(
            self.source, self.admission, inbox, credits if self.credited else None, self.stop, self.live))
        self.thread.start()
        return self.thread

    # -- what it lost ------------------------------------------------------------------------------

    def losses(self, inbox) -> dict[str, int]:
        """What it has lost so far, by cause: packets the decoder rejected (`corrupt`), frames a
        decode worker dropped (`decoder`), pictures refused (`refused`: larger than `max_pixels`, or
        no room in shared memory for them), the oldest frames of a full inbox (`inbox`), frames too
        old for the source's reader, admission or the engine (`stale`: past the source's
        `max_staleness_ms`, or past the budget controller's `max_wait_s`: they could no longer be
        published within the budget), and frames the budget controller gave up (`shed`)."""
        found = self.source.losses() if self.source is not None else {}
        stale = found.get("stale", 0) + self.late_from_source()
        stale += self.lane.stale_dropped if self.lane is not None else 0
        return {"corrupt": found.get("corrupt", 0), "decoder": found.get("decoder", 0),
                "refused": found.get("refused", 0), "inbox": inbox.dropped[self.name], "stale": stale,
                "shed": self.shedder.dropped if self.shedder is not None else 0}

    def late_from_source(self) -> int:
        """Frames that came too late from their source (a decoder behind its clock): dropped by
        admission or by the engine."""
        return ((self.lane.late_from_source if self.lane is not None else 0)
                + (self.admission.late_from_source if self.admission is not None else 0))


class StreamSet:
    """The streams of a run by name, in the order they were listed (see the module)."""

    def __init__(self, streams: list[Stream] = ()):
        self._lock = threading.Lock()
        self._now: Mapping[str, Stream] = MappingProxyType({s.name: s for s in streams})

    @property
    def now(self) -> Mapping[str, Stream]:
        """The streams as they are now: a snapshot that never changes (a change makes a new one)."""
        return self._now

    def list(self, stream: Stream) -> bool:
        """Add `stream`; False if its name is taken already."""
        with self._lock:
            if stream.name in self._now:
                return False
            self._now = MappingProxyType({**self._now, stream.name: stream})
            return True

    def drop(self, name: str) -> None:
        """Take back a stream listed whose source could not be built."""
        with self._lock:
            self._now = MappingProxyType({k: s for k, s in self._now.items() if k != name})

    def get(self, name: str) -> Stream | None:
        return self._now.get(name)

    def __getitem__(self, name: str) -> Stream:
        return self._now[name]

    def __contains__(self, name: object) -> bool:
        return name in self._now

    def __iter__(self) -> Iterator[Stream]:
        return iter(self._now.values())

    def __len__(self) -> int:
        return len(self._now)

    def stats(self) -> dict[str, StreamStats]:
        """Each stream's figures by name (a new dict)."""
        return {name: s.stats for name, s in self._now.items()}


def dropped(lost: dict[str, int]) -> int:
    """Every frame lost before publication: all of `lost` but `corrupt` (packets, not frames)."""
    return sum(n for cause, n in lost.items() if cause != "corrupt")


__all__ = ["Stream", "StreamSet", "CAUSES", "dropped"]
