"""`streamlens bench`: how many live streams a pipeline carries on this machine, against two yardsticks.

- `command`: the `streamlens bench PIPELINE.yaml` subcommand: the search over K, the table, the JSON;
- `search`: the `--streams` spec (`6`, `1,2,4`, `1-16`) and the search over a range;
- `trial`: one trial: K looping live copies of a video through the pipeline, timed by a subscriber
  in another process, and the figures of its measured window (kept frames, latency percentiles);
- `runner`: the trial's pipeline process; `listener`: the trial's outside subscriber process;
- `probe`: the decode-only limit of the machine, and what the machine and its packages are;
- `reference`: the pipeline's detector on every frame of the video, cached: the yardstick of accuracy;
- `accuracy`: what a subscriber received against it (F1, new-object waits, detection delay);
- `hold`: the plain baseline: the newest frame of each stream detected in turn, its boxes held;
- `baseline`: Ultralytics' own `model.track(stream=True)` on the same video, in its own process.

Example:
    $ streamlens bench pipelines/quickstart.yaml --streams 1,2 --seconds 5 --no-baseline
"""
