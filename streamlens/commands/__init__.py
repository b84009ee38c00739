"""The `streamlens` subcommands that live outside the engine: `subscribe` and `events`, `keygen`,
`history` and `quantize` (an INT8 copy of an ONNX detector, checked on the user's own video)."""
