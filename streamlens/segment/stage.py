"""The mask stage: SAM run the way video makes cheap, never holding a frame back.

Which keyframes the encoder may run on is chosen by the source's own time (`Frame.pts`), not by
what the tracks went through, so that a looping file's second lap, or a second pipeline on the same
file, asks for the very frames the first did, and the cache has them all:

- a stream's time is cut into steps of `every_s` (`floor(pts / every_s)`); the first keyframe at or
  after the start of each step (the first keyframe of the stream, and the first after its `pts`
  went back: a file that looped, a camera that restarted) is the step's *mask keyframe*: every
  tracked object on it that is due a fresh mask is prompted, all in one job. An object is due when
  the detector saw it on this keyframe (its box rests on one of the detector's boxes), its label is
  in `classes`, its box's shorter side is at least `min_size`, and its track had no mask asked for
  in this step yet;
- on any other keyframe, a job is made only for a *new* track (no mask asked for it yet: its first
  mask need not wait up to `every_s`), and the objects due (as above) come along in it.

So all the tracks of a stream are refreshed together, one encoder run per step, however their
births are spread; and in file mode, where keyframes and a detector's boxes are the same on every
pass, the frames the encoder runs on are the same on every pass (a detector with a memory of its
own, the motion detector's background, can make a pass start otherwise).

When some objects are due, the keyframe's pixels (copied: a frame's buffer may be reused) and the
detector's boxes of those objects go to one worker thread, as one job; when the worker's queue is
full the job is dropped (counted), and its new tracks try again on the next keyframe, the others on
the next mask keyframe.

The worker, per job: the encoder's embedding of the frame is looked up in the cache by the frame's
pixel hash (`crop_key` over the whole frame: streamlens/secondary/cache.py; the same `pack` form,
keys of their own model id), and computed and stored only when it is not there; then the prompt
decoder runs once for all the job's boxes (streamlens/segment/model.py).

Answers come back to the engine's thread and apply from the next result of their stream that is
published (`process`): each mask is pinned to its track's box on its keyframe, and from then on
moves and scales with the track's box on every frame (streamlens/segment/carry.py) until a fresh
one replaces it. An answer that comes after its keyframe's own result was published is counted
`late`, and how many frames after its keyframe it applied (`lag_frames`, the median).

Example:
    >>> stage = SegmentStage(cfg.segment, cache)    # doctest: +SKIP
    >>> stage.start(); stage.offer(frame, found, tracked)   # doctest: +SKIP
    >>> result, messages = stage.process(result, [])        # doctest: +SKIP
"""

from __future__ import annotations

import math
import queue
import time
from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from ..frame import FrameResult, track_labels
from ..secondary.cache import cached_outputs
from ..secondary.stage import detector_boxes
from ..secondary.worker import WorkerStage
from .carry import MaskBook
from .model import load_sam

#: keyframes waiting for the worker, at most (beyond: dropped and counted)
QUEUE_SIZE = 2
#: the largest cached embedding read back (bytes): SAM 2's, as float16, is about 8 MB
MAX_EMBEDDING_BYTES = 64 << 20


@dataclass(slots=True)
class _Job:
    stream: str
    frame: int  # the keyframe's index
    image: np.ndarray
    tracks: list[int]
    prompts: np.ndarray  # the detector's boxes, one per track (source pixels)
    boxes: np.ndarray  # the tracked boxes on the keyframe, one per track: where each mask is pinned


