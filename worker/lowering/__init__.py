"""Lowering helpers: a fast exact partitioner, its switch, and the Vulkan pattern-graph cache."""
