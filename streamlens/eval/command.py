"""`streamlens eval mot SEQ_DIR [SEQ_DIR ...] --interval N --out DIR`: score the tracker on MOTChallenge.

Each SEQ_DIR is a MOTChallenge sequence folder (`seqinfo.ini`, `det/det.txt`, and `gt/gt.txt` for
training sequences). Its public detections are replayed through the same tracker the engine runs,
given only on every N-th frame (the Kalman prediction carries the frames between: there are no
images). Every frame's objects go to DIR/<sequence>.txt in MOTChallenge format; when ground truth is
there, HOTA, MOTA and IDF1 (TrackEval-compatible, see `streamlens.eval.metrics`) are printed per
sequence and combined.

Example:
    $ streamlens eval mot ../shared/data/mot/MOT17-09 --interval 5 --out out/mot
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import StreamlensError


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    """Add `eval` (with its one kind, `mot`) to the command's subparsers."""
    evaluate = sub.add_parser("eval", help="score the tracker on a benchmark")
    kinds = evaluate.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    mot = kinds.add_parser("mot", parents=[common], help="replay MOTChallenge public detections and score them",
                           description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    mot.add_argument("sequences", nargs="+", metavar="SEQ_DIR", help="MOTChallenge sequence folders")
    mot.add_argument("--interval", type=_positive_int, default=1,
                     help="give the tracker detections on every N-th frame only (default 1)")
    mot.add_argument("--out", required=True, metavar="DIR", help="where to write <sequence>.txt results")


def run(args: argparse.Namespace) -> int:
    """Replay, write and score every sequence; 0 when all went through."""
    from ..track.tracker import KeyframeTracker
    from .metrics import combine, format_table, read_mot_file, score_sequence
    from .mot import load_sequence, replay, write_results

    sequences = [load_sequence(folder) for folder in args.sequences]
    names = [s.name for s in sequences]
    if len(set(names)) != len(names):
        raise StreamlensError("two sequence folders have the same name; their results would overwrite each other")
    out = Path(args.out)
    scores = []
    for sequence in sequences:
        results = replay(sequence, KeyframeTracker("kalman", sequence.fps), args.interval)
        path = write_results(results, out / f"{sequence.name}.txt")
        print(f"{sequence.name}: {sequence.length} frames, interval {args.interval} -> {path}")
        if sequence.gt_path is not None:
            scores.append(score_sequence(sequence.name, read_mot_file(sequence.gt_path), read_mot_file(path),
                                         sequence.length))
    if scores:
        print(format_table(scores + ([combine(scores)] if len(scores) > 1 else [])))
    else:
        print("no ground truth (gt/gt.txt) in these folders: results written, nothing scored")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
