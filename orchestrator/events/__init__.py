"""The stored event log and its live stream (SSE).

What it may import of the orchestrator's domains: none (tests/test_import_borders.py, ``SIBLING_ORDERS``).
"""
