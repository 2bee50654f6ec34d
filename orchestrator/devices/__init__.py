"""Device runners: enrolment, credentials, health, device jobs over authenticated HTTP, offline import,
and the device side of the cells' views (``grid.py``).

What it may import of the orchestrator's domains: ``jobs`` (device jobs are jobs), ``workers``,
``artifacts`` and ``events``; never ``sweeps`` or ``reports`` (tests/test_import_borders.py,
``SIBLING_ORDERS``).
"""
