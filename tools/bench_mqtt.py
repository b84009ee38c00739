"""Benchmark the mqtt sink against a local Mosquitto broker: what it costs the engine's thread, and
what it costs a pipeline (the target: 1,000 events/s without slowing the pipeline by more than 5%).

Two parts, one broker (Debian's mosquitto, started here on 127.0.0.1 and a free port):

- `write`: the sink's `write()` timed on the calling thread (`perf_counter_ns` around each call;
  the messages are serialised before, as the runtime serialises each result once for every sink).
  First `--rate` events a second (schema-v1 `event` messages, ~330 bytes) for `--seconds`, with a
  frame message carrying changing counts every 1/30 s, while a paho subscriber in a process of
  its own counts what the broker delivers (by `seq`: missing, twice) and the latency from just
  before `write()` to its receipt (`time.time()` in both processes); then a burst of `--burst`
  events as fast as `write()` takes them, to see what the sink's thread keeps up with.
- `pipeline`: the same pipeline run in bulk mode with the mqtt sink and without it, `--repeats`
  times each, taking turns (each run a fresh process; run i of one kind and run i of the other are
  neighbours in time: a pair), on `--clip` (default the shared highway clip at 320x240, else the
  sample) with the motion detector and `--lines` lines across the road plus two zones, so that
  many events come. The mqtt sink is the one `{type: mqtt, host: 127.0.0.1, port: P}` builds.
  Frames/s is frames over the span from the first published frame to the last (an inline sink of
  this tool notes both); reported: the ratio of the medians, the median of the pairs' ratios, and
  the ratio of each kind's fastest run (the least disturbed by other work on a shared machine).
  Beside it the process's CPU time per frame over the same span, and what the sink itself costs in
  the mqtt runs: the time its `write()` takes on the engine's thread, its own thread's CPU time
  and the broker's (from /proc), each as a share of the span. No subscriber runs in this part: the
  broker only takes the messages.

Run:
    python tools/bench_mqtt.py                          # both parts; a markdown report on stdout
    python tools/bench_mqtt.py --part write --seconds 5
    python tools/bench_mqtt.py --part pipeline --repeats 7
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streamlens.bench.harness import REPO, VIDEOS, command_line, in_turns, machine_line

CLIP = VIDEOS / "highway_320x240.avi"
SAMPLE = REPO / "samples" / "traffic.mp4"


# ----------------------------------------------------------------------- the subscriber process

def subscriber_main(port: int, out: str, timeout_s: float) -> int:
    """Count the events the broker delivers on `streamlens/cam1/events` until the eos comes (or
    `timeout_s` passes without a message); save seqs, duplicates and latencies (ms) to `out`."""
    import paho.mqtt.client as mqtt

    seen: set[int] = set()
    twice = 0
    latencies: list[float] = []
    state = {"eos": False, "last": time.monotonic()}

    def on_connect(client, userdata, flags, reason, properties):
        client.subscribe("streamlens/cam1/#", 0)

    def on_subscribe(*args):
        print("subscribed", flush=True)

    def on_message(client, userdata, msg):
        now = time.time()
        state["last"] = time.monotonic()
        if msg.topic.endswith("/events"):
            nonlocal twice
            message = json.loads(msg.payload)
            if message["seq"] in seen:
                twice += 1
            seen.add(message["seq"])
            latencies.append((now - message["sent"]) * 1000)
        elif msg.topic.endswith("/eos"):
            state["eos"] = True

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    client.on_connect, client.on_subscribe, client.on_message = on_connect, on_subscribe, on_message
    client.connect("127.0.0.1", port, 30)
    client.loop_start()
    while not state["eos"] and time.monotonic() - state["last"] < timeout_s:
        time.sleep(0.05)
    client.disconnect()
    client.loop_stop()
    Path(out).write_text(json.dumps({"received": len(seen), "twice": twice, "max_seq": max(seen, default=-1),
                                     "latency_ms": latencies}))
    return 0


def start_subscriber(port: int, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, __file__, "_subscriber", str(port), str(out)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "subscribed"
    return proc


# ----------------------------------------------------------------------- part 1: write()

def event_message(seq: int) -> dict:
    return {"v": 1, "type": "event", "stream": "cam1", "seq": seq, "event": "line_cross", "line": "north-bound",
            "direction": "in", "frame": seq, "pts": round(seq / 30, 6), "ts": round(time.time(), 6),
            "object": {"id": seq % 50, "cls": 2, "label": "car", "score": 0.8312,
                       "box": [412.0, 233.5, 498.2, 290.1]}, "sent": time.time()}


def frame_message(seq: int, crossed: int) -> dict:
    return {"v": 1, "type": "frame", "stream": "cam1", "seq": seq, "frame": seq, "objects": [],
            "counts": {"north": {"in": crossed, "out": crossed // 2,
                                 "classes": {"car": {"in": crossed, "out": crossed // 2}}}, "bay": crossed % 5}}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q / 100 * len(values)))]


def bench_write(port: int, rate: int, seconds: float, burst: int, folder: Path) -> dict:
    """The paced phase and the burst; returns their figures."""
    from streamlens.sinks.mqtt import MqttSink
    from streamlens.wire.schema import dumps

    results = {}
    for phase in ("paced", "burst"):
        out = folder / f"sub-{phase}.json"
        sub = start_subscriber(port, out)
        sink = MqttSink("127.0.0.1", port, queue_size=10_000 if phase == "paced" else 10 * burst)
        sink.open()
        while not sink.connected:
            time.sleep(0.01)
        event_us, frame_us = [], []
        count = int(rate * seconds) if phase == "paced" else burst
        started = time.perf_counter()
        frames = 0
        for seq in range(count):
            if phase == "paced":
                due = started + seq / rate
                while (now := time.perf_counter()) < due:
                    time.sleep(min(due - now, 0.0005))
                if seq * 30 // rate >= frames:  # a frame message every 1/30 s, counts changing
                    msg = frame_message(frames, seq // 40)
                    payload = dumps(msg)
                    t0 = time.perf_counter_ns()
                    sink.write(None, msg, payload)
                    frame_us.append((time.perf_counter_ns() - t0) / 1000)
                    frames += 1
            msg = event_message(seq)
            payload = dumps(msg)
            t0 = time.perf_counter_ns()
            sink.write(None, msg, payload)
            event_us.append((time.perf_counter_ns() - t0) / 1000)
        wrote_s = time.perf_counter() - started
        eos = {"v": 1, "type": "eos", "stream": "cam1", "seq": count, "frames": frames, "reason": "end"}
        sink.write(None, eos, dumps(eos))
        while sink.pending() and time.perf_counter() - started < seconds + 120:
            time.sleep(0.005)
        delivered_s = time.perf_counter() - started
        sink.close()
        sub.wait(120)
        seen = json.loads(out.read_text())
        results[phase] = {
            "events": count, "frames": frames, "wrote_s": wrote_s, "delivered_s": delivered_s,
            "write_us": {"p50": percentile(event_us, 50), "p99": percentile(event_us, 99),
                         "mean": statistics.fmean(event_us), "max": max(event_us)},
            "frame_write_us": {"p50": percentile(frame_us, 50), "p99": percentile(frame_us, 99)} if frame_us else None,
            "dropped": sum(sink.drops().values()), "sent": sink.sent["cam1"],
            "received": seen["received"], "twice": seen["twice"],
            "latency_ms": {"p50": percentile(seen["latency_ms"], 50), "p99": percentile(seen["latency_ms"], 99)},
        }
    return results


# ----------------------------------------------------------------------- part 2: a pipeline

def pipeline_text(clip: Path, lines: int) -> str:
    ys = [0.15 + 0.75 * i / max(1, lines - 1) for i in range(lines)]
    rules = "\n".join(f"    - {{name: h{i}, points: [[0.0, {y:.3f}], [1.0, {y:.3f}]]}}" for i, y in enumerate(ys))
    return f"""