class SegmentStage(WorkerStage):
    """`segment:` with a SAM `model` (see the module's docstring). `start()` the worker, `offer()`
    each keyframe's objects and `process()` each result (both on the engine's thread), `close()` at
    the end (streamlens/secondary/worker.py). `cache`: a `MemoryCache` / `RedisCache` for the
    embeddings (None: none)."""

    name = "segment"
    offers = True
    close_timeout_s = 10.0

    def __init__(self, cfg, cache=None, sam=None):
        sam = sam if sam is not None else load_sam(cfg.model, cfg.decoder, device=cfg.device, threads=cfg.threads)
        super().__init__(cache if cfg.cache else None, QUEUE_SIZE)
        self.cfg = cfg
        self.sam = sam
        self._asked: dict[str, dict[int, int]] = defaultdict(dict)  # stream -> track -> the step of its last job
        self._step: dict[str, tuple[int, float, int]] = {}  # stream -> (step, pts of its last keyframe, steps begun)
        self.book = MaskBook(cfg.output, on_forget=lambda stream, track: self._asked[stream].pop(track, None))
        self.classes = None if cfg.classes is None else frozenset(cfg.classes)
        self._published: dict[str, int] = {}  # stream -> index of the newest frame published
        # the answered jobs in `_done[stream]`: (job, masks)
        # the worker's counts (and `foreign`: cached values that were not this encoder's embedding)
        self.encoded = 0  # encoder runs
        self.cached = 0  # embeddings found in the cache
        self.decoded = 0  # masks decoded (objects)
        self.segmented = 0  # jobs answered: keyframes segmented
        self.segmented_frames: deque = deque(maxlen=10_000)  # (stream, frame index, encoded?) per job answered
        self.encode_ms: list[float] = []
        self.decode_ms: list[float] = []  # per job: the decoder's time for all its objects
        self.decode_objects: list[int] = []
        # the engine thread's counts
        self.jobs = 0
        self.dropped = 0  # jobs the worker's queue had no room for
        self.applied = 0
        self.late = 0
        self.lag_frames: list[int] = []

    # -- the engine's thread ------------------------------------------------------------------

    def offer(self, frame, found, det) -> None:
        """A keyframe whose detections the tracker applied: `found`, the detector's boxes on `frame`;
        `det`, its tracked objects. On the step's mask keyframe the objects due a fresh mask go to
        the worker as one job, on another keyframe only when a new track is among them (see the
        module's docstring)."""
        stream = frame.stream
        fresh, step = self._mask_keyframe(frame)  # every keyframe counts, with objects or without
        if det.tracker_id is None or not len(det):
            return
        asked = self._asked[stream]
        labels = track_labels(det)[1]
        seen = detector_boxes(det.xyxy, found.xyxy if found is not None else np.empty((0, 4)))
        tracks, prompts, boxes = [], [], []
        new = False
        for i, track in enumerate(det.tracker_id.tolist()):
            box = seen[i]
            if track < 0 or box is None or asked.get(track) == step:
                continue
            if self.classes is not None and str(labels[i]) not in self.classes:
                continue
            if min(box[2] - box[0], box[3] - box[1]) < self.cfg.min_size:
                continue
            new = new or track not in asked
            tracks.append(track)
            prompts.append(box)
            boxes.append(det.xyxy[i].astype(np.float64))
        if not tracks or not (fresh or new):
            return
        job = _Job(stream, frame.index, frame.image.copy(), tracks, np.array(prompts, np.float64), np.array(boxes))
        try:
            self._inbox.put_nowait(job)
        except queue.Full:
            self.dropped += 1
            return
        self.jobs += 1
        for track in tracks:
            asked[track] = step

    def _mask_keyframe(self, frame) -> tuple[bool, int]:
        """Whether `frame` (a keyframe) is its stream's mask keyframe: the first at or after the start
        of a step of `every_s` of its `pts` (its clock when it has none), or after its `pts` went back;
        and the number of the step it is in (counted per stream, so a loop's steps are new ones)."""
        t = frame.pts if frame.pts is not None else frame.clock
        step = math.floor(t / self.cfg.every_s)
        last = self._step.get(frame.stream)
        fresh = last is None or step != last[0] or t < last[1]
        begun = (0 if last is None else last[2] + 1) if fresh else last[2]
        self._step[frame.stream] = (step, t, begun)
        return fresh, begun

    def process(self, result: FrameResult, messages: list) -> tuple[FrameResult, list]:
        """A result stage (graph/publish/stages.py): the answers that came back for the result's stream are
        taken, and the result goes on with each tracked object's mask (streamlens/segment/carry.py)."""
        self.check()
        stream = result.frame.stream
        done = self._done[stream]
        while done:
            job, masks = done.popleft()
            published = self._published.get(stream)
            if published is not None and published >= job.frame:
                self.late += 1
            self.lag_frames.append(result.frame.index - job.frame)
            del self.lag_frames[:-1000]
            for track, mask in zip(job.tracks, masks):
                self.book.learn(stream, track, mask)
            self.applied += 1
        self._published[stream] = result.frame.index
        return self.book.attach(result), messages

    def stream_ended(self, stream: str) -> None:
        self.book.forget(stream)
        for table in (self._asked, self._step, self._done, self._published):
            table.pop(stream, None)

    def stats(self) -> dict:
        """Keyframes segmented, encoder runs, embeddings found in the cache, masks decoded, median encoder ms, median
        decoder ms per object, jobs, jobs dropped, answers applied and late, median lag in frames."""
        per_object = [ms / n for ms, n in zip(self.decode_ms[-200:], self.decode_objects[-200:]) if n]
        return {"source": "sam", "segmented": self.segmented, "encoded": self.encoded, "cached": self.cached, "foreign": self.foreign,
                "decoded": self.decoded, "encode_ms": _median(self.encode_ms[-200:]),
                "decode_ms_per_object": _median(per_object), "jobs": self.jobs, "dropped": self.dropped,
                "applied": self.applied, "late": self.late,
                "lag_frames": _median(self.lag_frames)}

    # -- the worker's thread ------------------------------------------------------------------

    def _work(self) -> None:
        try:
            job = self._inbox.get(timeout=0.1)
        except queue.Empty:
            return
        encoded = self.encoded
        masks = self._segment(job)
        self.segmented += 1
        self.segmented_frames.append((job.stream, job.frame, self.encoded > encoded))
        self._done[job.stream].append((job, masks))

    def embedding(self, image: np.ndarray) -> list[np.ndarray]:
        """The encoder's embedding of `image`: from the cache when it has it, else computed (and stored)."""

        def encode(images: list) -> list:
            started = time.perf_counter()
            arrays = self.sam.encode(images[0])
            self.encode_ms.append((time.perf_counter() - started) * 1000)
            del self.encode_ms[:-1000]
            self.encoded += 1
            return [arrays]

        outputs, computed, foreign = cached_outputs(self.cache, self.sam.id, [image], self.sam.fits, encode,
                                                    MAX_EMBEDDING_BYTES)
        self.foreign += foreign
        self.cached += not computed
        return outputs[0]

    def _segment(self, job: _Job) -> list:
        arrays = self.embedding(job.image)
        height, width = job.image.shape[:2]
        started = time.perf_counter()
        made = self.sam.decode(arrays, job.prompts, width, height)
        self.decode_ms.append((time.perf_counter() - started) * 1000)
        self.decode_objects.append(len(made))
        del self.decode_ms[:-1000], self.decode_objects[:-1000]
        self.decoded += len(made)
        # each mask pinned to its track's box on the keyframe, which later boxes of the track follow
        return [type(m)(m.bits, m.region, box) for m, box in zip(made, job.boxes)]


def _median(values: list) -> float | None:
    return round(float(np.median(values)), 3) if values else None


__all__ = ["SegmentStage", "QUEUE_SIZE"]
