"""A run's history in SQLite (`runtime.history`): every event, and per minute the counts of each
stream, rule and class, kept `keep_days` (store.py); written off the engine's thread (sink.py);
read by `/api/history`, `/api/events` and `streamlens history`."""