sources: [{{uri: {clip}}}]
detector: {{backend: motion}}
keyframes: {{interval: 1}}
analytics:
  lines:
{rules}
  zones:
    - {{name: left, polygon: [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], inertia: 1}}
    - {{name: right, polygon: [[0.5, 0], [1, 0], [1, 1], [0.5, 1]], inertia: 1}}
sinks: []
"""


def pipeline_main(path: str, out: str, port: int) -> int:
    """One run of the pipeline file `path`, with an mqtt sink to `port` unless it is 0; save frames,
    events, the first-to-last-frame time and the mqtt sink's figures to `out`."""
    import streamlens
    from streamlens.sinks import Sink
    from streamlens.sinks.mqtt import MqttSink

    class Clock(Sink):
        name, inline = "clock", True

        def __init__(self):
            self.first = self.last = None
            self.cpu = (0.0, 0.0)
            self.frames = self.events = 0

        def write(self, item, message, payload):
            if message["type"] == "frame":
                self.last, cpu = time.perf_counter(), time.process_time()
                if self.first is None:
                    self.first, self.cpu = self.last, (cpu, cpu)
                self.cpu = (self.cpu[0], cpu)
                self.frames += 1
            elif message["type"] == "event":
                self.events += 1

    class Timed(MqttSink):
        """The mqtt sink, with the time its write() takes on the engine's thread and its own thread's CPU."""

        write_s = thread_cpu_s = 0.0

        def write(self, item, message, payload):
            started = time.perf_counter()
            super().write(item, message, payload)
            self.write_s += time.perf_counter() - started

        def _run(self):
            started = time.thread_time()
            try:
                super()._run()
            finally:
                self.thread_cpu_s = time.thread_time() - started

    clock = Clock()
    mqtt = Timed("127.0.0.1", port) if port else None  # as `{type: mqtt, host: 127.0.0.1, port: P}` builds it
    report = streamlens.Pipeline.from_yaml(path, sinks=[clock] + ([mqtt] if mqtt else [])).run()
    figures = {"status": report.status, "frames": clock.frames, "events": clock.events,
               "seconds": clock.last - clock.first, "cpu_s": clock.cpu[1] - clock.cpu[0], "wall_s": report.wall_s}
    if mqtt:
        figures.update(sent=sum(mqtt.sent.values()), dropped=sum(mqtt.drops().values()), write_s=mqtt.write_s,
                       thread_cpu_s=mqtt.thread_cpu_s)
    Path(out).write_text(json.dumps(figures))
    return 0


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of process `pid` so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_pipeline(port: int, broker_pid: int, clip: Path, lines: int, repeats: int, folder: Path) -> dict:
    path = folder / "pipeline.yaml"
    path.write_text(pipeline_text(clip, lines))

    def trial(kind: str, i: int) -> dict:
        out = folder / f"run-{kind}-{i}.json"
        broker_before = process_cpu_s(broker_pid)
        subprocess.run([sys.executable, __file__, "_pipeline", str(path), str(out),
                        str(port if kind == "with" else 0)], check=True)
        run = json.loads(out.read_text())
        run["broker_cpu_s"] = process_cpu_s(broker_pid) - broker_before
        run["fps"] = (run["frames"] - 1) / run["seconds"]
        run["cpu_ms"] = run["cpu_s"] * 1000 / (run["frames"] - 1)
        print(f"  {kind:7s} run {i + 1}: {run['fps']:.1f} frames/s, {run['events']} events", file=sys.stderr)
        return run

    runs: dict[str, list[dict]] = in_turns(["without", "with"], repeats, trial)  # the order reversed each round
    med = {k: statistics.median(r["fps"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["cpu_ms"] for r in v) for k, v in runs.items()}
    pairs = sorted(w["fps"] / o["fps"] for w, o in zip(runs["with"], runs["without"]))  # run i of each kind: adjacent
    best = max(r["fps"] for r in runs["with"]) / max(r["fps"] for r in runs["without"])
    with_mqtt = runs["with"]
    share = {key: statistics.median(r[key] / r["seconds"] for r in with_mqtt)
             for key in ("write_s", "thread_cpu_s", "broker_cpu_s")}
    return {"runs": runs, "fps": med, "ratio": med["with"] / med["without"], "cpu_ms": cpu, "share": share,
            "pairs": pairs, "best": best,
            "events_per_s": statistics.median(r["events"] / r["seconds"] for r in runs["with"])}


# ----------------------------------------------------------------------- the report

def versions() -> str:
    import paho.mqtt

    mosquitto = subprocess.run(["/usr/sbin/mosquitto", "-h"], capture_output=True, text=True).stdout.splitlines()
    return (f"Python {platform.python_version()}, paho-mqtt {paho.mqtt.__version__}, "
            f"{mosquitto[0] if mosquitto else 'mosquitto ?'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["write", "pipeline", "all"], default="all")
    parser.add_argument("--rate", type=int, default=1000, help="events a second in the paced phase")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the paced phase")
    parser.add_argument("--burst", type=int, default=20_000, help="events written as fast as write() takes them")
    parser.add_argument("--clip", type=Path, default=CLIP if CLIP.is_file() else SAMPLE)
    parser.add_argument("--lines", type=int, default=24, help="lines across the road in the pipeline")
    parser.add_argument("--repeats", type=int, default=5, help="pipeline runs of each kind")
    args = parser.parse_args()

    from streamlens.testing.mosquitto import Broker, mosquitto_missing

    if mosquitto_missing():
        raise SystemExit(f"bench_mqtt: {mosquitto_missing()}")

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        broker = Broker(folder).start()
        try:
            write = bench_write(broker.port, args.rate, args.seconds, args.burst, folder) \
                if args.part in ("write", "all") else None
            pipe = bench_pipeline(broker.port, broker.proc.pid, args.clip, args.lines, args.repeats, folder) \
                if args.part in ("pipeline", "all") else None
        finally:
            broker.stop()
    print(f"Command: `{command_line()}`")
    print(f"Date: {started}; load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end.")
    print(f"Machine: {machine_line()}; {versions()}.\n")
    if write:
        print("| phase | events | write() p50 µs | p99 µs | mean µs | max µs | frame write() p50 / p99 µs "
              "| dropped | sent | broker delivered | twice | latency p50 / p99 ms | written in s | all out in s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for phase, r in write.items():
            fw = r["frame_write_us"]
            frames = f"{fw['p50']:.1f} / {fw['p99']:.1f}" if fw else "-"
            name = f"{args.rate}/s for {args.seconds:g} s" if phase == "paced" else "burst"
            print(f"| {name} | {r['events']:,} | {r['write_us']['p50']:.1f} | {r['write_us']['p99']:.1f} | "
                  f"{r['write_us']['mean']:.1f} | {r['write_us']['max']:.0f} | {frames} | {r['dropped']} | "
                  f"{r['sent']:,} | {r['received']:,} | {r['twice']} | {r['latency_ms']['p50']:.2f} / "
                  f"{r['latency_ms']['p99']:.2f} | {r['wrote_s']:.2f} | {r['delivered_s']:.2f} |")
        print()
    if pipe:
        runs = pipe["runs"]
        print(f"Pipeline: {args.clip.name}, motion detector, interval 1, bulk, {args.lines} lines and 2 zones; "
              f"{args.repeats} runs of each kind, alternating.\n")
        print("| sink | frames/s (median) | each run | CPU ms per frame (median; the process) | events | "
              "mqtt sent / dropped |")
        print("|---|---:|---|---:|---:|---:|")
        for kind in ("without", "with"):
            each = ", ".join(f"{r['fps']:.1f}" for r in runs[kind])
            sent = (f"{statistics.median(r['sent'] for r in runs[kind]):,.0f} / "
                    f"{max(r['dropped'] for r in runs[kind])}") if kind == "with" else "-"
            print(f"| {kind} mqtt | {pipe['fps'][kind]:.1f} | {each} | {pipe['cpu_ms'][kind]:.2f} | "
                  f"{runs[kind][0]['events']:,} | {sent} |")
        pairs = pipe["pairs"]
        print(f"\nframes/s with / without: {pipe['ratio']:.3f} (medians); {statistics.median(pairs):.3f} "
              f"(median of the {len(pairs)} pairs of adjacent runs, from {pairs[0]:.3f} to {pairs[-1]:.3f}); "
              f"{pipe['best']:.3f} (the fastest run of each kind).")
        print(f"CPU per frame with / without: "
              f"{pipe['cpu_ms']['with'] / pipe['cpu_ms']['without']:.3f}; events/s with mqtt (median): "
              f"{pipe['events_per_s']:.0f}")
        share = pipe["share"]
        print(f"\nWhere the mqtt runs' time went (medians, as a share of the span from first to last frame): "
              f"write() on the engine's thread {share['write_s']:.1%}, the sink's thread {share['thread_cpu_s']:.1%} "
              f"of a core (CPU, system time included), the broker {share['broker_cpu_s']:.1%} of a core.")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_subscriber":
        sys.exit(subscriber_main(int(sys.argv[2]), sys.argv[3], 30.0))
    if len(sys.argv) > 1 and sys.argv[1] == "_pipeline":
        sys.exit(pipeline_main(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    sys.exit(main())
