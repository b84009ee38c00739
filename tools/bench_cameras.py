"""K real RTSP cameras through `runtime.workers: W` on this machine: frames kept, latency and F1.

The target (issue 23): "`workers: 2` with 6 cameras from a real RTSP server on these 2 cores: every
frame kept, p95 <= 33 ms, F1 beside it." One command, which writes tools/results/cameras.md and
tools/results/cameras.json by itself:

    python tools/bench_cameras.py --cameras 6 --workers 2 --baseline 1 --seconds 60 --repeats 3

What runs:
- GStreamer's RTSP server (streamlens/testing/rtsp_server.py `GstRtspServer`, Debian's packages) serves K mounts
  cam1..camK, each fed by its own `ffmpeg -re -stream_loop -1 -c copy -f rtp` publisher of the clip
  (`--clip`, default ../shared/data/video/highway_720p30.mp4, as MPEG-TS with SPS/PPS before every
  keyframe: the same H.264 bitstream, so the same pixels). The server and publishers run through
  every trial: the cameras never stop, as real ones would not.
- Each trial is a fresh `python -m streamlens run` of the pipeline file (`--pipeline`, default
  pipelines/highway_yolox.yaml: its detector, keyframes, tracker and the rest kept as they are)
  with its sources replaced by the K cameras, its sinks by one zmq pub sink on a free port (the
  file's zmq `format`, `hwm` and `frames` kept) that waits for the subscriber's subscriptions,
  `runtime.workers: W` and `/metrics` on a free port. The subscriber is the project's own bench
  listener (`python -m streamlens.bench.listener`, another process, started first). Trials
  alternate between `--workers` and `--baseline` (W=2, W=1, then W=1, W=2, ...), so the
  machine's drift falls on both alike.
- With `--settle S`, the cameras stream for S seconds before the first trial (real cameras have
  been on long before a pipeline connects; without it the first trial starts as soon as the server
  serves every mount).
- Once every camera has published a frame (read from `/metrics`), the trial waits `--warmup` s,
  measures `--seconds` s, scrapes `/metrics` (shed, dropped and lost frames; engine restarts) and
  stops the run with SIGINT. The measured window is the frames whose `ts` (when the frame was
  decoded, i.e. available) falls in it.

Per camera, over the window:
- kept: frames received over frames the camera sent. A camera's `pts` (seconds from its first
  frame, on the RTP clock) counts every frame the camera sent, whether or not it reached the
  decoder, so the frames sent in the window are `round((pts_last - pts_first) * fps) + 1`. Beside
  it, `kept_index`: received over the span of the `frame` index (which misses frames lost before
  the decoder, or dropped by the decode worker when its ring is full).
- latency: the subscriber's clock at receipt minus the message's `ts`; p50 and p95 pooled over
  every camera's frames in the window (nearest rank), and the worst camera's p95.
- behind the camera: `ts - pts` over its smallest value in the connection, p95: how far decoding
  fell behind the camera's own clock (latency counts from `ts`, the decode, so it cannot show a
  backlog in front of the decoder).
- F1 of the received boxes against the same detector on every frame of the clip
  (`streamlens.bench.reference.reference_for`, cached as `streamlens bench` caches it), scored by
  `streamlens.bench.accuracy.score_stream` (IoU 0.5, class-aware, Hungarian per frame) and pooled
  by `accuracy.combine`.

Which clip frame a camera's message shows (the hard part): `frame` counts from the connection and
the publisher loops the clip, so neither gives the clip frame. The RTP timestamps the publisher
sends keep increasing across its loops (ffmpeg adds the clip's duration, 897 frames / 30 fps, at
each loop), so the clip frame is `(round(pts * fps) + offset) mod N` (N: the clip's frames), with
one unknown `offset` per connection (where in the clip the camera was when it connected). It is
found from the boxes, in `clip_frames_of_camera`:
1. A connection ends where `pts` or `frame` goes back (a restarted engine's camera counts from 0)
   or `pts` moves on by more than `GAP_S` beyond the frames `frame` counts (a reconnect bridges
   `pts` by the wall clock while `frame` goes on by one; shed frames take their numbers).
2. Its offset: for each candidate 0..N-1, the boxes of `FIT_FRAMES` of its messages are matched
   to the reference's boxes on the clip frames that offset gives (class-aware Hungarian, IoU >=
   0.5); the offset with the largest summed IoU of the matched pairs wins. The messages used are
   those with the freshest detections (`detected_frame == frame`: the detector's boxes on that very
   frame, whose pixels are the clip's; then the least late), so at the right offset they agree
   with the reference almost exactly (`agreement`, 2 x summed IoU over all boxes, ~0.9 for fresh
   detections through the tracker), while an offset one frame off already loses IoU.
3. `pts` is the server's RTP clock, not the file's: on a machine short of CPU the `ffmpeg -re`
   publisher sends in bursts and GStreamer's jitter buffer smooths its timestamps, so `pts` can run
   a few frames ahead of or behind the pictures for a second or so (seen at load 10: up to 6 frames).
   So each block of `BLOCK` messages gets a correction of -`DRIFT`..+`DRIFT` frames, fitted the same
   way on its `BLOCK_FIT` freshest messages, keeping the previous block's correction unless another
   agrees better by more than `MARGIN`. On a machine with CPU to spare the corrections are 0.
The connections, offsets, agreements and corrections are in the JSON (`clip_map` per camera) and
summed up per trial in the markdown: a check on the method itself. Choosing a block's correction
by agreement could flatter F1 where the boxes are poor (a wrong shift that happens to agree
better); the block correction is fitted on a third of its messages and scored on all of them, and
one frame's shift changes F1 by 0.01-0.04 here, which bounds that.
Nothing is drawn into the pictures: the pixels the pipeline decodes are the clip's.

Needs ../shared/data (the clip and YOLOX-Nano), ffmpeg, and Debian's GStreamer RTSP server; says
what is missing and exits 2 otherwise. Not part of CI.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

from streamlens.bench.accuracy import MATCH_IOU, combine, score_stream
from streamlens.bench.harness import (PIPELINES, REPO, RESULTS, VIDEOS, command_line, in_turns, machine, machine_line,
                                      need, shipped_file, versions)
from streamlens.bench.probe import video_info
from streamlens.bench.reference import reference_for
from streamlens.bench.trial import SOURCE_KEYS
from streamlens.config import load_pipeline, read_pipeline_tree
from streamlens.metrics import nearest_rank
from streamlens.track.matching import box_iou, match_by_iou
from streamlens.testing.rtsp_server import GstRtspServer, free_port, gst_missing

CLIP = VIDEOS / "highway_720p30.mp4"
PIPELINE = PIPELINES / "highway_yolox.yaml"
#: the clip-frame fit (see the module docs): messages a connection's offset is fitted on (those with
#: the freshest detections); blocks of messages, how many of each its correction is fitted on, and
#: the largest correction (frames); a jump in `pts` (seconds) that starts a new connection
FIT_FRAMES, BLOCK, BLOCK_FIT, DRIFT, GAP_S = 40, 60, 20, 8, 0.5
#: a block keeps the previous block's correction unless another agrees better by more than this share
MARGIN = 0.02
#: subscriptions the bench listener makes (frame., eos., stats.): what the sink waits for
LISTENER_TOPICS = 3
_RUN_IDS = itertools.count(1)


# ---------------------------------------------------------------- which clip frame a message shows

def _pair_iou(found: np.ndarray, found_cls: np.ndarray, wanted: np.ndarray, wanted_cls: np.ndarray) -> float:
    """Summed IoU of the matched pairs (class-aware Hungarian, IoU >= MATCH_IOU)."""
    if len(found) == 0 or len(wanted) == 0:
        return 0.0
    iou = box_iou(found, wanted)
    iou = np.where(found_cls.reshape(-1, 1) == wanted_cls.reshape(1, -1), iou, 0.0)
    pairs = match_by_iou(iou, MATCH_IOU)[0]
    return float(iou[pairs[:, 0], pairs[:, 1]].sum()) if len(pairs) else 0.0


def _rows(boxes) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(boxes, np.float64).reshape(-1, 5)
    return a[:, :4], a[:, 4].astype(np.int64)


def _quick_iou(found: np.ndarray, found_cls: np.ndarray, wanted: np.ndarray, wanted_cls: np.ndarray) -> float:
    """An upper bound of `_pair_iou` without the assignment: each found box's best IoU (>= MATCH_IOU)."""
    if len(found) == 0 or len(wanted) == 0:
        return 0.0
    iou = np.where(found_cls.reshape(-1, 1) == wanted_cls.reshape(1, -1), box_iou(found, wanted), 0.0)
    best = iou.max(axis=1)
    return float(best[best >= MATCH_IOU].sum())


