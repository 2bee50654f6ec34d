"""The stored event log and its live stream (SSE)."""
