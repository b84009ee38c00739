"""The secondary stage: models run on the crops of tracked objects, a few times per track, never
holding a frame back.

On the engine's thread, for each keyframe the tracker applied (`offer`; a late one too, when its
detections come), every tracked object that a `secondary` entry applies to (its label in `classes`,
its box's shorter side at least `min_size` and inside the frame, its track seen by the detector on
at least two keyframes: a track of one keyframe is often a blink that ends before its answer comes)
is cropped at the detector's own box on that keyframe, if that entry wants another look at its
track:

- its first good view;
- again when its box has grown by `regrow` (0.2: a fifth more area) since the last look, or
  `every_s` after it;
- at most `max_attempts` looks per track.

The crops (copies of the keyframe's pixels in the boxes the detector saw: the same pixels give the
same crop in every pipeline, whatever its tracking did before) go to one worker thread,
which batches each model's crops of every stream, up to `max_batch` within `max_wait_ms`, looks
their outputs up in the cache by the crops' pixel hash (`runtime.cache`), runs the model on the
rest and stores what it computed. Entries that name the same model, input size and padding share
one run per crop (one backbone, several heads: each reads its own `output`). A camera's crop the
worker cannot take (its queue full) is dropped, counted, and its track may be looked at again later.

A file read as a file (its stream not `live`) is held back for its answers as it is for its
detections: its crops wait for room in the queue instead of being dropped, and the result of a
keyframe that offered crops waits until every one is answered (the worker runs what it holds at
once, without waiting out `max_wait_ms`), so each answer applies on that very keyframe: the same
frames, attributes and `embedding` messages on every run and machine (`waited_s`: how long files
waited). A camera is never held back.

A camera's answers come back to the engine's thread and apply to their track from the next frame it
publishes (`process`, the first result stage: graph/publish/stages.py): a `classify` entry's answer is
the score-weighted vote over its looks (each look votes for its top label with that label's
probability; the label with the most weight wins, its score the mean of its probabilities) and
becomes the object's `attributes[name]` on every frame of the track from then on (in the
result's `detections.data["attributes"]`, one entry per object); an `embed` entry's answer is
the mean of its looks' unit vectors, kept with the track (`embedding(stream, track)`) and
published as an `embedding` message of its own each time it changes, never in the frame messages.

Example:
    >>> stage = SecondaryStage([entry], cache)   # doctest: +SKIP
    >>> stage.start(); stage.offer(frame, detected, tracked)  # doctest: +SKIP
    >>> result, messages = stage.process(result, [])  # doctest: +SKIP
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field, replace

import numpy as np

from ..analytics.snapshots import crop
from ..frame import Embedding, FrameResult, track_labels
from ..track.matching import box_iou
from .cache import cached_outputs
from .model import CropModel
from .worker import WAIT_STEP_S, LastSeen, WorkerStage

#: crops waiting for the worker, at most (beyond: a camera's are dropped and counted, a file waits)
QUEUE_SIZE = 256


def detector_boxes(tracked: np.ndarray, found: np.ndarray, min_iou: float = 0.5) -> list:
    """For each tracked box, the detector's box it rests on (the one it overlaps most, at least
    `min_iou`) as a list, or None where the detector saw nothing there.

    Example:
        >>> detector_boxes(np.array([[0, 0, 10, 10], [50, 50, 60, 60.]]), np.array([[1, 0, 11, 10.]]))
        [[1.0, 0.0, 11.0, 10.0], None]
    """
    if not len(tracked):
        return []
    if not len(found):
        return [None] * len(tracked)
    iou = box_iou(tracked, found)
    best = iou.argmax(1)
    return [found[k].astype(np.float64).tolist() if iou[i, k] >= min_iou else None for i, k in enumerate(best)]


def read_labels(labels) -> list[str] | None:
    """An entry's `labels`: a list, or a file of one name per line (blank lines skipped)."""
    if labels is None or isinstance(labels, list):
        return labels
    with open(labels, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


@dataclass
class _Look:
    """What one entry knows of one track."""

    attempts: int = 0  # looks asked for (in flight or answered)
    answered: int = 0
    area: float = 0.0  # the box's area at the last look
    at: float = float("-inf")  # media time of the last look
    votes: dict = field(default_factory=dict)  # classify: label index -> [probability sum, looks]
    vector: np.ndarray | None = None  # embed: the sum of unit vectors
    answer: dict | None = None


class _Head:
    """One `secondary` entry: which tracks it looks at, and what its looks become."""

    def __init__(self, cfg, index: int, model: CropModel):
        self.cfg, self.name, self.kind = cfg, cfg.name, cfg.kind
        self.output = model.output_index(cfg.output, f"secondary[{index}].output")
        self.classes = None if cfg.classes is None else frozenset(cfg.classes)
        self.labels = read_labels(cfg.labels)
        self.names = model.names if self.output == 0 else None  # a model's metadata names its first output's classes
        self.calls = 0  # looks answered
        self.tracks = 0  # tracks looked at

    def label(self, k: int) -> str:
        if self.labels is not None and k < len(self.labels):
            return self.labels[k]
        if self.names is not None and k in self.names:
            return self.names[k]
        return str(k)

    def wants(self, look: _Look, label: str, box, width: int, height: int, t: float) -> bool:
        """Whether this track gets another look now."""
        if self.classes is not None and label not in self.classes:
            return False
        if look.attempts >= self.cfg.max_attempts or look.attempts > look.answered:
            return False  # enough looks, or one still on its way
        x1, y1, x2, y2 = box
        if min(x2 - x1, y2 - y1) < self.cfg.min_size or x1 < 1 or y1 < 1 or x2 > width - 1 or y2 > height - 1:
            return False  # too small, or cut by the frame's edge: not a good view
        if look.attempts == 0:
            return True
        area = (x2 - x1) * (y2 - y1)
        if area >= look.area * (1 + self.cfg.regrow):
            return True
        return self.cfg.every_s is not None and t - look.at >= self.cfg.every_s

    def learn(self, look: _Look, row: np.ndarray) -> bool:
        """Take one look's output; whether the answer changed."""
        look.answered += 1
        self.calls += 1
        before = look.answer
        if self.kind == "classify":
            probs = row.astype(np.float64)
            if probs.min() < 0 or abs(probs.sum() - 1) > 1e-3:  # logits: made probabilities
                e = np.exp(probs - probs.max())
                probs = e / e.sum()
            k = int(probs.argmax())
            vote = look.votes.setdefault(k, [0.0, 0])
            vote[0] += float(probs[k])  # each look votes for its top label, weighted by its probability
            vote[1] += 1
            best = max(look.votes, key=lambda j: look.votes[j][0])
            weight, n = look.votes[best]
            look.answer = {"label": self.label(best), "score": round(weight / n, 4)}
        else:
            unit = row.astype(np.float32) / max(float(np.linalg.norm(row)), 1e-12)
            look.vector = unit if look.vector is None else look.vector + unit
            look.answer = {"attempts": look.answered}
        return look.answer != before

    def vector(self, look: _Look) -> np.ndarray | None:
        if look.vector is None:
            return None
        return look.vector / max(float(np.linalg.norm(look.vector)), 1e-12)


class _Group:
    """The entries that share one model, input size and padding: one run per crop."""

    def __init__(self, model: CropModel, cfg):
        self.model = model
        self.padding = cfg.padding
        self.max_batch = cfg.max_batch
        self.max_wait_s = cfg.max_wait_ms / 1000
        self.cache = cfg.cache
        self.heads: list[_Head] = []
        self.jobs: deque = deque()
        self.batches: list[int] = []  # sizes of the last batches run
        self.computed = 0  # crops the model ran on
        self.cached = 0  # crops whose outputs the cache had
        self.ms = 0.0  # model time, in total
        self.dropped = 0


@dataclass(slots=True)
class _Job:
    stream: str
    track: int
    heads: tuple  # indices into the group's heads
    crop: np.ndarray
    queued: float


class SecondaryStage(WorkerStage):
    """Every `secondary` entry of a pipeline (see the module's docstring). `start()` the worker,
    `offer()` each keyframe's tracked objects and `process()` each result before it is published (both
    on the engine's thread), `close()` at the end (streamlens/secondary/worker.py)."""

    name = "secondary"
    offers = True

    def __init__(self, entries: list, cache=None, models: dict | None = None, streams=None):
        """`models`: entries' models already made, by the entry's index (the `reid` section's:
        streamlens/reid/model.py); the others are loaded here. `streams`: the run's `StreamSet`
        (files are held back for their answers; None: every stream is taken for a camera)."""
        super().__init__(cache, QUEUE_SIZE, streams)
        models_made = models or {}
        groups: dict[tuple, _Group] = {}
        models: dict[tuple, CropModel] = {}
        self.heads: list[tuple[_Group, _Head]] = []
        for i, cfg in enumerate(entries):
            mean, std = cfg.mean, cfg.std
            key = (str(cfg.model), cfg.imgsz, cfg.threads, str(mean), str(std))
            if i in models_made:
                models[key] = models_made[i]
            elif key not in models:
                models[key] = CropModel(cfg.model, imgsz=cfg.imgsz, threads=cfg.threads, where=f"secondary[{i}].model",
                                        mean=mean, std=std)
            model = models[key]
            group_key = (*key, cfg.padding)
            if group_key not in groups:
                groups[group_key] = _Group(model, cfg)
            group = groups[group_key]
            head = _Head(cfg, i, model)
            group.heads.append(head)
            self.heads.append((group, head))
        self.groups = list(groups.values())
        self._classify = frozenset(head.name for _, head in self.heads if head.kind == "classify")
        self._looks: dict[str, dict[int, dict[str, _Look]]] = defaultdict(dict)  # stream -> track -> name -> look
        self._seen = LastSeen()
        self._sightings: dict[str, dict[int, int]] = defaultdict(dict)  # stream -> track -> keyframes seen on
        self._now: dict[str, float] = {}
        self._embedding_seq: dict[str, int] = defaultdict(int)
        self._answered = threading.Condition()  # the worker tells that it has put answers in `_done`
        self._flush = threading.Event()  # a file waits: the worker runs what it holds at once
        # the answers in `_done[stream]`: (track, group, heads, outputs)

    # -- the engine's thread ------------------------------------------------------------------

    def offer(self, frame, found, det) -> None:
        """A keyframe whose detections the tracker applied, in time or late: `found`, the detector's
        boxes on `frame`, and `det`, its tracked objects. The objects whose tracks want a look are
        cropped at the detector's own box (the one the tracked box came from, by overlap), for the
        worker; a track is looked at from its second keyframe on (a track seen once may be a blink)."""
        if det.tracker_id is None or not len(det):
            return
        t = self._now.get(frame.stream, 0.0)  # the stream's media time now (a late keyframe is older)
        labels = track_labels(det)[1]  # a track's classes are chosen by its label, not one keyframe's class
        looks = self._looks[frame.stream]
        sightings = self._sightings[frame.stream]
        width, height = frame.width, frame.height
        seen = detector_boxes(det.xyxy, found.xyxy if found is not None else np.empty((0, 4)))
        for i, track in enumerate(det.tracker_id.tolist()):
            if track < 0 or seen[i] is None:
                continue  # not seen by the detector on this keyframe: carried by motion
            sightings[track] = sightings.get(track, 0) + 1
            if sightings[track] < 2:
                continue
            label = str(labels[i])
            box = seen[i]
            mine = looks.setdefault(track, {})
            for group in self.groups:
                wanted = []
                for j, head in enumerate(group.heads):
                    look = mine.get(head.name)
                    if look is None:
                        look = mine[head.name] = _Look()
                    if head.wants(look, label, box, width, height, t):
                        wanted.append(j)
                if not wanted:
                    continue
                part = crop(frame.image, box, group.padding)
                if part is None:
                    continue
                if not self._put((group, _Job(frame.stream, track, tuple(wanted), part.copy(), time.perf_counter()))):
                    group.dropped += 1
                    continue
                self._open[frame.stream] += 1
                area = (box[2] - box[0]) * (box[3] - box[1])
                for j in wanted:
                    look = mine[group.heads[j].name]
                    if look.attempts == 0:
                        group.heads[j].tracks += 1
                    look.attempts += 1
                    look.area, look.at = area, t

    def process(self, result: FrameResult, messages: list) -> tuple[FrameResult, list]:
        """A result stage (graph/publish/stages.py): take the answers that came back for the result's stream,
        and pass on the result with what is known of each tracked object's track in
        `detections.data["attributes"]` (the same result when nothing is known of any); the
        embeddings that changed go after `messages`."""
        self.check()
        frame, det = result.frame, result.detections
        stream = frame.stream
        t = self._now[stream] = result.media_s
        looks = self._looks[stream]
        changed: dict[tuple[int, str], _Head] = {}
        done = self._done[stream]
        self.hold_for_answers(stream, self._wait_answered, self._flush.set)
        while done:
            track, group, heads, outputs = done.popleft()
            self._open[stream] -= 1
            mine = looks.get(track)
            if mine is None:
                continue
            for j in heads:
                head = group.heads[j]
                if head.learn(mine[head.name], outputs[head.output]) and head.kind == "embed":
                    changed[(track, head.name)] = head
        attributes: list = []
        ids = det.tracker_id.tolist() if det.tracker_id is not None and len(det) else []
        for track in ids:
            if track < 0:
                attributes.append(None)
                continue
            self._seen.see(stream, track, t)
            mine = looks.get(track)
            known = None
            if mine:
                known = {name: look.answer for name, look in mine.items()
                         if look.answer is not None and name in self._classify}
            attributes.append(known or None)
        if any(a is not None for a in attributes):
            column = np.empty(len(attributes), dtype=object)
            column[:] = attributes
            result = replace(result, detections=replace(det, data={**det.data, "attributes": column}))
        for track in self._seen.sweep(stream, t):  # tracks long unseen
            looks.pop(track, None)
            self._sightings[stream].pop(track, None)
        return result, messages + [self._embedding(result, track, head) for (track, _), head in changed.items()]

    def _put(self, item) -> bool:
        """`item` into the worker's queue: a camera's only if there is room, a file's once there is
        (False: not taken, the worker has stopped)."""
        if self._live(item[1].stream):
            try:
                self._inbox.put_nowait(item)
                return True
            except queue.Full:
                return False
        while not self._stop.is_set() and self.error is None:
            try:
                self._inbox.put(item, timeout=WAIT_STEP_S)
                return True
            except queue.Full:
                self._flush.set()  # full: the worker runs what it holds now
                if not self._thread.is_alive():
                    return False
        return False

    def _wait_answered(self, predicate, timeout: float) -> bool:
        """Wait until `predicate()`, at most `timeout` s, woken as the worker puts answers in `_done`."""
        with self._answered:
            return self._answered.wait_for(predicate, timeout)

    def embedding(self, stream: str, track: int, name: str | None = None) -> np.ndarray | None:
        """The embedding kept for `track` of `stream` by entry `name` (default: the first embed
        entry), None when it has none yet. Call it on the engine's thread (a sink's write)."""
        for _, head in self.heads:
            if head.kind == "embed" and name in (None, head.name):
                look = self._looks.get(stream, {}).get(track, {}).get(head.name)
                return None if look is None else head.vector(look)
        return None

    def stream_ended(self, stream: str) -> None:
        self._seen.forget(stream)
        self._looks.pop(stream, None)
        self._sightings.pop(stream, None)
        self._done.pop(stream, None)
        self._open.pop(stream, None)

    def _embedding(self, result: FrameResult, track: int, head: _Head) -> Embedding:
        stream = result.frame.stream
        seq = self._embedding_seq[stream]
        self._embedding_seq[stream] = seq + 1
        look = self._looks[stream][track][head.name]
        return Embedding(stream, seq, track, head.name, head.vector(look), look.answered, result)

    def stats(self) -> dict:
        """Per entry: looks answered, tracks looked at, looks per track; per model: crops computed
        and found in the cache, mean batch size, ms per computed crop, crops dropped (cameras' only),
        seconds files waited for their answers."""
        out = {}
        for group, head in self.heads:
            batches = group.batches[-200:]
            out[head.name] = {
                "calls": head.calls, "tracks": head.tracks,
                "attempts_per_track": round(head.calls / head.tracks, 3) if head.tracks else None,
                "computed": group.computed, "cached": group.cached,
                "hit_rate": round(group.cached / (group.cached + group.computed), 4)
                if group.cached + group.computed else None,
                "batch_mean": round(sum(batches) / len(batches), 2) if batches else None,
                "ms_per_crop": round(group.ms / group.computed, 3) if group.computed else None,
                "dropped": group.dropped, "waited_s": round(self.waited_s, 3),
            }
        return out

    # -- the worker's thread ------------------------------------------------------------------

    def _work(self) -> None:
        flush = self._flush.is_set()  # a file waits: every batch is due
        self._gather(flush)
        for group in self.groups:
            while group.jobs and (flush or len(group.jobs) >= group.max_batch
                                  or time.perf_counter() - group.jobs[0].queued >= group.max_wait_s):
                self._run_batch(group)
        if flush and self._inbox.empty():
            self._flush.clear()  # a file that waits still sets it again

    def _gather(self, flush: bool = False) -> None:
        """Move crops from the inbox to their groups, waiting at most until a batch is due (`flush`:
        not at all)."""
        due = [g.jobs[0].queued + g.max_wait_s for g in self.groups if g.jobs]
        wait = 0.0 if flush else max(0.0, min(due) - time.perf_counter()) if due else 0.1
        try:
            group, job = self._inbox.get(timeout=wait) if wait > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return
        group.jobs.append(job)
        while True:
            try:
                group, job = self._inbox.get_nowait()
            except queue.Empty:
                return
            group.jobs.append(job)

    def _run_batch(self, group: _Group) -> None:
        jobs = [group.jobs.popleft() for _ in range(min(group.max_batch, len(group.jobs)))]
        model = group.model

        def run(crops: list) -> list:
            started = time.perf_counter()
            computed = model.run(crops)
            group.ms += (time.perf_counter() - started) * 1000
            return [[out[row] for out in computed] for row in range(len(crops))]

        outputs, todo, foreign = cached_outputs(self.cache if group.cache else None, model.id,
                                                [job.crop for job in jobs], model.fits, run)
        self.foreign += foreign  # not ours (a shared Redis): counted, computed again
        if todo:
            group.computed += len(todo)
            group.batches.append(len(todo))
            del group.batches[:-1000]
        group.cached += len(jobs) - len(todo)
        with self._answered:
            for job, out in zip(jobs, outputs):
                self._done[job.stream].append((job.track, group, job.heads, out))
            self._answered.notify_all()


__all__ = ["SecondaryStage", "read_labels"]
