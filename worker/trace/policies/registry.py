"""The registry of policy adapters, keyed by LeRobot policy type."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from worker.trace.policies.base import TracedPolicy


class UnsupportedPolicyError(ValueError):
    """The policy name has no adapter (yet)."""


class Adapter(Protocol):
    def __call__(self, *, seed: int, checkpoint: Path | None) -> TracedPolicy: ...


# policy type -> the module of worker.trace.policies.adapters whose import registers its adapter. A module is
# imported on first use only: each imports LeRobot's (and transformers') modeling code for its policy,
# and all of them together take tens of seconds, which every analyze call and trace child would pay.
ADAPTER_MODULES: dict[str, str] = {
    "act": "act",
    "diffusion": "diffusion",
    "eo1": "eo1",
    "evo1": "evo1",
    "fastwam": "fastwam",
    "gaussian_actor": "gaussian_actor",
    "groot": "groot",
    "lingbot_va": "lingbot_va",
    "multi_task_dit": "multi_task_dit",
    "pi0": "openpi",
    "pi05": "openpi",
    "pi0_fast": "pi0_fast",
    "smolvla": "smolvla",
    "tdmpc": "tdmpc",
    "vla_jepa": "vla_jepa",
    "vqbet": "vqbet",
    "wall_x": "wall_x",
    "xvla": "xvla",
}

_ADAPTERS: dict[str, Adapter] = {}


def register(name: str) -> Callable[[Adapter], Adapter]:
    def decorate(adapter: Adapter) -> Adapter:
        if name in _ADAPTERS:
            raise RuntimeError(f"adapter for {name} registered twice")
        _ADAPTERS[name] = adapter
        return adapter

    return decorate


def supported() -> list[str]:
    """The policy types with an adapter (no adapter module is imported)."""
    return sorted(ADAPTER_MODULES)


def get_adapter(name: str) -> Adapter:
    """The adapter of ``name``, importing its module (and only its module) on first use."""
    module = ADAPTER_MODULES.get(name)
    if module is None:
        raise UnsupportedPolicyError(f"no adapter for policy {name!r}; adapters: {', '.join(supported())}")
    importlib.import_module(f"worker.trace.policies.adapters.{module}")
    try:
        return _ADAPTERS[name]
    except KeyError:
        raise RuntimeError(
            f"worker.trace.policies.adapters.{module} registers no adapter for {name!r}"
        ) from None
