"""The runtime: how a frame travels from its source to the sinks, in rooms by job.

    source thread (admit.py run_source) --inbox (channel.py)--> engine (engine.py): lanes, order,
        keyframes out to the detector's thread, detections back, tracking
    -> the route of a result (publish/): stages in order, then the fan-out to the sinks

- `engine.py`, `admit.py`, `channel.py`: the engine and its lanes, admission of each decoded
  frame, the bounded queues between threads (and the file sources' credits).
- `run/`: a run and its streams: `Pipeline` (building, lifecycle, the run's loop), `Stream` and
  `StreamSet` (one owner per stream), streams added and removed while running, the figures, the
  `stats` and `eos` messages and the loss accounting.
- `schedule/`: what the detector sees and when: keyframe schedules, the shared schedule of live
  streams, regions of a frame, batches and the detector's thread.
- `overload/`: past capacity: the budget controller's ladder and each stream's shedder.
- `publish/`: after the engine: `Stage` and the result stages (built in one place), the route of
  a result, the fan-out to the sinks.

`streamlens.Pipeline` is `run.pipeline.Pipeline`; docs/architecture.md draws the whole.
"""
