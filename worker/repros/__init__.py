"""Minimal standalone repros of blocker groups: described from a node, written as a script, verified."""