def _fit(rows: list[tuple[int, np.ndarray, np.ndarray]], ref, candidates, keep: int | None = None,
         margin: float = 0.0) -> tuple[int, float]:
    """The offset among `candidates` whose clip frames agree best with the rows' boxes (`rows`:
    (pts in frames, boxes, classes)), and the agreement there: 2 * the summed IoU of the matched
    pairs over all boxes on both sides (1.0: every box matched at IoU 1). The candidates are ranked
    by a quick bound first and the best 10 matched exactly. With `keep`, that offset stays unless
    another agrees better by more than `margin` (a share)."""
    n = len(ref)
    candidates = [int(o) % n for o in candidates]

    def score(o: int, pair) -> tuple[float, int]:
        total, boxes = 0.0, 0
        for r, xyxy, cls in rows:
            c = (r + o) % n
            total += pair(xyxy, cls, ref.boxes(c), ref.classes(c))
            boxes += len(xyxy) + len(ref.boxes(c))
        return total, boxes

    ranked = sorted(candidates, key=lambda o: -score(o, _quick_iou)[0])[:10]
    if keep is not None and keep % n not in ranked:
        ranked.append(keep % n)
    exact = {o: score(o, _pair_iou) for o in ranked}
    best = max(ranked, key=lambda o: exact[o][0])
    if keep is not None and exact[keep % n][0] >= (1.0 - margin) * exact[best][0]:
        best = keep % n
    total, boxes = exact[best]
    return best, (2 * total / boxes if boxes else 0.0)


