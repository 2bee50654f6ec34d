"""Jobs: their state machine, what workers call to run one (``service.py``), how they are made and sent
(``sending.py``), the reconciler's pass over them (``reconcile.py``), the cell state a cell's CPU jobs
give (``cell_state.py``), and the CPU worker's Celery task (``tasks.py``; one job in a pool process:
``lower_run.py``, what a worker process holds: ``worker_runtime.py``, its heartbeats: ``heartbeats.py``).

What it may import of the orchestrator's domains: ``workers``, ``artifacts`` and ``events``; never
``devices``, ``sweeps`` or ``reports``, which build on it (tests/test_import_borders.py,
``SIBLING_ORDERS``). The reconciler loop that re-sends its jobs is ``orchestrator.reconciler``.
"""
