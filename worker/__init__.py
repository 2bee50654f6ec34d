"""CPU worker: traces LeRobot policies and lowers them with ExecuTorch partitioners (imports torch).

What it may import: ``coverfarm`` and ``gpu_runner`` (the eager baseline, ``worker.baseline``, is timed
and probed the way a device runner times and probes); never ``orchestrator``, ``dashboard`` or the
command (tests/test_import_borders.py). Its Celery task is the jobs domain's,
``orchestrator.jobs.tasks``, which runs this package's engine as a plugin named by ``settings.engine``.
"""
