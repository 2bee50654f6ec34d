"""Policy adapters: importing this package registers one adapter per supported LeRobot policy type."""

from worker.policies.adapters import act, diffusion, gaussian_actor, multi_task_dit, tdmpc, vqbet  # noqa: F401
