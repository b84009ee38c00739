"""Evaluation: replay benchmark data through the engine's own tracker and score it.

- `mot`: MOTChallenge sequences (public detections in, MOTChallenge result files out);
- `metrics`: HOTA, CLEAR (MOTA) and identity (IDF1) scores, TrackEval-compatible (`trackers.eval`);
- `command`: the `streamlens eval mot` subcommand.
"""
