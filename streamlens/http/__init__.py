"""The run over HTTP: `server.MetricsServer` (aiohttp, on a thread and an event loop of its own)
serves `/metrics` (`metrics`), `/healthz`, and the live page (`page_files`) with its JSON API
(`api`), each request first past `auth.Guard` (Host, Origin, the token). The statistics it reads are
kept in `streamlens.metrics`, what it reads of the run itself is `run_view.RunView`, and the frames
the page shows are held by `preview.PreviewSink`."""
