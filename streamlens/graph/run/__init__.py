"""A run and its streams: `Pipeline` (pipeline.py: building, lifecycle, the run's loop; view.py: what
it shows of itself), `Stream` and `StreamSet` (stream.py: one owner per stream, the run's streams as
a snapshot), streams added and removed while running (changes.py), each stream's figures and the
run's report (stats.py), the `stats` and `eos` messages (reports.py), the loss accounting
(losses.py), results handed to an embedding program (results.py) and what a run changes in the
whole process (process.py)."""
