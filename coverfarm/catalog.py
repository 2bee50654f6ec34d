"""What the engine can measure, by name, without importing it (the engine imports torch).

The tracker has 25 policies. The 19 that LeRobot 0.6.1 ships are measured; the 6 that no released
LeRobot has keep their row with the cause "policy not available in lerobot 0.6.1" (in ``coverfarm
analyze``, the farm and the report), never dropped. ``tests/worker/test_catalog.py`` checks these lists
against LeRobot's own policy registry and the engine's adapters and backends.
"""

from __future__ import annotations

from coverfarm import backends

LEROBOT_VERSION = "0.6.1"
IN_LEROBOT = (
    "act",
    "diffusion",
    "eo1",
    "evo1",
    "fastwam",
    "gaussian_actor",
    "groot",
    "lingbot_va",
    "molmoact2",
    "multi_task_dit",
    "pi0",
    "pi05",
    "pi0_fast",
    "smolvla",
    "tdmpc",
    "vla_jepa",
    "vqbet",
    "wall_x",
    "xvla",
)
# The policies without a vision-language backbone: each lowers in a few GB (1.2–4.9 GB at peak, real
# weights), so `coverfarm up` lowers several of them at once (``worker_memory.light_concurrency``).
LIGHT_POLICIES = frozenset({"act", "diffusion", "gaussian_actor", "multi_task_dit", "tdmpc", "vqbet"})
NOT_IN_LEROBOT = ("dm05", "fineart_vla", "flux3", "lawam", "lingbot_vla_v2", "wall_oss_05")
POLICIES = tuple(sorted(IN_LEROBOT + NOT_IN_LEROBOT))  # the tracker's rows, in its order
BACKENDS = backends.names()  # one module each: coverfarm/backends/


def unavailable_reason(name: str) -> str | None:
    """Why a tracker policy cannot be built with the installed LeRobot, or None."""
    if name in NOT_IN_LEROBOT:
        return f"policy not available in lerobot {LEROBOT_VERSION}"
    return None


def check_policy(name: str) -> str | None:
    """The reason ``name`` is not a policy coverfarm knows, or None."""
    if name in POLICIES:
        return None
    return f"unknown policy {name!r}; the tracker's policies: {', '.join(POLICIES)}"


def check_backend(name: str) -> str | None:
    if name in BACKENDS:
        return None
    return f"unknown backend {name!r}; known: {', '.join(BACKENDS)}"
