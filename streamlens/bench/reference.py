"""The bench's yardstick for accuracy: the pipeline's own detector run on every frame of the clip.

`reference_for(detector_config, video, cache_dir)` builds the detector exactly as the pipeline
does (`build_detector` on the pipeline's `detector` section: the same model, resize mode, `conf`,
`classes`), decodes every frame of one pass of the clip with the project's `FileSource` (not
paced), detects each one in order, and keeps per clip frame its `pts`, its boxes (source pixels)
and their class ids. That is what the pipeline would deliver if it could afford the detector on
every frame; the bench scores what a subscriber received against it (`accuracy`).

It is made once per clip and detector and cached as one `.npz` file in `cache_dir` (by default
`$XDG_CACHE_HOME/streamlens/bench`, else `~/.cache/streamlens/bench`). The file's name is a hash of
its key: the clip's resolved path, size and modification time; the model's (and class names
file's) likewise; and every detector setting that changes boxes (backend, imgsz, conf, iou,
classes, resize, max_det, input, device, half, the backend's options). A changed clip, model or
setting makes a new file; the key is stored inside too and checked on load.

Example:
    >>> from streamlens.config import DetectorConfig
    >>> ref = reference_for(DetectorConfig(backend="motion"), "samples/traffic.mp4", "/tmp/cache")  # doctest: +SKIP
    >>> len(ref), ref.boxes(0).shape, ref.computed                                                 # doctest: +SKIP
    (300, (0, 4), True)
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: bump when what the file holds, or how it is made, changes
FORMAT = 1


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/streamlens/bench`, else `~/.cache/streamlens/bench`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "streamlens" / "bench"


def _file_key(path) -> dict | None:
    if path is None:
        return None
    p = Path(path).expanduser().resolve()
    st = p.stat()
    return {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def cache_key(detector_config, video: str) -> dict:
    """What the reference depends on (see the module docs), as a plain dict."""
    c = detector_config
    return {"format": FORMAT, "video": _file_key(video), "model": _file_key(c.model), "names": _file_key(c.names),
            "backend": c.backend, "imgsz": list(c.imgsz) if c.imgsz else None, "conf": c.conf, "iou": c.iou,
            "classes": list(c.classes) if c.classes is not None else None, "resize": c.resize,
            "max_det": c.max_det, "agnostic_nms": c.agnostic_nms,
            "input": c.input.model_dump(exclude_none=True) if c.input is not None else None, "device": c.device, "half": c.half,
            "options": dict(c.options or {})}


@dataclass
class Reference:
    """Detections of every frame of one pass of a clip: `pts` `(N,)` seconds, and per frame the
    rows `offsets[i]:offsets[i + 1]` of `xyxy` `(M, 4)` and `cls` `(M,)`. `path` is the cache file;
    `computed` is True when this call detected the clip, False when it was read from the cache."""

    pts: np.ndarray
    offsets: np.ndarray
    xyxy: np.ndarray
    cls: np.ndarray
    path: Path | None = None
    computed: bool = False
    _links: list | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.pts)

    def boxes(self, i: int) -> np.ndarray:
        return self.xyxy[self.offsets[i]:self.offsets[i + 1]]

    def classes(self, i: int) -> np.ndarray:
        return self.cls[self.offsets[i]:self.offsets[i + 1]]

    @classmethod
    def from_frames(cls, pts, boxes: list, classes: list, **kw) -> "Reference":
        """From per-frame lists: `boxes[i]` `(M_i, 4)`, `classes[i]` `(M_i,)`."""
        counts = [len(b) for b in boxes]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        xyxy = np.concatenate([np.asarray(b, np.float32).reshape(-1, 4) for b in boxes]) if boxes else np.empty((0, 4))
        ids = np.concatenate([np.asarray(c, np.int64).reshape(-1) for c in classes]) if classes else np.empty(0)
        return cls(np.asarray(pts, np.float64), offsets, xyxy.astype(np.float32), ids.astype(np.int64), **kw)


def detect_every_frame(detector_config, video: str) -> Reference:
    """Run the pipeline's detector on every frame of one pass of `video`, in order (batches of the
    detector's `max_batch`)."""
    from ..detect import build_detector
    from ..sources.file import FileSource

    detector = build_detector(detector_config)
    pts, boxes, classes, batch = [], [], [], []

    def flush() -> None:
        for detections in detector.detect(batch):
            boxes.append(np.asarray(detections.xyxy, np.float32).reshape(-1, 4))
            ids = detections.class_id if detections.class_id is not None else np.full(len(detections), -1)
            classes.append(np.asarray(ids, np.int64))
        batch.clear()

    try:
        with FileSource("reference", video) as source:
            for frame in source.frames(threading.Event()):
                pts.append(frame.pts if frame.pts is not None else float(frame.index))
                # the whole picture converted first: the reference is the detector on the full-size
                # BGR picture, resized by OpenCV, whichever path a pipeline's keyframes take
                # (`Frame.scaled`), so a change of that path is scored against it, not hidden
                frame.image  # noqa: B018 - converts and keeps it
                batch.append(frame)
                if len(batch) >= max(1, detector_config.max_batch):
                    flush()
            if batch:
                flush()
    finally:
        detector.close()
    return Reference.from_frames(pts, boxes, classes)


def reference_for(detector_config, video: str, cache_dir: str | Path | None = None) -> Reference:
    """The cached reference of `video` for this detector, made (and cached) when there is none."""
    key = cache_key(detector_config, video)
    text = json.dumps(key, sort_keys=True)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = folder / f"reference-{hashlib.sha1(text.encode()).hexdigest()[:16]}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as data:
                if str(data["key"]) == text:
                    return Reference(data["pts"], data["offsets"], data["xyxy"], data["cls"], path=path)
        except (OSError, ValueError, KeyError):
            pass  # unreadable or another key: made again below
    ref = detect_every_frame(detector_config, video)
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.stem + f".{os.getpid()}.tmp.npz")
    np.savez_compressed(partial, key=np.array(text), pts=ref.pts, offsets=ref.offsets, xyxy=ref.xyxy, cls=ref.cls)
    os.replace(partial, path)
    ref.path, ref.computed = path, True
    return ref


__all__ = ["Reference", "reference_for", "detect_every_frame", "cache_key", "default_cache_dir"]
