"""The `streamlens` subcommands that live outside the engine: `subscribe` and `events`, `keygen`,
`history`, `quantize` (an INT8 copy of an ONNX detector, checked on the user's own video) and
`models` (the models streamlens knows, sha256-checked downloads into the cache, Ultralytics exports)."""