def connections(pts: list, frame: list, fps: float) -> list[tuple[int, int]]:
    """The messages of one camera split where a new connection may have begun: `pts` or `frame`
    going back (a restarted engine's camera counts from 0 again), or `pts` moving on by more than
    `GAP_S` beyond the frames `frame` counts (a reconnect bridges `pts` by the wall-clock time it
    took, while `frame` goes on by one; frames shed or dropped after decoding take their numbers,
    so heavy shedding is no new connection); each as (first, end)."""
    cuts = [0]
    last = None
    for i, p in enumerate(pts):
        if p is None:
            continue
        if last is not None:
            p0, f0 = last
            if p < p0 or frame[i] < f0 or (p - p0) * fps - (frame[i] - f0) > GAP_S * fps:
                cuts.append(i)
        last = (p, frame[i])
    return list(zip(cuts, cuts[1:] + [len(pts)]))


def _freshest(idx: list[int], det: list, frame: list, boxes: list, count: int) -> list[int]:
    """Up to `count` of the messages `idx` with boxes whose detections are the freshest: a
    message's own (detected_frame == frame) first, then the least late; in order."""
    fresh = sorted((frame[i] - det[i], i) for i in idx if det[i] is not None and len(boxes[i]))
    if not fresh:
        fresh = [(0, i) for i in idx if len(boxes[i])]
    return sorted(i for _, i in fresh[:count])


