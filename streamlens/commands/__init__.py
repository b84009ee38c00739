"""The `streamlens` subcommands that live outside the engine: `subscribe` and `keygen`."""
