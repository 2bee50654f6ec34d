"""The tracker report of a sweep (Markdown, served as report.md), its blocker groups, diffs, progress over
its stacks, and the device columns' texts.

What it may import of the orchestrator's domains: any of them (``sweeps``, ``devices``, ``jobs``, ...);
none imports it but the app (tests/test_import_borders.py, ``SIBLING_ORDERS``).
"""