def clip_frames_of_camera(pts: list, det: list, frame: list, boxes: list, ref,
                          fps: float) -> tuple[np.ndarray, list[dict]]:
    """The clip frame of each message of one camera (-1: none found) and, per connection, how it
    was found (see the module docs): its messages, its offset and the agreement of that fit, the
    lateness of the detections it used, and each block's correction (frames, usually 0)."""
    n = len(ref)
    out = np.full(len(pts), -1, np.int64)
    report = []
    for first, end in connections(pts, frame, fps):
        idx = [i for i in range(first, end) if pts[i] is not None]
        r = {i: round(pts[i] * fps) for i in idx}
        picked = _freshest(idx, det, frame, boxes, FIT_FRAMES)
        entry = {"messages": [first, end], "fit_frames": len(picked),
                 "fit_lag_frames": max((frame[i] - det[i] for i in picked if det[i] is not None), default=None),
                 "offset": None, "agreement": None, "corrections": []}
        report.append(entry)
        if not picked:
            continue
        offset, agreement = _fit([(r[i], *_rows(boxes[i])) for i in picked], ref, range(n))
        entry["offset"], entry["agreement"] = offset, round(agreement, 4)
        shift = 0
        for start in range(first, end, BLOCK):
            block = [i for i in idx if start <= i < start + BLOCK]
            fit = _freshest(block, det, frame, boxes, BLOCK_FIT)
            if fit:
                best, _ = _fit([(r[i], *_rows(boxes[i])) for i in fit], ref,
                               [offset + d for d in range(-DRIFT, DRIFT + 1)], keep=offset + shift, margin=MARGIN)
                shift = (best - offset + n // 2) % n - n // 2
            entry["corrections"].append(shift)
            for i in block:
                out[i] = (r[i] + offset + shift) % n
    return out, report


# ------------------------------------------------------------------------------ one trial

def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


_SAMPLE = re.compile(r'^(streamlens_[a-z_]+)\{([^}]*)\} (\S+)$', re.M)


def _series(text: str, name: str, keys: tuple[str, ...] = ("stream",)) -> dict[tuple, float]:
    """{values of the labels `keys`, in that order: value} of one metric in a /metrics text (the
    exposition sorts labels by name, so `cause` comes before `stream`)."""
    out = {}
    for metric, labels, value in _SAMPLE.findall(text):
        if metric == name:
            found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            out[tuple(found.get(key, "") for key in keys)] = float(value)
    return out


def write_pipeline(pipeline: Path, urls: dict[str, str], workers: int, zmq_port: int, http_port: int,
                   folder: Path) -> Path:
    """The trial's pipeline file: `pipeline` with the cameras as its sources, one zmq pub sink,
    `runtime.workers` and `/metrics`; the detector's files as absolute paths."""
    config = load_pipeline(pipeline)
    zmq_sink = next((s.model_dump(exclude_none=True) for s in config.sinks if s.type == "zmq"), {})
    keep = {k: zmq_sink[k] for k in ("format", "hwm", "frames") if k in zmq_sink}
    first = config.sources[0]  # each camera decodes as the file's first source does (`fast_decode`, ...)
    decoding = {k: getattr(first, k) for k in SOURCE_KEYS if k in first.model_fields_set}
    tree = read_pipeline_tree(pipeline, {
        "sources": [{**decoding, "name": name, "uri": url} for name, url in urls.items()],
        "sinks": [{**keep, "type": "zmq", "endpoint": f"tcp://127.0.0.1:{zmq_port}", "mode": "pub",
                   "wait_subscribers": LISTENER_TOPICS, "wait_timeout_s": 60}],
        "runtime": {"workers": workers, "mode": "realtime", "http": {"port": http_port}}})
    for key in ("model", "names"):
        value = getattr(config.detector, key, None)
        if value is not None:
            tree["detector"][key] = str(value)
    path = folder / f"cameras-w{workers}.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def _stop(proc: subprocess.Popen, timeout: float) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def run_trial(pipeline: Path, urls: dict[str, str], workers: int, warmup: float, seconds: float,
              folder: Path) -> dict:
    """One `streamlens run` of the cameras with `workers` engines; the listener's records and what
    the run said (see the module docs)."""
    zmq_port, http_port = free_port(), free_port()
    path = write_pipeline(pipeline, urls, workers, zmq_port, http_port, folder)
    run_id = next(_RUN_IDS)
    heard = folder / f"listener-{run_id}-w{workers}.json"
    names = list(urls)
    load_before = os.getloadavg()
    listener = subprocess.Popen([sys.executable, "-m", "streamlens.bench.listener", f"tcp://127.0.0.1:{zmq_port}",
                                 "--streams", *names, "--deadline-s", str(240 + warmup + seconds), "--out", str(heard)],
                                cwd=REPO, stdin=subprocess.DEVNULL)
    stderr = folder / f"run-{run_id}-w{workers}.txt"
    with open(stderr, "wb") as log:
        run = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(path)], cwd=folder,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    metrics, error = "", None
    try:
        deadline = time.monotonic() + 180
        while True:
            if run.poll() is not None:
                error = f"the run exited ({run.returncode}) before every camera streamed"
                break
            if time.monotonic() > deadline:
                error = "not every camera published a frame within 180 s"
                break
            try:
                frames = _series(_metrics(http_port), "streamlens_frames_total")
            except OSError:
                frames = {}
            if all(frames.get((name,), 0) > 0 for name in names):
                break
            time.sleep(0.5)
        started = time.time()
        if error is None:
            time.sleep(warmup + seconds + 1.0)
            try:
                metrics = _metrics(http_port)
            except OSError as e:
                error = f"/metrics did not answer at the end: {e}"
            if run.poll() is not None:
                error = f"the run exited ({run.returncode}) during the trial"
    finally:
        code = _stop(run, 60)
        try:
            listener.wait(timeout=60)
        except subprocess.TimeoutExpired:
            listener.send_signal(signal.SIGTERM)
            listener.wait(timeout=30)
    err = stderr.read_text(errors="replace")
    return {"workers": workers, "window": [started + warmup, started + warmup + seconds], "exit_code": code,
            "error": error, "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "heard": json.loads(heard.read_text()) if heard.is_file() else None, "metrics": metrics,
            "stderr_tail": err[-2000:], "traceback": "Traceback" in err}


