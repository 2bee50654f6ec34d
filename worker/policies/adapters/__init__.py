"""Policy adapters: importing this package registers one adapter per supported LeRobot policy type."""

from worker.policies.adapters import (  # noqa: F401
    act,
    diffusion,
    eo1,
    gaussian_actor,
    groot,
    multi_task_dit,
    openpi,
    pi0_fast,
    smolvla,
    tdmpc,
    vqbet,
    xvla,
)
