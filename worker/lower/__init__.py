"""The lower stage: the lower child process (``stage``, run as ``python -m worker.lower.stage``), the
backends with their partitioners and support checks (``backends``), the wrapper that observes a
partitioner (``observe``), the metrics it counts (``metrics/``), fast lowering (``fast/``,
docs/lowering.md), the what-if program counts of blocker groups (``whatif``), and the fold of the
stage's events into the result document (``assemble``).

What it may import: of the worker, ``worker.child`` and ``worker.fake_programs`` (a fake-weight trace's
programs, loaded back).
"""
