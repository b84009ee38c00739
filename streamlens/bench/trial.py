"""One bench trial: K copies of a video as K live streams through a pipeline, timed from outside.

A trial starts two fresh processes and ends both:

1. the outside subscriber (`streamlens.bench.listener`), started first, which connects a SUB
   socket to a free local port and times every frame message it receives;
2. the pipeline (`streamlens.bench.runner`): the pipeline file with its sources replaced by K
   sources `s0 .. s{K-1}` that all play the video, paced at its frame rate (`live: true`) and
   looping, and its sinks replaced by one zmq sink on that port that waits for the subscriber's
   subscriptions before it starts. It is stopped `warmup + seconds` after its first frame.

Then the frames are counted in the measured window: the frames whose `ts` (when the frame became
available) is at least `warmup` seconds after the first frame's `ts` of any stream, and less than
`warmup + seconds` after it. For each stream, `kept` is the frames received in the window over the
frames the stream had there: `frame` is the decoded index and keeps counting across loops, so
every index missing between the first and the last frame received in the window is a frame
dropped somewhere on the way (the decoder falling behind, a full queue, the engine shedding, or
ZeroMQ). Latency is the subscriber's clock at receipt minus `ts`, over every counted frame of
every stream; the keyframe rate is the fraction of counted frames published with `keyframe: true`
(a keyframe whose detections missed the budget goes out without them: the pipeline counts it in
`late_keyframes`, reported for the whole run with the pipeline's other counters).

With the clip's `Reference` each stream's received frames in the window are also scored against
detecting every frame (`streamlens.bench.accuracy`: F1, new-object waits) and its detection delay
is measured. A trial passes when every stream kept at least `min_kept` of its frames, the p95
latency is at most the budget and every stream's F1 is at least `min_f1` (`passes`).
`run_hold_trial` runs the plain baseline (`streamlens.bench.hold`) in the pipeline's place,
measured and judged the same way.

Example:
    >>> trial = measure({"s0": {"frame": [0, 1, 2, 4], "ts": [0.0, 1.0, 2.0, 3.0],
    ...                         "recv": [0.01, 1.01, 2.02, 3.03], "key": [1, 0, 0, 1]}},
    ...                 k=1, warmup=1.0, seconds=10.0)
    >>> trial["kept_min"], trial["frames"], trial["keyframe_rate"]
    (0.75, 3, 0.3333)

`curve=True` judges a trial by what overload must keep instead (`passes`): p95 within the budget
and every stream within `max_spread` of the others in frames kept (`kept_spread`: the best stream's
kept less the worst's), whatever it lost and whatever its F1.
"""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..metrics import nearest_rank
from .accuracy import AgeTally, combine, detection_delays, score_stream, spread
from .hold import copy_start
from .listener import TOPICS
from .runner import MARKER

#: a pipeline process gets this long to start (load a model, wait for the subscriber) ...
STARTUP_S = 120.0
#: ... and this long after its stop to drain what it holds and end
DRAIN_S = 60.0


def stream_names(k: int) -> list[str]:
    return [f"s{i}" for i in range(k)]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: the keys of the pipeline's first source that every copy of a trial takes: how it decodes
SOURCE_KEYS = ("decode", "fast_decode", "options", "max_pixels")


def trial_overrides(video: str, k: int, endpoint: str, sink_options: dict | None = None,
                    workers: int | None = None, source_keys: dict | None = None, stagger_s: float = 0.0) -> dict:
    """The `load_pipeline` overrides of a trial: K looping live copies of `video` (each with
    `source_keys`, the first source's `SOURCE_KEYS`), one zmq sink that waits for the listener's
    subscriptions, real-time mode and no `/metrics` server; `workers`: `runtime.workers` (None: the
    file's); `stagger_s`: copy i begins i/K of that far into the clip (`hold.copy_start`)."""
    sources = [{**(source_keys or {}), "name": name, "uri": video, "live": True, "loop": True,
                **({"start_s": copy_start(i, k, stagger_s)} if stagger_s > 0 else {})}
               for i, name in enumerate(stream_names(k))]
    sink = {**(sink_options or {}), "type": "zmq", "endpoint": endpoint, "mode": "pub",
            "wait_subscribers": len(TOPICS), "wait_timeout_s": 60}
    runtime = {"mode": "realtime", "http": None} | ({"workers": workers} if workers is not None else {})
    return {"sources": sources, "sinks": [sink], "runtime": runtime}


