"""Minimal standalone repros of blocker groups: written as a script from a node's description
(``worker.lower.metrics.example``), verified, attached; one-op bundles of device-runtime refusals.

What it may import: of the worker, ``worker.child``, ``worker.lower`` and ``worker.bundle``.
"""
