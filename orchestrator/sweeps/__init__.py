"""Sweeps and their cells: submit, list, show, cancel (``service.py``); a sweep and its cells as the API
gives them (``public_views.py``), summaries counted in the database (``summaries.py``), pages of cells
(``pages.py``); the cells' views (``cell_views.py``) and a sweep's state (``state.py``).

What it may import of the orchestrator's domains: ``devices`` (the cells' device columns), ``jobs``,
``workers``, ``artifacts`` and ``events``; never ``reports`` (tests/test_import_borders.py,
``SIBLING_ORDERS``).
"""
