"""coverfarm's shared contract: the result documents, the device runner's documents, row formatting,
settings, queues and stacks (no torch).

What it may import: none of the repository's other packages (worker, gpu_runner, orchestrator,
dashboard, coverfarm_cli); it is the bottom layer every one of them imports (tests/test_import_borders.py).
"""
