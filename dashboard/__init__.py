"""The live status grid, served by the orchestrator."""
