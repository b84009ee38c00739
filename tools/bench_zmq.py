"""Benchmark the zmq sink's fan-out on loopback: messages per second, and publish-to-receive latency.

For each number of subscribers (1, 10 and 50 by default) it runs two phases against a real
`ZmqSink` (mode pub, tcp://127.0.0.1) and real SUB sockets in subscriber processes:

- throughput: `--messages` frame messages (20 objects each, ~1.8 KB of JSON) as fast as the sink
  takes them; the rate is messages / (first send .. the slowest subscriber has them all). The
  subscribers drain their SUB sockets in C (`zmq.proxy_steerable`, polled for its counters every
  millisecond), as a subscriber in C, Go or Rust would, so the figure is the sink's and the
  transport's fan-out capacity, not Python's receive speed. The high-water mark is raised for this
  phase, so nothing is dropped and the figure is a delivered rate; losses, if any, are reported.
- latency: `--rate` messages a second for `--seconds`, at the sink's default high-water mark, to
  Python subscribers (plain pyzmq SUB sockets, several per process: `--per-process`) that read
  each message and find its `seq`. Latency is `time.monotonic_ns()` just after the subscriber's
  recv minus the same clock just before the sink's `write()` (one clock for all processes on
  Linux); p50 and p99 over every message at every subscriber.

Payloads are serialised before timing starts, as the runtime serialises each result once, outside
the sinks.

`--slow` measures instead what a slow subscriber costs the others: the throughput phase, run
`--repeats` times with and without one more subscriber (a Python SUB socket at the default
high-water mark that sleeps `SLOW_SLEEP_S` per message), the two kinds taking turns so that the
machine's load weighs on both alike; it reports each kind's median delivered rate and their ratio.
(The tests check only that a slow subscriber never makes the others lose messages; how much time
it costs is this benchmark's question.)

Run:
    python tools/bench_zmq.py                        # 1, 10, 50 subscribers; a markdown table
    python tools/bench_zmq.py --subscribers 10 --messages 50000
    python tools/bench_zmq.py --slow --subscribers 1 10
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streamlens.bench.harness import command_line, machine_line

OBJECTS = 20
#: how long the `--slow` subscriber sleeps per message
SLOW_SLEEP_S = 0.01


# ----------------------------------------------------------------------- subscriber processes


def subscriber_main(kind: str, endpoint: str, sockets: int, expected: int, out: str, timeout_s: float) -> int:
    """Connect `sockets` SUB sockets to `endpoint` and save to `out` what they saw (see below).

    - `timed`: Python reads every message and notes its receive time by `seq`, until every
      socket has the eos (or `timeout_s` passes without a message); saves (sockets, expected)
      times in ns, -1 for a message never received.
    - `drain`: each socket is drained in C by `zmq.proxy_steerable` (as a subscriber written in C,
      Go or Rust would read), and asked for its counters every millisecond; saves, per socket,
      when it had all `expected` messages (ns, -1 if never) and how many it had.
    - `slow`: one socket at the default high-water mark, read in Python, `SLOW_SLEEP_S` per
      message, until it is killed; saves nothing.
    """
    import zmq

    ctx = zmq.Context()
    if kind == "slow":
        s = ctx.socket(zmq.SUB)
        s.subscribe(b"")
        s.connect(endpoint)
        while True:
            s.recv_multipart()
            time.sleep(SLOW_SLEEP_S)
    socks = []
    for _ in range(sockets):
        s = ctx.socket(zmq.SUB)
        s.rcvhwm = 0  # this side never drops: what is measured is the publisher and the transport
        s.subscribe(b"")
        s.connect(endpoint)
        socks.append(s)
    result = (drain if kind == "drain" else read_timed)(ctx, socks, expected, timeout_s)
    np.save(out, result)
    for s in socks:
        s.close(linger=0)
    ctx.term()
    return 0


def read_timed(ctx, socks, expected: int, timeout_s: float) -> np.ndarray:
    import zmq

    times = np.full((len(socks), expected), -1, np.int64)
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    index = {s: i for i, s in enumerate(socks)}
    open_socks = set(socks)
    now_ns, again = time.monotonic_ns, zmq.Again
    while open_socks:
        ready = poller.poll(timeout_s * 1000)
        if not ready:
            break
        for s, _ in ready:
            row = times[index[s]]
            while True:
                try:
                    topic = s.recv(zmq.NOBLOCK)
                except again:
                    break
                payload = s.recv()
                while s.rcvmore:
                    s.recv()
                now = now_ns()
                if topic[:1] == b"e":  # eos
                    open_socks.discard(s)
                    poller.unregister(s)
                    break
                if topic[:1] != b"f":
                    continue
                start = payload.find(b'"seq":') + 6
                row[int(payload[start:payload.find(b",", start)])] = now
    return times


def drain(ctx, socks, expected: int, timeout_s: float) -> np.ndarray:
    import struct
    import threading

    import zmq

    controls, threads = [], []
    for i, s in enumerate(socks):
        nowhere = ctx.socket(zmq.PUB)  # no subscribers: what the proxy forwards is dropped at once
        nowhere.bind(f"inproc://nowhere{i}")
        inner, outer = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
        inner.bind(f"inproc://control{i}")
        outer.connect(f"inproc://control{i}")
        t = threading.Thread(target=zmq.proxy_steerable, args=(s, nowhere, None, inner), daemon=True)
        t.start()
        controls.append((outer, inner, nowhere))
        threads.append(t)
    done = np.full((len(socks), 2), -1, np.int64)
    frames_expected = 2 * expected  # two parts a message: topic and payload
    last_progress, last_total = time.monotonic(), -1
    while (done[:, 0] < 0).any() and time.monotonic() - last_progress < timeout_s:
        time.sleep(0.001)
        for i, (control, _, _) in enumerate(controls):
            if done[i, 0] >= 0:
                continue
            control.send(b"STATISTICS")
            frames_in = struct.unpack("Q", control.recv_multipart()[0])[0]
            done[i, 1] = min(frames_in // 2, expected)  # the eos aside
            if frames_in >= frames_expected:
                done[i, 0] = time.monotonic_ns()
        total = int(done[:, 1].sum())
        if total != last_total:
            last_progress, last_total = time.monotonic(), total
    for control, inner, nowhere in controls:
        control.send(b"TERMINATE")
    for t in threads:
        t.join(timeout=5)
    for control, inner, nowhere in controls:
        for sock in (control, inner, nowhere):
            sock.close(linger=0)
    return done


# --------------------------------------------------------------------------------- publisher


def payloads(count: int) -> list[tuple[object, dict, bytes]]:
    """`count` frame results with 20 objects each, as (item, message, payload) for `write()`."""
    import supervision as sv

    from streamlens.frame import Frame, FrameResult
    from streamlens.wire.schema import dumps, frame_message

    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 1000, (OBJECTS, 2)).astype(np.float32)
    det = sv.Detections(xyxy=np.hstack([xy, xy + 80]), confidence=rng.uniform(0.3, 1, OBJECTS).astype(np.float32),
                        class_id=np.full(OBJECTS, 2), tracker_id=np.arange(OBJECTS))
    det.data["class_name"] = np.array(["car"] * OBJECTS, dtype=object)
    image = np.zeros((720, 1280, 3), np.uint8)
    out = []
    for seq in range(count):
        frame = Frame("cam1", seq, seq / 30, time.time(), image,
                      timings={"decode": 4.1, "detect": 0.0, "track": 0.6, "total": 6.2})
        item = FrameResult(frame, seq, False, det)
        message = frame_message(item)
        out.append((item, message, dumps(message)))
    return out


def start_subscribers(kind: str, endpoint: str, count: int, per_process: int, expected: int, folder: Path,
                      timeout_s: float) -> list[tuple[subprocess.Popen, Path]]:
    procs = []
    left, i = count, 0
    while left:
        n = min(per_process, left)
        out = folder / f"sub{i}.npy"
        cmd = [sys.executable, __file__, "--subscriber", kind, endpoint, str(n), str(expected), str(out),
               str(timeout_s)]
        procs.append((subprocess.Popen(cmd), out))
        left -= n
        i += 1
    return procs


def run_phase(subscribers: int, items: list, *, rate: float | None, hwm: int, per_process: int,
              folder: Path, slow: bool = False) -> dict:
    """Publish `items` to `subscribers` (paced at `rate` a second, or as fast as possible), and
    with `slow` to one slow subscriber more (its figures are left out)."""
    from streamlens.frame import StreamEnd
    from streamlens.wire.schema import dumps, eos_message
    from streamlens.sinks.zmq import ZmqSink

    sink = ZmqSink("tcp://127.0.0.1:*", hwm=hwm, linger_ms=5000)
    sink.open()
    kind = "timed" if rate else "drain"
    procs = start_subscribers(kind, sink.endpoint, subscribers, per_process, len(items), folder, timeout_s=10)
    laggard = start_subscribers("slow", sink.endpoint, 1, 1, 0, folder, timeout_s=0)[0][0] if slow else None
    try:
        if not sink.wait_for(subscribers + slow, timeout_s=120):
            raise SystemExit(f"only {sink.peers} of {subscribers + slow} subscribers connected")
        time.sleep(0.2)
        sent = np.empty(len(items), np.int64)
        now_ns = time.monotonic_ns
        write = sink.write
        start = time.monotonic()
        if rate is None:
            for i, (item, message, payload) in enumerate(items):
                sent[i] = now_ns()
                write(item, message, payload)
        else:
            for i, (item, message, payload) in enumerate(items):
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                sent[i] = now_ns()
                write(item, message, payload)
        send_s = time.monotonic() - start
        end = StreamEnd("cam1", len(items), len(items))
        sink.write(end, eos_message(end), dumps(eos_message(end)))
        for proc, _ in procs:
            proc.wait(timeout=300)
    finally:
        sink.close()
        for proc in [p for p, _ in procs] + ([laggard] if laggard else []):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    saved = np.concatenate([np.load(out) for _, out in procs])  # one row per subscriber
    stats = {"subscribers": subscribers, "messages": len(items), "send_rate": len(items) / send_s}
    if kind == "drain":
        complete = saved[:, 0] >= 0
        stats["lost"] = int(len(items) * subscribers - saved[:, 1].sum())
        stats["delivered_rate"] = (len(items) / ((saved[:, 0].max() - sent[0]) / 1e9)
                                   if complete.all() else float("nan"))
        return stats
    got = saved >= 0
    latency_ms = (saved - sent[None, :])[got] / 1e6
    stats["lost"] = int((~got).sum())
    stats["p50_ms"] = float(np.percentile(latency_ms, 50)) if latency_ms.size else float("nan")
    stats["p99_ms"] = float(np.percentile(latency_ms, 99)) if latency_ms.size else float("nan")
    return stats


def machine() -> str:
    import zmq

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{machine_line()}; load average {load} at start; Python "
            f"{platform.python_version()}, pyzmq {zmq.pyzmq_version()}, libzmq {zmq.zmq_version()}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--subscribers", type=int, nargs="+", default=[1, 10, 50])
    p.add_argument("--messages", type=int, default=20_000, help="messages in the throughput phase")
    p.add_argument("--rate", type=float, default=1000.0, help="messages a second in the latency phase")
    p.add_argument("--seconds", type=float, default=3.0, help="length of the latency phase")
    p.add_argument("--per-process", type=int, default=10, help="SUB sockets per subscriber process")
    p.add_argument("--slow", action="store_true", help="what one slow subscriber costs the others (see above)")
    p.add_argument("--repeats", type=int, default=3, help="--slow: runs of each kind")
    p.add_argument("--subscriber", nargs=6, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.subscriber:
        kind, endpoint, sockets, expected, out, timeout_s = args.subscriber
        return subscriber_main(kind, endpoint, int(sockets), int(expected), out, float(timeout_s))

    print(f"command: {command_line()}\nmachine: {machine()}", flush=True)
    items = payloads(max(args.messages, int(args.rate * args.seconds)))
    size = len(items[0][2])
    print(f"payload: {size} bytes of JSON, {OBJECTS} objects per message\n")
    if args.slow:
        return slow_cost(args, items[:args.messages])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.subscribers:
            flat = run_phase(n, items[:args.messages], rate=None, hwm=args.messages + 10,
                             per_process=args.per_process, folder=Path(tmp))
            paced = run_phase(n, items[:int(args.rate * args.seconds)], rate=args.rate, hwm=1000,
                              per_process=args.per_process, folder=Path(tmp))
            rows.append((n, flat, paced))
            print(f"{n} subscriber(s): {flat['delivered_rate']:,.0f} msg/s delivered "
                  f"(sink took {flat['send_rate']:,.0f} msg/s, {flat['lost']} lost); at "
                  f"{args.rate:,.0f} msg/s: p50 {paced['p50_ms']:.2f} ms, p99 {paced['p99_ms']:.2f} ms "
                  f"({paced['lost']} lost)", flush=True)
    print()
    print(f"| subscribers | delivered msg/s (all subscribers) | sink send msg/s | lost | "
          f"p50 ms at {args.rate:,.0f} msg/s | p99 ms at {args.rate:,.0f} msg/s | lost |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, flat, paced in rows:
        print(f"| {n} | {flat['delivered_rate']:,.0f} | {flat['send_rate']:,.0f} | {flat['lost']} | "
              f"{paced['p50_ms']:.2f} | {paced['p99_ms']:.2f} | {paced['lost']} |")
    return 0


def slow_cost(args, items: list) -> int:
    """`--slow`: the median delivered rate with and without one slow subscriber, runs alternating."""
    print(f"| subscribers | delivered msg/s without a slow one (median of {args.repeats}) | with one | ratio | "
          "lost (fast ones, with) |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.subscribers:
            rates: dict[bool, list[float]] = {False: [], True: []}
            lost = 0
            for _ in range(args.repeats):
                for slow in (False, True):
                    run = run_phase(n, items, rate=None, hwm=args.messages + 10, per_process=args.per_process,
                                    folder=Path(tmp), slow=slow)
                    rates[slow].append(run["delivered_rate"])
                    lost += run["lost"] if slow else 0
            without, with_slow = (float(np.median(rates[k])) for k in (False, True))
            print(f"| {n} | {without:,.0f} | {with_slow:,.0f} | {with_slow / without:.2f} | {lost} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
