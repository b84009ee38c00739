"""The bench's outside subscriber: a process of its own that times every frame message it receives.

It is what a user's consumer is: a plain pyzmq SUB socket in another process, connected to the
pipeline's zmq sink, subscribed to `frame.`, `eos.` and `stats.`. For every frame message it keeps
the stream, the frame index, its `pts`, the frame's `ts` (when the frame became available), the
wall clock at receipt (`time.time()`, taken before the payload is decoded), whether it was a
keyframe, its boxes as `[x1, y1, x2, y2, cls]` rows (the bench scores them against detecting every
frame) and its `detected_frame` when the message has one (else None). It
keeps each stream's last `stats` message and its `eos`, the budget controller's state from every
`stats` message (`control`: `[receipt, rung, share shed, keyframes only]`, once a second), and
counts messages lost on the way (gaps in `seq`). It ends when every expected stream has sent its
`eos`, at `--deadline-s`, or on SIGTERM or SIGINT, and then writes everything as one JSON object
to `--out` (the bench's trial reads it).

It connects before the pipeline binds (ZeroMQ retries the connection), and the bench gives the sink
`wait_subscribers`, so no message is lost to ZeroMQ's slow-joiner effect.

Example:
    $ python -m streamlens.bench.listener tcp://127.0.0.1:5555 --streams s0 s1 --out /tmp/l.json
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

import zmq

from ..wire.codec import PayloadError, decode

#: the topic prefixes the listener subscribes to (the zmq sink counts each as one subscription)
TOPICS = (b"frame.", b"eos.", b"stats.")


def listen(endpoint: str, streams: list[str], deadline_s: float) -> dict:
    """Receive until every stream in `streams` ended, `deadline_s` passed, or SIGTERM/SIGINT."""
    stop = {"signal": None}

    def on_signal(signum, _frame) -> None:
        stop["signal"] = signal.Signals(signum).name

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.rcvhwm = 0  # never drop here: what is lost must be lost on the publisher's side
    for prefix in TOPICS:
        sock.subscribe(prefix)
    sock.connect(endpoint)
    data = {name: {"frame": [], "pts": [], "ts": [], "recv": [], "key": [], "boxes": [], "det": [], "lost": 0,
                   "stats": None, "eos": None, "control": []}
            for name in streams}
    next_seq: dict[str, int] = {}
    ended: set[str] = set()
    skipped = 0
    deadline = time.monotonic() + deadline_s
    timed_out = False
    try:
        while len(ended) < len(streams) and stop["signal"] is None:
            if time.monotonic() >= deadline:
                timed_out = True
                break
            if not sock.poll(200):
                continue
            parts = sock.recv_multipart()
            received = time.time()
            try:
                message = decode(parts[1])
            except (PayloadError, IndexError):
                skipped += 1
                continue
            stream = message.get("stream")
            entry = data.get(stream)
            if entry is None:
                continue
            kind = message.get("type")
            if kind in ("frame", "eos"):
                seq = message.get("seq")
                if isinstance(seq, int):
                    if stream in next_seq and seq > next_seq[stream]:
                        entry["lost"] += seq - next_seq[stream]
                    next_seq[stream] = seq + 1
            if kind == "frame":
                entry["frame"].append(message["frame"])
                entry["ts"].append(message["ts"])
                entry["recv"].append(received)
                entry["key"].append(1 if message.get("keyframe") else 0)
                entry["pts"].append(message.get("pts"))
                entry["boxes"].append([o["box"] + [o.get("cls", -1)] for o in message.get("objects") or ()])
                entry["det"].append(message.get("detected_frame"))
            elif kind == "stats":
                entry["stats"] = message
                control = message.get("control")
                if isinstance(control, dict):  # the rung this stream was on, as its engine applied it
                    entry["control"].append([received, control.get("level"), control.get("shed_fraction"),
                                             bool(control.get("keyframes_only"))])
            elif kind == "eos":
                entry["eos"] = message
                ended.add(stream)
    finally:
        sock.close(linger=0)
        ctx.term()
    return {"streams": data, "ended": sorted(ended), "timed_out": timed_out, "signal": stop["signal"],
            "skipped": skipped}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streamlens.bench.listener",
                                description="Time every frame message of a zmq sink (the bench's subscriber).")
    p.add_argument("endpoint", help="the zmq sink's endpoint, e.g. tcp://127.0.0.1:5555")
    p.add_argument("--streams", nargs="+", required=True, metavar="NAME", help="the streams to wait for")
    p.add_argument("--deadline-s", type=float, default=600.0, help="give up after this long (default 600)")
    p.add_argument("--out", required=True, help="where to write the JSON result")
    args = p.parse_args(argv)
    result = listen(args.endpoint, args.streams, args.deadline_s)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, separators=(",", ":"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
