"""Device runners: run bundles with the ExecuTorch runtime on device hosts (never imports torch).

What it may import: ``coverfarm`` and ``farmrun`` (the timing statistics, host load and CPU share it shares
with the eager baseline, the host lock, heartbeats); never torch, ``worker``, ``orchestrator``, ``dashboard``
or the command (tests/test_import_borders.py). The agent starts ``coverfarm runner run-bundle`` and
``coverfarm baseline`` children by their command line, which is no import.
"""
