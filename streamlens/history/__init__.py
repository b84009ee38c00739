"""A run's history in SQLite (`runtime.history`): every event, and per minute the counts of each
stream, rule and class, kept `keep_days` (store.py); each track's newest embedding, times and
snapshot for search by example (tracks.py, search.py, crop.py); written off the engine's thread
(sink.py); read by `/api/history`, `/api/events`, `/api/search`, `streamlens history` and
`streamlens search`."""
