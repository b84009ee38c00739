"""`streamlens subscribe ENDPOINT`: print a zmq sink's messages as JSON lines, and report loss.

Each message becomes one compact JSON line on stdout (pipe it to `jq`); lost messages, found from
gaps in each stream's `seq`, are reported on stderr as they are found, and a one-line summary is
written to stderr at the end. `--frames DIR` saves the JPEG frames a sink with `frames: jpeg`
sends, as `DIR/<stream>-<frame>.jpg`; `streamlens events --snapshots DIR` saves the events'
snapshots (`analytics.snapshots`) as `DIR/<stream>-<event>-<id>-<seq>.jpg`.

`--stream NAME` receives everything of one stream (frames, eos, stats, events) and nothing of any
other; `--topic` takes topic prefixes, and one that names a type and a stream is exact
(`frame.cam1` never receives cam10): topics are `<type>.<stream>.` (see `streamlens.wire.codec`).

Example:
    $ streamlens subscribe tcp://127.0.0.1:5555 --stream cam1 | jq -c '[.type, .seq]'
    $ streamlens subscribe tcp://127.0.0.1:5555 --topic frame.cam1 | jq -c '[.seq, (.objects | length)]'
    $ streamlens subscribe tcp://127.0.0.1:5555 --topic stats. --count 5
    $ streamlens events tcp://127.0.0.1:5555 --stream cam1     # the analytics' events only
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PROG = "streamlens subscribe"


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    """Add the `subscribe` subcommand to the `streamlens` parser's subparsers."""
    p = sub.add_parser("subscribe", parents=[common], help="print a zmq sink's messages as JSON lines",
                       description="Print each message of a zmq sink as one JSON line; report lost "
                                   "messages (gaps in seq) on stderr.")
    p.add_argument("-t", "--topic", action="append", default=[], metavar="PREFIX",
                   help="topic prefix to receive, e.g. frame., eos., stats., or frame.cam1 (exactly cam1's "
                        "frames) (repeatable; default all)")
    p.add_argument("-s", "--stream", action="append", default=[], metavar="NAME",
                   help="receive every message of this stream and of no other (repeatable)")
    p.add_argument("--frames", metavar="DIR", help="save JPEG frames (sink option frames: jpeg) in DIR")
    _connection_and_end(p, "exit once every stream seen has ended (eos)")


def _connection_and_end(p: argparse.ArgumentParser, until_eos: str) -> None:
    """The arguments `subscribe` and `events` share: where to connect, and when to stop."""
    p.add_argument("endpoint", help="the sink's endpoint, e.g. tcp://127.0.0.1:5555")
    p.add_argument("--pull", action="store_true", help="connect a PULL socket, for a sink in mode: push")
    p.add_argument("--server-key", metavar="FILE", help="CurveZMQ: the publisher's public key file (server.key)")
    p.add_argument("--client-key", metavar="FILE", help="CurveZMQ: this subscriber's secret key file")
    p.add_argument("--until-eos", action="store_true", help=until_eos)
    p.add_argument("--count", type=int, metavar="N", help="exit after N messages")
    p.add_argument("--timeout", type=float, metavar="S", help="exit when no message comes for S seconds")


def run(args) -> int:
    """Run the command; the exit code is 0 (130 on Ctrl-C). Connection errors raise
    `SubscriberError`, which the CLI prints as one line."""
    from ..wire.codec import PayloadError, json_bytes
    from ..wire.subscriber import Subscriber

    frames_dir = Path(args.frames) if args.frames else None
    if frames_dir is not None:
        frames_dir.mkdir(parents=True, exist_ok=True)
    out, err = sys.stdout, sys.stderr
    seen, ended = set(), set()
    code = 0
    with Subscriber(args.endpoint, args.topic, streams=args.stream, pull=args.pull,
                    server_key=args.server_key, client_key=args.client_key) as sub:
        try:
            while args.count is None or sub.received < args.count:
                try:
                    msg = sub.recv(timeout=0)  # flush stdout only when nothing is waiting
                    if msg is None:
                        out.flush()
                        msg = sub.recv(timeout=args.timeout)
                except PayloadError as e:
                    print(f"{PROG}: skipped a message: {e}", file=err)
                    continue
                if msg is None:
                    break
                if msg.gap is not None:
                    print(f"{PROG}: gap: {msg.gap}", file=err, flush=True)
                out.write(json_bytes(msg.data).decode())  # never NaN, whatever the payload held
                out.write("\n")
                if msg.jpeg is not None and frames_dir is not None:
                    (frames_dir / _jpeg_name(msg)).write_bytes(msg.jpeg)
                if msg.type in ("frame", "eos", "event"):
                    seen.add(msg.stream)
                if msg.type == "eos":
                    ended.add(msg.stream)
                    if args.until_eos and ended >= seen:
                        break
            out.flush()
        except KeyboardInterrupt:
            code = 130
        except BrokenPipeError:  # the reader (head, jq) went away: stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            return 0
        print(f"{PROG}: {sub.received} message(s), {sub.missing} lost in {len(sub.gaps)} gap(s)", file=err)
    return code


def _jpeg_name(msg) -> str:
    """The file a message's JPEG is saved as: `<stream>-<frame>.jpg` for a frame,
    `<stream>-<event>-<id>-<seq>.jpg` for an event's snapshot."""
    if msg.type == "event":
        return f"{msg.stream}-{msg.data.get('event')}-{(msg.data.get('object') or {}).get('id')}-{msg.seq}.jpg"
    return f"{msg.stream}-{msg.data.get('frame', msg.seq)}.jpg"


def add_events_parser(sub, common: argparse.ArgumentParser) -> None:
    """Add the `events` subcommand: `subscribe` for the analytics' events only."""
    p = sub.add_parser("events", parents=[common], help="print a zmq sink's events (analytics) as JSON lines",
                       description="Print each event of a zmq sink (line_cross, zone_enter, object_end, ...) as "
                                   "one JSON line; report lost events (gaps in their seq) on stderr.")
    p.add_argument("-s", "--stream", action="append", default=[], metavar="NAME",
                   help="only this stream's events (repeatable)")
    p.add_argument("--snapshots", metavar="DIR", help="save the events' JPEG snapshots (analytics.snapshots) in DIR")
    _connection_and_end(p, "exit once every stream seen has ended (its eos line is printed too)")


def run_events(args) -> int:
    """`streamlens events`: `run` with the topics of events (and of stream ends, with --until-eos)."""
    kinds = ["event", "eos"] if args.until_eos else ["event"]
    args.topic = [f"{k}.{s}" for k in kinds for s in args.stream] if args.stream else [f"{k}." for k in kinds]
    args.stream, args.frames = [], args.snapshots
    return run(args)


__all__ = ["add_parser", "run", "add_events_parser", "run_events"]