def _percentiles(values: np.ndarray) -> dict:
    """p50, p95, p99 by nearest rank, as the engine's own stats compute them, and the maximum."""
    if values.size == 0:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    ordered = np.sort(values).tolist()
    out = {name: round(float(nearest_rank(ordered, q)), 2) for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}
    return {**out, "max": round(float(ordered[-1]), 2)}


def _late_estimate(stats: dict | None) -> dict | None:
    """From a stream's last `stats` message: decode + queue + batch + detect, p50s added and p95s
    added (its batch and detect cover the last 64 keyframes back from the detector, late ones
    included): a rough figure for how late a keyframe's detections are applied, in ms."""
    stages = (stats or {}).get("stages_ms") or {}
    parts = [stages.get(name) or {} for name in ("decode", "queue", "batch", "detect")]
    if not all("p50" in part and "p95" in part for part in parts):
        return None
    return {q: round(sum(part[q] for part in parts), 2) for q in ("p50", "p95")}


def measure(streams: dict, k: int, warmup: float, seconds: float, reference=None, fps: float | None = None,
            window_s: float | None = None) -> dict:
    """kept, latency and keyframe rate in the measured window, from the subscriber's records
    (`{stream: {"frame": [...], "ts": [...], "recv": [...], "key": [...]}}`; see the module docs).
    Kept is the frames received over the span of frame numbers received in the window or, with
    `fps` (the video's rate: overload curves, where a stream may deliver a frame now and then), over
    the frames the stream had in the window (`fps` x `seconds`): a stream that delivered one frame
    kept one of them, not all.
    With a `Reference` (and records holding `pts`, `boxes` and `det`, as the listener writes them)
    also the accuracy of each stream and of all (`streamlens.bench.accuracy`), and a `timeline` of
    every `window_s` seconds (default `WINDOW_S`), with the budget controller's rung where the
    records hold the streams' `control` (`_control_windows`)."""
    firsts = [s["ts"][0] for s in streams.values() if s["ts"]]
    if not firsts:
        return {"frames": 0, "kept": 0.0, "kept_min": 0.0, "kept_max": 0.0, "kept_spread": 0.0,
                "latency_ms": _percentiles(np.empty(0)),
                "keyframe_rate": None, "streams": {},
                "accuracy": None if reference is None else combine({}),
                "detection_delay_ms": None}
    start = min(firsts) + warmup
    end = start + seconds
    window_s = window_s or WINDOW_S
    per_stream, latencies, received, spans, keys, delays, methods = {}, [], 0, 0, 0, [], set()
    detected = 0
    ages = AgeTally()
    windows: dict[int, list] = {}  # window -> [tp, delivered, reference, frames, detected, latencies]
    for name, s in streams.items():
        ts = np.asarray(s["ts"], dtype=np.float64)
        inside = (ts >= start) & (ts < end)
        frames = np.asarray(s["frame"], dtype=np.int64)[inside]
        lat = (np.asarray(s["recv"], dtype=np.float64)[inside] - ts[inside]) * 1000.0
        n = int(inside.sum())
        span = (round(fps * seconds) if fps else int(frames.max() - frames.min() + 1)) if n or fps else 0
        n = min(n, span)  # a frame on the window's edge: never more than all
        per_stream[name] = {"frames": n, "expected": span, "kept": round(n / span, 4) if span else 0.0,
                            "latency_ms": _percentiles(lat),
                            "keyframes": int(np.asarray(s["key"], dtype=np.int64)[inside].sum()) if n else 0}
        latencies.append(lat)
        received += n
        spans += span
        keys += per_stream[name]["keyframes"]
        if "det" in s:
            # frames whose detections reached the subscriber: keyframes in time and late alike
            per_stream[name]["detected"] = len({d for d, i in zip(s["det"], inside) if i and d is not None})
            detected += per_stream[name]["detected"]
            found, method = detection_delays(s["frame"], s["ts"], s["recv"], s["key"], s["det"], start, end)
            delays += found
            methods.add(method)
            per_stream[name]["detection_delay_ms"] = {**spread(found), "n": len(found), "method": method}
        if reference is not None and n:
            picked, counts, listed = np.flatnonzero(inside), [], frames.tolist()
            per_stream[name]["accuracy"] = score_stream(listed, [s["pts"][i] for i in picked],
                                                        [s["boxes"][i] for i in picked], reference, counts)
            det = [s["det"][i] for i in picked] if "det" in s else None
            _add_windows(windows, ts[picked] - start, counts, lat, det, window_s)
            if det is not None:
                ages.add(listed, det, counts)
    kept = [per_stream.get(name, {"kept": 0.0})["kept"] for name in stream_names(k)] if k else [0.0]
    out = {"frames": received, "kept": round(received / spans, 4) if spans else 0.0,
           "kept_min": min(kept), "kept_max": max(kept), "kept_spread": round(max(kept) - min(kept), 4),
           "latency_ms": _percentiles(np.concatenate(latencies)),
           "keyframe_rate": round(keys / received, 4) if received else None,
           "detected_rate": round(detected / received, 4) if received and methods else None, "streams": per_stream}
    if reference is not None:
        scored = {name: st["accuracy"] for name, st in per_stream.items() if "accuracy" in st}
        out["accuracy"] = combine(scored)
        rungs = _control_windows(streams, start, end, window_s)
        none = [0, 0, 0, 0, 0, []]  # a window where nothing was delivered but the controller said where it stood
        out["timeline"] = [{"from_s": round(w * window_s, 3),
                            "f1": round(2 * tp / (shown + wanted), 4) if shown + wanted else None,
                            "frames": n, "detected": round(d / n, 4) if n else None,
                            "p95_ms": _percentiles(np.asarray(ms))["p95"], **rungs.get(w, {})}
                           for w in sorted(windows.keys() | rungs.keys())
                           for tp, shown, wanted, n, d, ms in [windows.get(w, none)]]
        if any(name not in scored for name in stream_names(k)):
            out["accuracy"]["f1_min"] = 0.0  # a stream that delivered nothing in the window
        if methods == {"detected_frame"}:
            out["accuracy_by_age"] = ages.report()
    out["detection_delay_ms"] = ({**spread(delays), "n": len(delays), "method": " + ".join(sorted(methods))}
                                 if methods else None)
    if methods == {"keyframes in time"}:
        estimates = [_late_estimate(s.get("stats")) for s in streams.values()]
        estimates = [e for e in estimates if e]
        out["detection_delay_ms"]["late_keyframes_estimate"] = (
            {q: max(e[q] for e in estimates) for q in ("p50", "p95")} if estimates else None)
    return out


