"""farmrun: the farm's running machinery on a host, shared by the processes that run there (no torch).

The contract (``coverfarm``) says what the documents, queues and settings are; this package holds what
several of the farm's processes run with them: the host's timing lock (``hostlock``), the timing
statistics and the host facts every timing records (``stats``, ``cpu_share``, ``hostload``, ``board``),
the Celery app (``celery_app``), periodic beats (``periodic``), signing offline results (``signing``) and
building a stack's virtualenv (``stack_build``, run by ``make stack`` on the standard library alone, so
this file imports nothing).

What it may import: ``coverfarm`` only. The device runner (``gpu_runner``), the CPU worker's eager
baseline (``worker``), the orchestrator and the command import it (tests/test_import_borders.py).
"""
