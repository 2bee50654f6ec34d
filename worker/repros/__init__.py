"""Minimal standalone repros of blocker groups: written as a script from a node's description
(``worker.metrics.example``), verified."""