def _percentiles(values) -> dict:
    if len(values) == 0:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    ordered = sorted(float(v) for v in values)
    return {**{k: round(nearest_rank(ordered, q), 2) for k, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))},
            "max": round(ordered[-1], 2)}


def measure(trial: dict, ref, fps: float, budget_ms: float) -> dict:
    """The trial's figures per camera and pooled (see the module docs)."""
    start, end = trial["window"]
    streams = (trial["heard"] or {}).get("streams") or {}
    text = trial["metrics"]
    shed = _series(text, "streamlens_shed_frames_total")
    dropped = _series(text, "streamlens_dropped_frames_total")
    lost = _series(text, "streamlens_lost_total", ("stream", "cause"))
    restarts = _series(text, "streamlens_engine_restarts_total", ("engine",))
    per, latencies, scored = {}, [], {}
    for name, s in streams.items():
        ts = np.asarray(s["ts"], np.float64)
        inside = np.flatnonzero((ts >= start) & (ts < end))
        clips, links = clip_frames_of_camera(s["pts"], s["det"], s["frame"], s["boxes"], ref, fps)
        lat = (np.asarray(s["recv"], np.float64)[inside] - ts[inside]) * 1000.0
        latencies.append(lat)
        n = len(inside)
        x = np.asarray([s["pts"][i] for i in inside], np.float64) * fps
        sent = round(float(x.max() - x.min())) + 1 if n else 0
        frames = np.asarray(s["frame"], np.int64)[inside]
        span = int(frames.max() - frames.min() + 1) if n else 0
        entry = {"frames": n, "sent": sent, "kept": round(n / sent, 4) if sent else 0.0,
                 "missing": sent - n, "kept_index": round(n / span, 4) if span else 0.0,
                 "latency_ms": _percentiles(lat), "keyframe_rate": round(float(np.mean([s["key"][i] for i in inside])), 4)
                 if n else None,
                 "seq_gaps_run": s.get("lost"), "eos": (s.get("eos") or {}).get("reason"),
                 "run_counters": {"shed": shed.get((name,)), "dropped": dropped.get((name,)),
                                  "lost": {cause: v for (stream, cause), v in lost.items() if stream == name and v}},
                 "clip_map": links}
        mapped = [i for i in inside if clips[i] >= 0]
        entry["unmapped"] = n - len(mapped)
        # how far decoding fell behind the camera's own clock: `ts - pts` over the baseline (its
        # smallest value) of the connection; latency counts from `ts`, so it does not show this
        behind = []
        for first, stop in connections(s["pts"], s["frame"], fps):
            lag = [s["ts"][i] - s["pts"][i] for i in range(first, stop) if s["pts"][i] is not None]
            behind += [(s["ts"][i] - s["pts"][i] - min(lag)) * 1000.0 for i in inside if first <= i < stop
                       and s["pts"][i] is not None]
        entry["behind_camera_ms"] = _percentiles(behind)
        if mapped:
            scored[name] = score_stream([s["frame"][i] for i in mapped], [float(ref.pts[clips[i]]) for i in mapped],
                                        [s["boxes"][i] for i in mapped], ref)
            entry["accuracy"] = {k: v for k, v in scored[name].items() if k != "new_objects"}
            entry["accuracy"]["new_objects"] = {k: v for k, v in scored[name]["new_objects"].items() if k != "waits"}
        per[name] = entry
    pooled = np.concatenate(latencies) if latencies else np.empty(0)
    accuracy = combine(scored) if scored else None
    kept = [e["kept"] for e in per.values()]
    p95 = _percentiles(pooled)["p95"]
    return {"workers": trial["workers"], "cameras": len(per), "exit_code": trial["exit_code"], "error": trial["error"],
            "traceback_in_stderr": trial["traceback"], "load_before": trial["load_before"],
            "load_after": trial["load_after"], "frames": int(sum(e["frames"] for e in per.values())),
            "kept_min": min(kept) if kept else 0.0,
            "kept": round(sum(e["frames"] for e in per.values()) / max(1, sum(e["sent"] for e in per.values())), 4),
            "kept_index_min": min((e["kept_index"] for e in per.values()), default=0.0),
            "missing": int(sum(e["missing"] for e in per.values())),
            "latency_ms": _percentiles(pooled),
            "p95_worst_camera": max((e["latency_ms"]["p95"] or 0.0 for e in per.values()), default=None),
            "behind_camera_p95_worst": max((e["behind_camera_ms"]["p95"] or 0.0 for e in per.values()), default=None),
            "keyframe_rate": round(float(np.mean([e["keyframe_rate"] for e in per.values() if e["keyframe_rate"]
                                                  is not None])), 4) if per else None,
            "accuracy": accuracy, "engine_restarts": {k[0]: v for k, v in restarts.items()},
            "passed": bool(per) and min(kept) >= 1.0 and p95 is not None and p95 <= budget_ms and not trial["error"],
            "streams": per}