#: the timeline's step by default (`--timeline-s`): F1, the share of frames detected and the p95 over every
#: stream, by WINDOW_S seconds
WINDOW_S = 5.0


def _add_windows(windows: dict, since_start, counts: list, latencies, det: list | None, window_s: float) -> None:
    """Adds one stream's received frames in the window to `windows` (see `measure`'s timeline): per
    frame its seconds since the window's start, its boxes' counts (`score_stream`'s `counts`), its
    latency and the frame its detections are of."""
    seen: set = set()  # a keyframe's detections count once, in the window they first reached the subscriber
    for k, (when, count, ms) in enumerate(zip(since_start, counts, latencies)):
        acc = windows.setdefault(int(when // window_s), [0, 0, 0, 0, 0, []])
        if count is not None:
            acc[0] += count[0]
            acc[1] += count[1]
            acc[2] += count[2]
            acc[3] += 1
        if det is not None and det[k] is not None and det[k] not in seen:
            seen.add(det[k])
            acc[4] += 1
        acc[5].append(ms)


def _control_windows(streams: dict, start: float, end: float, window_s: float) -> dict[int, dict]:
    """Per timeline window, what the budget controller did, from the `control` records the listener
    kept of each stream's `stats` messages (`[receipt, rung, share shed, keyframes only]`) received
    in it: `rung`, the highest rung any stream was on (0: none climbed), `shed`, the mean share of
    frames shed over those messages, `keyframes_only` whether any stream decoded keyframes only.
    A message received after the measured `end` (each stream's last, sent before its `eos`, when
    the run stops) counts in the last window: where the controller stood at the end. Windows
    without such a message get nothing."""
    last = max(0, math.ceil((end - start) / window_s) - 1)
    found: dict[int, list] = {}
    for s in streams.values():
        for received, rung, shed, only in s.get("control") or ():
            if received < start or rung is None:
                continue
            acc = found.setdefault(min(last, int((received - start) // window_s)), [0, [], False])
            acc[0] = max(acc[0], int(rung))
            acc[1].append(float(shed or 0.0))
            acc[2] = acc[2] or bool(only)
    return {w: {"rung": rung, "shed": round(sum(shed) / len(shed), 3), "keyframes_only": only}
            for w, (rung, shed, only) in found.items()}


class TrialFailed(Exception):
    """A trial's pipeline or subscriber did not run; the message is one line."""


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _end(proc: subprocess.Popen, grace_s: float) -> None:
    """Stop a child: SIGTERM (it stops cleanly), then SIGKILL after `grace_s`."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _run_with_listener(k: int, command: list[str], what: str, deadline: float) -> tuple[dict, dict]:
    """Start the listener for `k` streams, then `command` (its endpoint already in it, as the last
    `{endpoint}` placeholder filled here), wait for both; (the producer's report, what was heard).
    Raises `TrialFailed`."""
    python = sys.executable
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    command = [part.replace("{endpoint}", endpoint) for part in command]
    with tempfile.TemporaryDirectory(prefix="streamlens-bench-") as tmp:
        folder = Path(tmp)
        listen_out = folder / "listener.json"
        listen_err, run_err, run_out = (folder / name for name in ("listener.err", "runner.err", "runner.out"))
        children: list[subprocess.Popen] = []
        try:
            with open(listen_err, "w") as lerr:
                children.append(subprocess.Popen(
                    [python, "-m", "streamlens.bench.listener", endpoint, "--streams", *stream_names(k),
                     "--deadline-s", str(deadline), "--out", str(listen_out)],
                    stdout=subprocess.DEVNULL, stderr=lerr))
            with open(run_out, "w") as rout, open(run_err, "w") as rerr:
                children.append(subprocess.Popen(command, stdout=rout, stderr=rerr))
            runner, listener = children[1], children[0]
            try:
                runner.wait(deadline)
            except subprocess.TimeoutExpired:
                _end(runner, 10.0)
                raise TrialFailed(f"{k} stream(s): the {what} did not end within {deadline:.0f} s") from None
            report = None
            for line in run_out.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith(MARKER):
                    report = json.loads(line[len(MARKER):])
            if runner.returncode != 0 or report is None or report.get("status") == "failed":
                why = (report or {}).get("error") or _last_line(run_err) or f"exit code {runner.returncode}"
                raise TrialFailed(f"{k} stream(s): the {what} failed: {why}")
            try:  # every eos is out; the subscriber ends as soon as it has them all
                listener.wait(10.0)
            except subprocess.TimeoutExpired:
                _end(listener, 5.0)
            if not listen_out.exists():
                why = _last_line(listen_err) or f"exit code {listener.returncode}"
                raise TrialFailed(f"{k} stream(s): the subscriber failed: {why}")
            heard = json.loads(listen_out.read_text(encoding="utf-8"))
        finally:
            for child in reversed(children):
                _end(child, 5.0)
    return report, heard


def passes(trial: dict, budget_ms: float, min_kept: float, min_f1: float, *, curve: bool = False,
           max_spread: float = 0.10) -> bool:
    """The pass rule: frames came, p95 latency within the budget, every stream kept at least
    `min_kept` of its frames and, when the trial was scored, every stream's F1 is at least `min_f1`.
    With `curve` (an overload curve): frames came, p95 within the budget and the kept spread between
    streams at most `max_spread`."""
    p95 = trial["latency_ms"]["p95"]
    if curve:
        return bool(trial["frames"] > 0 and p95 is not None and p95 <= budget_ms
                    and trial.get("kept_spread", 0.0) <= max_spread + 1e-9)
    f1 = (trial.get("accuracy") or {}).get("f1_min", 1.0)
    return bool(trial["frames"] > 0 and p95 is not None and p95 <= budget_ms and trial["kept_min"] >= min_kept
                and (f1 is None or f1 >= min_f1))


def _result(k: int, heard: dict, report: dict, warmup: float, seconds: float, reference,
            fps: float | None = None, window_s: float | None = None) -> dict:
    result = {"k": k, "status": "ok", "error": None}
    result.update(measure(heard["streams"], k, warmup, seconds, reference, fps, window_s))
    result["lost_on_zmq"] = sum(s.get("lost", 0) for s in heard["streams"].values())
    result["subscriber"] = {"ended": heard.get("ended"), "timed_out": heard.get("timed_out"),
                            "skipped": heard.get("skipped")}
    result["pipeline"] = {"status": report.get("status"), "wall_s": report.get("wall_s")}
    for name, counters in ((c.get("name"), c) for c in report.get("streams", [])):
        entry = result["streams"].setdefault(name, {})
        entry["stats"] = heard["streams"].get(name, {}).get("stats")
        entry["eos"] = heard["streams"].get(name, {}).get("eos")
        entry["pipeline"] = counters
    result["dropped"] = sum(c.get("dropped", 0) or 0 for c in report.get("streams", []))
    # by cause, over the whole run (each stream's eos, or its last stats): shed, stale, inbox ...
    causes: dict[str, int] = {}
    for entry in result["streams"].values():
        lost = (entry.get("eos") or {}).get("lost") or (entry.get("stats") or {}).get("lost") or {}
        for cause, n in lost.items():
            causes[cause] = causes.get(cause, 0) + (n or 0)
    result["lost_by_cause"] = causes
    for key in ("late_keyframes", "displaced_keyframes"):
        result[key] = sum(c.get(key, 0) or 0 for c in report.get("streams", []))
    return result


def run_trial(pipeline: str, video: str, k: int, *, warmup: float, seconds: float, budget_ms: float,
              min_kept: float, min_f1: float = 0.0, reference=None, sink_options: dict | None = None,
              workers: int | None = None, debug: bool = False, curve: bool = False,
              max_spread: float = 0.10, source_keys: dict | None = None, fps: float | None = None,
              stagger_s: float = 0.0, timeline_s: float | None = None) -> dict:
    """Run one trial with `k` streams; its figures as a dict (see `measure`, which takes `fps` and
    `timeline_s` as `window_s`), with `passed`.
    Raises `TrialFailed` when the pipeline process fails; KeyboardInterrupt ends both children."""
    overrides = trial_overrides(video, k, "{endpoint}", sink_options, workers, source_keys, stagger_s)
    command = [sys.executable, "-m", "streamlens.bench.runner", str(pipeline), "--overrides", json.dumps(overrides),
               "--warmup", str(warmup), "--seconds", str(seconds), "--startup-s", str(STARTUP_S)]
    report, heard = _run_with_listener(k, command + (["--debug"] if debug else []), "pipeline",
                                       STARTUP_S + warmup + seconds + DRAIN_S)
    result = _result(k, heard, report, warmup, seconds, reference, fps, timeline_s)
    result["passed"] = passes(result, budget_ms, min_kept, min_f1, curve=curve, max_spread=max_spread)
    return result


def run_hold_trial(pipeline: str, video: str, k: int, *, warmup: float, seconds: float, budget_ms: float,
                   min_kept: float, min_f1: float = 0.0, reference=None, debug: bool = False,
                   stagger_s: float = 0.0, timeline_s: float | None = None) -> dict:
    """The plain baseline (`streamlens.bench.hold`) with `k` streams, measured and judged as a trial
    is. Raises `TrialFailed` when it does not run."""
    command = [sys.executable, "-m", "streamlens.bench.hold", str(pipeline), "--video", str(video),
               "--streams", *stream_names(k), "--endpoint", "{endpoint}", "--warmup", str(warmup),
               "--seconds", str(seconds), "--subscribers", str(len(TOPICS)), "--stagger", str(stagger_s)]
    report, heard = _run_with_listener(k, command + (["--debug"] if debug else []), "hold baseline",
                                       STARTUP_S + warmup + seconds + DRAIN_S)
    result = _result(k, heard, report, warmup, seconds, reference, window_s=timeline_s)
    # it has no keyframes to be late or to give their place: every frame goes out at once
    result["late_keyframes"] = result["displaced_keyframes"] = None
    result["passed"] = passes(result, budget_ms, min_kept, min_f1)
    return result


__all__ = ["run_trial", "run_hold_trial", "passes", "measure", "trial_overrides", "free_port", "TrialFailed", "stream_names"]
