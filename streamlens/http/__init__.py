"""Health and metrics over HTTP: `server.MetricsServer` serves `/metrics` (Prometheus text) and
`/healthz` for a running pipeline; the statistics it reads are kept in `streamlens.metrics`, and
what it reads of the run itself is `run_view.RunView`."""