# ------------------------------------------------------------------------------ report

def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def write_report(results: dict, md: Path) -> None:
    trials = results["trials"]
    lines = [f"# {results['title']}", ""]
    if results.get("label"):
        lines += [f"**{results['label']}**", ""]
    m, v = results["machine"], results["versions"]
    lines += [f"**Command**: `{results['command']}`", "",
              f"**Date**: {results['started']} to {results['ended']} (UTC). **Load** (`uptime`): at the start "
              f"`{results['uptime_start']}`; at the end `{results['uptime_end']}`.", "",
              f"**Machine**: {machine_line(m)}, {m['system']}; Python {v.get('python')}, PyAV {v.get('av')}, numpy {v.get('numpy')}, onnxruntime "
              f"{v.get('onnxruntime')}.", "",
              f"**What ran**: {results['cameras']} RTSP cameras from GStreamer's RTSP server on 127.0.0.1, each "
              f"serving `{results['clip_name']}` ({results['clip']['width']}x{results['clip']['height']}, "
              f"{results['clip']['fps']:g} fps, {results['clip_frames']} frames, looped by its `ffmpeg -re` publisher); "
              f"`streamlens run` of `{results['pipeline_name']}` with those cameras (decoded in worker processes, "
              f"the default), one zmq sink and `runtime.workers` {results['workers']}"
              + (f" against {results['baseline']}, alternating, {results['repeats']} each" if results['baseline']
                 else f", {results['repeats']} trials")
              + (f"; the cameras streamed {results['settle']:g} s before the first trial"
                 if results.get("settle") else "") + f"; {results['warmup']:g} s warm-up, "
              f"{results['seconds']:g} s measured. Subscriber: `streamlens.bench.listener` in its own process. "
              f"F1 against YOLOX-Nano on every frame of the clip (IoU 0.5, class-aware); clip frames found from "
              f"`pts` modulo the clip, with an offset per connection fitted on the boxes of its freshest detections "
              f"and a correction of a few frames per block of {BLOCK} messages where the RTP clock wanders "
              f"(tools/bench_cameras.py's docs; every fit is in the JSON).", "",
              "## Medians over the repeats", "",
              "| workers | trials | kept (worst camera) | frames missing | p50 ms | p95 ms | p95 worst camera | "
              "decoding behind the camera, p95 worst camera (ms) | F1 (worst camera) | keyframe rate | engine restarts "
              "| passes |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in (results["workers"], results["baseline"]):
        mine = [t for t in trials if t["workers"] == w]
        if not mine:
            continue
        f1 = _median([(t["accuracy"] or {}).get("f1") for t in mine])
        f1_min = _median([(t["accuracy"] or {}).get("f1_min") for t in mine])
        lines.append(
            f"| {w} | {len(mine)} | {_fmt(_median([t['kept_min'] for t in mine]), '.2%')} | "
            f"{_fmt(_median([t['missing'] for t in mine]), 'g')} | "
            f"{_fmt(_median([t['latency_ms']['p50'] for t in mine]), '.1f')} | "
            f"{_fmt(_median([t['latency_ms']['p95'] for t in mine]), '.1f')} | "
            f"{_fmt(_median([t['p95_worst_camera'] for t in mine]), '.1f')} | "
            f"{_fmt(_median([t['behind_camera_p95_worst'] for t in mine]), '.0f')} | "
            f"{_fmt(f1, '.3f')} ({_fmt(f1_min, '.3f')}) | {_fmt(_median([t['keyframe_rate'] for t in mine]), '.1%')} | "
            f"{sum(sum(t['engine_restarts'].values()) for t in mine):g} | "
            f"{sum(t['passed'] for t in mine)}/{len(mine)} |")
    lines += ["", "Passes: every camera kept every frame it sent in the window (by `pts`) and the pooled p95 is "
              f"at most {results['budget_ms']:g} ms. Latency counts from `ts`, when the frame was decoded; "
              "\"decoding behind the camera\" is `ts - pts` over its smallest value in the connection: how far the "
              "decode worker fell behind the camera's own clock (a backlog that latency from `ts` does not show).",
              "", "## Every trial", "",
              "| # | workers | kept (worst) | kept by `frame` index (worst) | p50 ms | p95 ms | F1 (worst) | "
              "load before/after (1 min) | clip-frame fit: connections, agreement (worst), blocks corrected | exit |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for i, t in enumerate(trials, 1):
        acc = t["accuracy"] or {}
        links = [c for e in t["streams"].values() for c in e["clip_map"]]
        agreement = [c["agreement"] for c in links if c["agreement"] is not None]
        shifts = [d for c in links for d in c["corrections"]]
        unmapped = sum(e["unmapped"] for e in t["streams"].values())
        lines.append(
            f"| {i} | {t['workers']} | {t['kept_min']:.2%} | {t['kept_index_min']:.2%} | "
            f"{_fmt(t['latency_ms']['p50'], '.1f')} | {_fmt(t['latency_ms']['p95'], '.1f')} | "
            f"{_fmt(acc.get('f1'), '.3f')} ({_fmt(acc.get('f1_min'), '.3f')}) | "
            f"{t['load_before'][0]:.2f} / {t['load_after'][0]:.2f} | "
            f"{len(links)} for {t['cameras']} cameras, agreement {_fmt(min(agreement) if agreement else None, '.2f')}, "
            f"{sum(d != 0 for d in shifts)}/{len(shifts)} blocks corrected (at most {max(map(abs, shifts), default=0)}), "
            f"{unmapped} unmapped | "
            f"{t['exit_code']}{' ' + t['error'] if t['error'] else ''}{' TRACEBACK' if t['traceback_in_stderr'] else ''} |")
    lines += ["", "Per camera (kept, p95, F1, shed/dropped/lost over the whole run, not only the window) and every "
              f"block of the clip-frame fit: `{results['json_name']}`.", ""]
    md.write_text("\n".join(lines))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cameras", type=int, default=6, help="RTSP cameras (default 6)")
    p.add_argument("--workers", type=int, default=2, help="runtime.workers measured (default 2)")
    p.add_argument("--baseline", type=int, default=1, help="runtime.workers measured beside it (default 1; 0: none)")
    p.add_argument("--repeats", type=int, default=3, help="trials of each setting (default 3)")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds not counted after every camera streams")
    p.add_argument("--settle", type=float, default=0.0,
                   help="seconds the cameras stream before the first trial (default 0: it starts at once)")
    p.add_argument("--seconds", type=float, default=60.0, help="seconds measured per trial (default 60)")
    p.add_argument("--pipeline", type=Path, default=PIPELINE)
    p.add_argument("--clip", type=Path, default=CLIP)
    p.add_argument("--out", type=Path, default=RESULTS / "cameras.md", help="markdown; the JSON beside it")
    p.add_argument("--trial", action="store_true",
                   help="label the results a trial run (a short run that shows the tool works)")
    p.add_argument("--keep", type=Path, default=None,
                   help="work in this folder and keep it (pipeline files, listener records, the runs' stderr)")
    args = p.parse_args()
    need(args.clip, args.pipeline)
    reason = gst_missing()
    if reason:
        print(f"bench_cameras: {reason}", file=sys.stderr)
        return 2
    pipeline = shipped_file(args.pipeline)  # a shipped pipeline with the shared model (its sources are replaced)
    config = load_pipeline(pipeline)
    budget_ms = config.runtime.budget_ms
    began = datetime.now(timezone.utc)
    uptime_start = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"bench_cameras: the reference (the detector on every frame of {args.clip.name}) ...", file=sys.stderr,
          flush=True)
    ref = reference_for(config.detector, str(args.clip))
    info = video_info(str(args.clip))
    fps = info["fps"] or 1.0 / float(np.median(np.diff(ref.pts)))
    settings = [args.workers] + ([args.baseline] if args.baseline else [])
    trials, raws = [], []
    with tempfile.TemporaryDirectory(prefix="streamlens-cameras-") as tmp:
        folder = Path(tmp) if args.keep is None else args.keep
        folder.mkdir(parents=True, exist_ok=True)
        names = [f"cam{i + 1}" for i in range(args.cameras)]
        with GstRtspServer({name: args.clip for name in names}, folder) as server:
            urls = {name: server.url(name) for name in names}
            time.sleep(args.settle)

            def trial(w: int, repeat: int) -> dict:
                raw = run_trial(pipeline, urls, w, args.warmup, args.seconds, folder)
                raws.append(raw)  # in the order run
                print(f"bench_cameras: trial {len(raws)}, workers {w}: exit {raw['exit_code']}"
                      f"{', ' + raw['error'] if raw['error'] else ''}", file=sys.stderr, flush=True)
                if raw["traceback"]:
                    print(raw["stderr_tail"], file=sys.stderr)
                return raw

            in_turns(settings, args.repeats, trial)  # the order reversed each round
    for raw in raws:  # after the cameras stopped: matching boxes to the clip takes a while
        t = measure(raw, ref, fps, budget_ms)
        trials.append(t)
        acc = t["accuracy"] or {}
        print(f"bench_cameras: workers {t['workers']}: kept {t['kept_min']:.2%} (worst camera), missing "
              f"{t['missing']}, p50 {t['latency_ms']['p50']} p95 {t['latency_ms']['p95']} ms, F1 "
              f"{acc.get('f1')} (worst {acc.get('f1_min')}), restarts {t['engine_restarts']}", file=sys.stderr,
              flush=True)
    command = command_line()
    json_path = args.out.with_suffix(".json")
    against = f" against {args.baseline}" if args.baseline else ""
    results = {"title": f"{args.cameras} RTSP cameras, `runtime.workers` {args.workers}{against}",
               "label": (f"TRIAL RUN ({args.cameras} cameras, {args.seconds:g} s measured, {args.repeats} trial(s) "
                         "per setting) to show that the tool works, on a machine shared with another engineer's "
                         "benchmarks (see the load): not the target's measurement, which replaces it.")
               if args.trial else "", "command": command.strip(), "started": began.strftime("%Y-%m-%d %H:%M"),
               "ended": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"), "uptime_start": uptime_start,
               "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
               "machine": machine(), "versions": versions(), "cameras": args.cameras, "workers": args.workers,
               "baseline": args.baseline, "repeats": args.repeats, "warmup": args.warmup, "settle": args.settle, "seconds": args.seconds,
               "budget_ms": budget_ms, "clip": info, "clip_name": args.clip.name, "clip_frames": len(ref),
               "pipeline_name": os.path.relpath(args.pipeline, REPO), "json_name": json_path.name,
               "reference": str(ref.path), "trials": trials}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1))
    write_report(results, args.out)
    print(f"bench_cameras: {args.out} and {json_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
