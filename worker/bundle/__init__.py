"""What the device side gets: a cell's bundle and its manifest (``write``), the device runners'
health-check bundle (``health``), and the eager baseline a device run's speed-up divides by
(``baseline``, run on a runner's host by ``coverfarm baseline``).

What it may import: of the worker, ``worker.child``, ``worker.fake_programs``, ``worker.trace`` and
``worker.lower``.
"""
