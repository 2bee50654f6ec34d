"""Artifacts: the content-addressed bundle store, its metadata and the endpoint that serves it.

What it may import of the orchestrator's domains: none (tests/test_import_borders.py, ``SIBLING_ORDERS``).
"""
