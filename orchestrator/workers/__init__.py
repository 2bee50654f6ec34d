"""CPU workers: registration, heartbeats, the online/offline state and their view.

What it may import of the orchestrator's domains: ``events`` only (tests/test_import_borders.py,
``SIBLING_ORDERS``).
"""
