"""The reid stage: each object of a `reid.across` group's streams gets its `global_id`.

It runs last among the result stages (graph/publish/build.py). The appearances come from the
secondary stage, which runs the `reid` entry (streamlens/reid/model.py) and puts each track's new
`Embedding` named `reid` among the result's messages; this stage hands them to the group's
`Linker` (streamlens/reid/links.py), then sets each object's global_id in
`detections.data["global_id"]` (-1: untracked) and adds `global_id` to the object of each event of
the result. A link made on a frame shows from that frame on; the frames before keep the track's
own global_id (a result is never changed once published).

The group's clock (`reid.clock`): `wall`, each frame's decode time (`ts`), which cameras share;
`media`, each stream's own media time, which files that start together share; `auto`, wall when
every source of the group is live.

Example:
    >>> from streamlens.config.model import ReidConfig
    >>> stage = ReidStage(ReidConfig(across=["a", "b"], clock="media"), live={"a": False, "b": False})
    >>> stage.stats()["links"]
    0
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..frame import Embedding, Event, FrameResult
from ..graph.publish.stage import Stage
from .links import Linker
from .model import NAME


class ReidStage(Stage):
    """One `reid.across` group (see the module's docstring). `live`: each source's `live`, by name
    (for `clock: auto`)."""

    def __init__(self, cfg, live: dict[str, bool]):
        self.streams = frozenset(cfg.across)
        self.linker = Linker(cfg.across, window_s=cfg.window_s, threshold=cfg.threshold, margin=cfg.margin)
        clock = cfg.clock
        if clock == "auto":
            clock = "wall" if all(live.get(name, False) for name in cfg.across) else "media"
        self.clock = clock

    def process(self, result: FrameResult, messages: list) -> tuple[FrameResult, list]:
        stream = result.frame.stream
        if stream not in self.streams:
            return result, messages
        t = result.frame.ts if self.clock == "wall" else float(result.media_s)
        linker = self.linker
        linker.tick(stream, t)
        det = result.detections
        ids = det.tracker_id.tolist() if det.tracker_id is not None and len(det) else []
        size = (result.frame.width, result.frame.height)
        for track, box in zip(ids, det.xyxy.tolist() if ids else ()):
            if track >= 0:
                linker.seen(stream, track, t, box, size)
        for message in messages:
            if isinstance(message, Embedding) and message.name == NAME and message.stream == stream:
                linker.embedded(stream, message.track, message.vector, message.attempts, t)
        linker.sweep(t)
        if not ids:
            return result, messages
        gids = np.array([linker.global_id(stream, k) or -1 if k >= 0 else -1 for k in ids], np.int64)
        result = replace(result, detections=replace(det, data={**det.data, "global_id": gids}))
        return result, [self._with_global_id(m, stream) for m in messages]

    def _with_global_id(self, message, stream: str):
        if not isinstance(message, Event) or message.stream != stream:
            return message
        obj = message.body.get("object")
        if not isinstance(obj, dict) or "id" not in obj:
            return message
        gid = self.linker.global_id(stream, int(obj["id"]))
        if gid is None:
            return message
        return replace(message, body={**message.body, "object": {**obj, "global_id": gid}})

    def stats(self) -> dict:
        """Links made, confident candidates (each taught its pair), tracks kept, transit times learned per pair."""
        return self.linker.figures()


__all__ = ["ReidStage"]
