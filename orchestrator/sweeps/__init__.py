"""Sweeps and their cells: submit, list, show, cancel; the cells' views (``cell_views.py``) and a sweep's
state (``state.py``).

What it may import of the orchestrator's domains: ``devices`` (the cells' device columns), ``jobs``,
``workers``, ``artifacts`` and ``events``; never ``reports`` (tests/test_import_borders.py,
``SIBLING_ORDERS``).
"""
