"""The orchestrator: REST API, storage and scheduling of sweeps (never imports torch)."""
