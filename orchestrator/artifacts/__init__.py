"""Artifacts: the content-addressed bundle store, its metadata and the endpoint that serves it."""
