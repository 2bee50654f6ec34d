"""Device runners: run bundles with the ExecuTorch runtime on device hosts (never imports torch).

What it may import: ``coverfarm`` only; never torch, ``worker``, ``orchestrator``, ``dashboard`` or the
command (tests/test_import_borders.py). The agent starts ``coverfarm runner run-bundle`` and
``coverfarm baseline`` children by their command line, which is no import.
"""
