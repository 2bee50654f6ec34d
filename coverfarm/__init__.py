"""coverfarm's shared contract: the result documents, the device runner's documents, the bundle's
manifest, cell views and row formatting, the settings' schema, queue names and message schemas, and
stacks (no torch, no Celery). What runs with them (the Celery app, the host lock, timing statistics,
signing, building a stack) is ``farmrun``'s, one layer up.

What it may import: none of the repository's other packages (farmrun, worker, gpu_runner, orchestrator,
dashboard, coverfarm_cli); it is the bottom layer every one of them imports (tests/test_import_borders.py).
"""
