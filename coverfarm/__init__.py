"""coverfarm's shared contract: the result document, row formatting, settings and the CLI (no torch)."""
