"""CPU worker: traces LeRobot policies and lowers them with ExecuTorch partitioners (imports torch).

Its folders read as the pipeline of one cell: ``trace/`` (the policy adapters, the trace child, its
cache, real or fake weights), ``lower/`` (the lower child, the backends and their partitioners observed,
the metrics, fast lowering, what-ifs, the fold into the result document), ``bundle/`` (a cell's bundle,
the health-check bundle, the eager baseline), then ``repros/`` (each blocker group's one-op repro).
``child/`` is what every stage's child process runs under, and ``engine.py`` is the one entry that runs
the stages for a cell. Each subpackage imports only those before it in the order child, trace, lower,
bundle, repros, engine (tests/test_import_borders.py, ``SIBLING_ORDERS``).

What it may import: ``coverfarm`` and ``farmrun`` (the eager baseline, ``worker.bundle.baseline``, is
timed with the statistics, host load, CPU share and board a device runner records, under the host's
timing lock); never ``gpu_runner``, ``orchestrator``, ``dashboard`` or the command
(tests/test_import_borders.py). Its Celery task is the jobs domain's,
``orchestrator.jobs.tasks``, which runs this package's engine as a plugin named by ``settings.engine``.
"""
