"""Lowering helpers: the exact fast partitioner, its switch, and the per-partition work fast skips."""
