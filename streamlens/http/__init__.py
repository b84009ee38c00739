"""Health and metrics over HTTP: `server.MetricsServer` serves `/metrics` (Prometheus text) and
`/healthz` for a running pipeline; the statistics it reads are kept in `streamlens.metrics`."""
