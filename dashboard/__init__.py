"""The live status grid, served with the orchestrator's API (``dashboard.app``).

What it may import: ``coverfarm`` and ``orchestrator``; never ``farmrun``, ``worker``, ``gpu_runner`` or the
command (tests/test_import_borders.py).
"""
