"""What the HTTP server reads of a run: `RunView`, met by `graph.run.pipeline.Pipeline` (one process) and
`scale.supervisor.Supervisor` (several engines).

The server names this protocol rather than either class because both runs start the server: it
importing them would tie the HTTP side to the whole runtime in an import cycle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..config.model import PipelineConfig
    from ..graph.overload.control import BudgetController
    from ..graph.run.stats import StreamStats
    from ..scale.preview import EnginePreviews
    from .preview import PreviewSink


class RunView(Protocol):
    """A run as `/metrics`, `/healthz` and the live page see it. A run over several engines also has
    `engine_restarts` ({engine: restarts so far}), exported to /metrics where present."""

    #: the pipeline file: its sources, `runtime.budget_ms` and `runtime.http`
    config: PipelineConfig
    #: the live page's view of the frames: a `PreviewSink`, or with several engines the
    #: `EnginePreviews` that asks them (None: not made yet, or no page)
    preview: PreviewSink | EnginePreviews | None
    #: the budget controller of this process (None: none here)
    controller: BudgetController | None

    @property
    def stats(self) -> dict[str, StreamStats]:
        """Each stream's figures by name, as they are now."""
        ...

    @property
    def stopping(self) -> bool:
        """True once the run was told to end."""
        ...

    def source_configs(self) -> dict:
        """Every stream's source mapping (`SourceConfig`) by name: the file's and those added."""
        ...

    def queue_depth(self, stream: str) -> int:
        """Frames of `stream` waiting to be processed."""
        ...

    def control_of(self, stream: str) -> tuple[float, bool, float] | None:
        """The budget controller's hold on `stream`: (interval stretch, whether keyframes wait for
        their detections, share of frames shed); None where none watches it."""
        ...

    def peer_refusals(self) -> dict[str, dict[str, int]]:
        """Peers each zmq sink refused at their handshake or disconnected (and topics a relay did not
        pass on), by the sink's key path and the reason (streamlens/wire/peers.py)."""
        ...

    def sink_losses(self) -> dict[str, int]:
        """Messages each sink could not deliver so far, by its entry (`sinks[0] (rtsp)`), 0 included."""
        ...

    def secondary_stats(self) -> dict:
        """The secondary models' figures by `secondary` entry, the cache's own under `cache`; empty
        where none run in this process."""
        ...
