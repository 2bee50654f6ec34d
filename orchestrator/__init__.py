"""The orchestrator: REST API, storage and scheduling of sweeps (never imports torch).

What it may import: ``coverfarm``; of ``worker``, only the torch-free ``worker.memory``,
``worker.versions`` and ``worker.reuse``, which the CPU worker's task (``orchestrator.jobs.tasks``)
registers a worker and keys reuse with; never ``gpu_runner``, ``dashboard`` or the command
(tests/test_import_borders.py). The engine is a plugin the task loads by its configured name
(``settings.engine``), not an import.
"""
