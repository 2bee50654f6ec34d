"""The orchestrator: REST API, storage and scheduling of sweeps (never imports torch).

What it may import: ``coverfarm`` (the torch-free host facts the CPU worker's task,
``orchestrator.jobs.tasks``, registers a worker and keys reuse with are the contract's:
``coverfarm.worker_memory``, ``coverfarm.versions``, ``coverfarm.reuse``) and ``farmrun`` (the Celery
app, heartbeats, checking an offline result's signature); never ``worker``,
``gpu_runner``, ``dashboard`` or the command (tests/test_import_borders.py). The engine is a plugin the
task loads by its configured name (``settings.engine``), not an import.

Its domains are layered too, each importing only those below it: ``events`` and ``artifacts``, then
``workers``, ``jobs``, ``devices``, ``sweeps`` and ``reports`` on top (``SIBLING_ORDERS`` in the same
test); the app (``app.py``) and the reconciler loop (``reconciler.py``) sit above them.
"""
