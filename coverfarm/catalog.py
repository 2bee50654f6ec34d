"""What the engine can measure, by name, without importing it (the engine imports torch).

``tests/worker/test_catalog.py`` checks these lists against the engine's own registries.
"""

from __future__ import annotations

POLICIES = ("act", "diffusion", "gaussian_actor", "multi_task_dit", "tdmpc", "vqbet")
BACKENDS = ("vulkan", "xnnpack")


def check_policy(name: str) -> str | None:
    """The reason ``name`` cannot be measured, or None."""
    if name in POLICIES:
        return None
    return f"policy {name!r} is not supported yet; supported: {', '.join(POLICIES)}"


def check_backend(name: str) -> str | None:
    if name in BACKENDS:
        return None
    return f"unknown backend {name!r}; known: {', '.join(BACKENDS)}"
