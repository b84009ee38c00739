"""The items that travel through the graph: a decoded frame, its result, and the end of a stream.

One frame type goes from the source to the sinks: a `Frame` is decoded once, its pixels are never
copied on the way, and the detector, tracker and sinks all read the same array. Detections are
`supervision.Detections` (numpy arrays inside), the currency every stage speaks.

A frame decoded in a worker process arrives as a `YuvPicture`, the decoder's own 4:2:0 planes (half
the bytes of BGR), and becomes BGR only when something reads `Frame.image`.

Example:
    >>> import numpy as np
    >>> f = Frame(stream="cam1", index=0, pts=0.0, ts=0.0, image=np.zeros((2, 4, 3), np.uint8))
    >>> (f.width, f.height)
    (4, 2)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .pictures import _LUMA_FIRST, YuvPicture, scaled_bgr, to_bgr

if TYPE_CHECKING:  # supervision takes about a second to import: decode workers never need it
    import supervision as sv


#: the least width and height of a published box, in pixels (detectors and trackers alike): a thinner box covers no whole
#: pixel (nothing to crop or draw), and a result rounds it to a box of no size
MIN_BOX_PX = 1.0


class Frame:
    """One decoded frame of one stream.

    `index` counts decoded frames from 0 (it keeps counting across loops of a file); `pts` is the
    presentation time in seconds (it restarts with each loop of a file); `ts` is the wall-clock time
    at which the frame became available (for a paced file: its scheduled time), for results only;
    `clock` is the same moment on `time.monotonic()`, which every deadline, latency and gap inside
    the graph is measured on (a step of the wall clock changes none of them). `image` is HxWx3 BGR
    uint8. `timings` holds per-stage milliseconds, filled in as the frame travels.

    A source may hand over the decoder's own picture instead (`decoded`: a PyAV `VideoFrame`, or the
    `YuvPicture` a decode worker sent): it becomes `image` the first time something reads `image`
    (that conversion's time is added to `timings["decode"]`). With the `mv` tracker and no sink that
    draws, frames between keyframes are never converted at all, which saves about 1.5 ms of CPU per
    720p frame. `grey_sample()` reads the luma plane directly, without converting; a worker's picture
    brings the scene-cut sample (`thumbnail_step`) made ahead.

    Who writes each slot. A frame changes hands through the graph's channels (source thread ->
    inbox -> engine thread -> the detector's channel -> detector thread); each slot has one writer:
    - `stream`, `index`, `pts`, `ts`, `clock`, `motion_vectors`, `_size`: the source, as it makes
      the frame;
    - `scene_cut`, `scheduled` (what the stream's schedule asked), `observed`, `prepared`:
      admission, on the source thread; then `observed` is taken back by the tracker, and `prepared`
      dropped by the engine (a deferred keyframe) or by the detector once used: the thread that
      holds the frame then;
    - `queued`: the source thread, as it puts the frame into the inbox;
    - `keyframe` (decided in one place, `Engine._is_keyframe`), `submitted`, `region`: the engine
      thread;
    - `timings`: the source thread (`decode`) until the inbox, then the engine thread (`queue`,
      `batch`, `detect`, `track`, `total`);
    - `_image`, `_decoded`: the picture's cache: whichever thread reads `image` first converts it
      (and adds that time to `timings["decode"]`); two at once would make the same pixels.

    Example:
        >>> f = Frame("cam1", 0, 0.0, 0.0, np.zeros((4, 8, 3), np.uint8))
        >>> (f.width, f.height, f.grey_sample(2).shape)
        (8, 4, (2, 4))
    """

    __slots__ = ("stream", "index", "pts", "ts", "_image", "_decoded", "_size", "timings", "motion_vectors",
                 "keyframe", "scheduled", "prepared", "observed", "queued", "submitted", "clock", "scene_cut",
                 "region")

    def __init__(self, stream: str, index: int, pts: float | None, ts: float, image: np.ndarray | None = None,
                 timings: dict[str, float] | None = None, motion_vectors: np.ndarray | None = None,
                 keyframe: bool = False, prepared: object = None, *, decoded=None, clock: float | None = None):
        self.stream = stream
        self.index = index
        self.pts = pts
        self.ts = ts
        #: `time.monotonic()` when the frame became available (default: when it was made)
        self.clock = time.monotonic() if clock is None else clock
        self._image = image
        self._decoded = None if image is not None else decoded
        self._size = ((int(image.shape[1]), int(image.shape[0])) if image is not None
                      else (int(decoded.width), int(decoded.height)) if decoded is not None else (0, 0))
        self.timings = {} if timings is None else timings
        #: the decoder's motion vectors for this frame, when the source exports them (else None)
        self.motion_vectors = motion_vectors
        #: what its stream's keyframe schedule asked for this frame, at admission (live streams of the
        #: shared schedule: never asked); the engine decides `keyframe` from it
        self.scheduled = keyframe
        #: whether the detector runs on this frame: decided by the engine (`Engine._is_keyframe`)
        self.keyframe = keyframe
        #: whether the source found this frame a scene cut (live streams of a shared schedule)
        self.scene_cut = False
        #: the detector's input made ahead by `Detector.prepare` on the decode thread (else None); it
        #: lives and dies with the frame, so a frame dropped before detection holds nothing elsewhere
        self.prepared = prepared
        #: what the tracker's motion model keeps of this frame, when `Tracker.prepare` made it ahead
        self.observed = None
        #: when the frame was put into the engine's inbox (`time.perf_counter()`), else None
        self.queued: float | None = None
        #: when the engine handed the frame to the detector (`time.perf_counter()`), else None
        self.submitted: float | None = None
        #: the part of a keyframe the detector looks at, (x1, y1, x2, y2) in whole source pixels
        #: (`detector.regions`, graph/schedule/regions.py): None for the whole frame; one of no area for none
        self.region: tuple[int, int, int, int] | None = None

    @property
    def image(self) -> np.ndarray:
        decoded = self._decoded
        if self._image is None and decoded is not None:
            started = time.perf_counter()
            image = to_bgr(decoded)
            if self._image is None:  # another thread may have converted it meanwhile
                self._image = image
                self.timings["decode"] = self.timings.get("decode", 0.0) + (time.perf_counter() - started) * 1000
            self._decoded = None
        return self._image

    @image.setter
    def image(self, value: np.ndarray) -> None:
        self._image, self._decoded = value, None
        self._size = (int(value.shape[1]), int(value.shape[0]))

    def peek_image(self) -> np.ndarray:
        """The picture as HxWx3 BGR, leaving the frame as it was: `image` when something already made
        it, else the decoder's picture converted here, on the caller's thread, without keeping it or
        adding to the frame's `decode` timing (a viewer's work is not the pipeline's)."""
        image, decoded = self._image, self._decoded
        if image is not None:
            return image
        if decoded is None:  # converted by another thread since the first look
            return self.image
        return to_bgr(decoded, threads=1)

    def scaled(self, width: int, height: int) -> np.ndarray | None:
        """The picture at `width` x `height` as BGR uint8, made straight from the decoder's picture
        by one swscale pass (scaled in YUV, then converted: no full-size BGR image is made, nor
        kept), while nothing has converted the frame yet; None once something has (then `image` is
        there to resize). A keyframe's detector input is made so (detect/neural.py `placement`):
        its pixels within a few levels of the full path's; it saved 0-1.7 ms of a 720p keyframe's
        ~11 ms, within noise, and YOLOX's boxes agree with the full path's at F1 0.954-0.979
        (tools/results/scaled_input.md)."""
        decoded = self._decoded
        if self._image is not None or decoded is None:
            return None
        started = time.perf_counter()
        image = scaled_bgr(decoded, width, height)
        self.timings["decode"] = self.timings.get("decode", 0.0) + (time.perf_counter() - started) * 1000
        return image

    @property
    def width(self) -> int:
        return self._size[0]

    @property
    def height(self) -> int:
        return self._size[1]

    def grey_sample(self, step: int = 4) -> np.ndarray:
        """Every `step`-th pixel of every `step`-th row, grey: the luma plane of a decoded picture
        not yet converted, else the green channel of `image` (close to luma)."""
        decoded = self._decoded
        if self._image is None and isinstance(decoded, YuvPicture):
            return decoded.grey_sample(step)
        if self._image is None and decoded is not None and decoded.format.name in _LUMA_FIRST:
            plane = decoded.planes[0]
            rows = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)
            return rows[:self.height:step, :self.width:step]
        image = self.image
        return image[::step, ::step, 1] if image.ndim == 3 else image[::step, ::step]

    def __repr__(self) -> str:
        return f"Frame(stream={self.stream!r}, index={self.index}, pts={self.pts}, keyframe={self.keyframe})"


class MediaClock:
    """A stream's time, in seconds: its frames' `pts`, made to go on across the loops of a file
    (where `pts` starts again) and across a camera's gaps; a frame without `pts` reads the
    monotonic clock of its arrival. Each stream has one, on its engine lane; results carry its
    reading (`FrameResult.media_s`), which the result stages read.

    Example:
        >>> clock = MediaClock()
        >>> [round(clock.at(pts, 0.0), 3) for pts in (0.0, 9.9, 0.0, 0.1)]   # the file looped after 9.9 s
        [0.0, 9.9, 9.901, 10.001]
    """

    def __init__(self):
        self._offset = 0.0
        self._last: float | None = None

    def __call__(self, frame: Frame) -> float:
        return self.at(frame.pts, frame.clock)

    def at(self, pts: float | None, otherwise: float) -> float:
        """The time of a frame (or a message) at `pts`; `otherwise` when it has none."""
        if pts is None:
            return otherwise
        t = pts + self._offset
        if self._last is not None and t < self._last:  # a loop started again
            self._offset += self._last - t + 1e-3
            t = pts + self._offset
        self._last = t
        return t


@dataclass(slots=True, eq=False)
class EndOfStream:
    """The last item a source emits. `frames` is how many frames it produced; `reason` is
    `"end"` (the input ended), `"stopped"` (the pipeline was asked to stop), `"removed"` (the stream
    alone was, while running: graph/run/changes.py) or `"error"`."""

    stream: str
    frames: int
    reason: str = "end"
    error: str | None = None


@dataclass(frozen=True, slots=True, eq=False)
class FrameResult:
    """What the graph produces for one frame: the frame, the objects on it and how it got there.
    A result is never changed once made: a result stage that adds to it makes a new one
    (`dataclasses.replace`, with new `detections` where it adds per-object data).

    `seq` counts results per stream from 0 with no gaps; `keyframe` says whether the detector ran on
    this frame; `detections` carries boxes in source pixels, `tracker_id` (-1 when untracked), the
    class the detector gave each box (on a keyframe) or its track's last detection (between) in
    `class_id` and `detections.data["class_name"]`, a tracked object's label by vote over its track
    in `data[TRACK_CLASS_ID]` and `data[TRACK_CLASS_NAME]` (`track_labels`), and, once the secondary
    stage has run, what its classifiers know of each object's track in `detections.data["attributes"]`.

    Example:
        >>> f = Frame("cam1", 0, 2.5, 0.0, np.zeros((2, 4, 3), np.uint8))
        >>> r = FrameResult(f, 0, True, empty_detections())
        >>> r.media_s, r.attributes
        (2.5, None)
    """

    frame: Frame
    seq: int
    keyframe: bool
    detections: sv.Detections
    #: the `index` of the newest keyframe of this stream whose detections the tracker had applied
    #: when these boxes were made (`frame.index` on a keyframe in time), None before the first
    detected_frame: int | None = None
    #: what `analytics:` found on this frame (`streamlens.analytics.FrameAnalytics`), None without rules
    analytics: object = None
    #: the stream's media time of this frame, seconds (its lane's `MediaClock`); made without one
    #: (a test, an embedding program), the frame's `pts`, else its `clock`
    media_s: float | None = None

    def __post_init__(self) -> None:
        if self.media_s is None:
            pts = self.frame.pts
            object.__setattr__(self, "media_s", self.frame.clock if pts is None else pts)

    @property
    def attributes(self) -> list | None:
        """Per object, what the `secondary` classifiers know of its track ({name: {"label",
        "score"}}, or None), None when nothing is known of any."""
        found = self.detections.data.get("attributes") if self.detections is not None else None
        return None if found is None else list(found)


@dataclass(slots=True, eq=False)
class Snapshot:
    """An event's picture of its object (`analytics.snapshots`): `jpeg`, the encoded bytes; `kind`,
    `crop` (the object's box) or `frame` (the annotated frame); `frame`, the index of the frame it
    was taken from; `path`, the file it was also written to (None when not written)."""

    jpeg: bytes
    kind: str
    frame: int
    path: str | None = None


@dataclass(slots=True, eq=False)
class Event:
    """Something the analytics saw happen on a stream (`streamlens.analytics`): `seq` counts a
    stream's events from 0 with no gaps (apart from its results' `seq`); `body` holds `event`,
    `object` and the event's own keys; `result` is the frame it happened on; `snapshot`, its
    object's picture when `analytics.snapshots` asks for one."""

    stream: str
    seq: int
    body: dict
    result: FrameResult
    snapshot: Snapshot | None = None


@dataclass(slots=True, eq=False)
class Embedding:
    """A track's embedding by a `secondary` entry of kind `embed` (`name`), made anew from
    `attempts` looks: `vector` is a unit vector; `seq` counts a stream's embeddings from 0 with no
    gaps (apart from its results' and events' `seq`); `result` is the frame it came with."""

    stream: str
    seq: int
    track: int
    name: str
    vector: np.ndarray
    attempts: int
    result: FrameResult


@dataclass(slots=True, eq=False)
class StreamEnd:
    """The result-side end of a stream: what sinks receive after a stream's last `FrameResult`.

    `reason`: `end` (the input ended), `truncated` (it ended before its declared length, or reading
    failed: `detail` says how), `stopped` or `error`. `lost` counts what never became a result, by
    cause (see `RunReport`); `expected` is the frame count the input declared, when it did."""

    stream: str
    seq: int
    frames: int
    reason: str = "end"
    lost: dict = field(default_factory=dict)
    expected: int | None = None
    detail: str | None = None


@dataclass(slots=True, eq=False)
class StatsReport:
    """A periodic report on one stream (about once a second), for sinks that ask for it."""

    stream: str
    values: dict


#: `sv.Detections.data` keys of a tracked object's label: the class its detections scored most over its
#: track's life (streamlens/track/labels.py); `class_id` and `data["class_name"]` are what the detector
#: said of the object on its last keyframe
TRACK_CLASS_ID, TRACK_CLASS_NAME = "track_class_id", "track_class_name"
#: `sv.Detections.data` key of a detector's weak boxes: scored under its `conf`, reported for the
#: tracker alone (they keep a track alive; they never start one and are never shown: track/base.py)
WEAK = "weak"


def track_labels(det: sv.Detections) -> tuple[np.ndarray, np.ndarray]:
    """Each object's label by vote over its track (class ids, names): the track's where the tracker
    set one, else the object's own class (an untracked box, a pipeline without a tracker).

    Example:
        >>> import supervision as sv
        >>> det = sv.Detections(xyxy=np.zeros((2, 4)), class_id=np.array([7, 2]))
        >>> det.data["class_name"] = np.array(["truck", "car"], object)
        >>> track_labels(det)[1].tolist()
        ['truck', 'car']
        >>> det.data[TRACK_CLASS_ID], det.data[TRACK_CLASS_NAME] = np.array([2, 2]), np.array(["car", "car"], object)
        >>> track_labels(det)[1].tolist()
        ['car', 'car']
    """
    n = len(det)
    ids, names = det.data.get(TRACK_CLASS_ID), det.data.get(TRACK_CLASS_NAME)
    if ids is not None and names is not None:
        return np.asarray(ids, np.int64), np.asarray(names, object)
    ids = np.asarray(det.class_id, np.int64) if det.class_id is not None else np.full(n, -1, np.int64)
    names = det.data.get("class_name")
    return ids, (np.asarray(names, object) if names is not None else np.array([str(c) for c in ids], object))


def empty_detections() -> sv.Detections:
    """Detections with no rows, with every field the graph relies on present."""
    import supervision as sv

    det = sv.Detections(
        xyxy=np.empty((0, 4), np.float32),
        confidence=np.empty((0,), np.float32),
        class_id=np.empty((0,), np.int64),
        tracker_id=np.empty((0,), np.int64),
    )
    det.data["class_name"] = np.empty((0,), dtype=object)
    return det
