"""The registry of policy adapters, keyed by LeRobot policy type."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from worker.policies.base import TracedPolicy


class UnsupportedPolicyError(ValueError):
    """The policy name has no adapter (yet)."""


class Adapter(Protocol):
    def __call__(self, *, seed: int, checkpoint: Path | None) -> TracedPolicy: ...


_ADAPTERS: dict[str, Adapter] = {}


def register(name: str) -> Callable[[Adapter], Adapter]:
    def decorate(adapter: Adapter) -> Adapter:
        if name in _ADAPTERS:
            raise RuntimeError(f"adapter for {name} registered twice")
        _ADAPTERS[name] = adapter
        return adapter

    return decorate


def _load_all() -> None:
    # Importing the adapter modules registers them; kept lazy so that listing names stays cheap.
    from worker.policies import adapters  # noqa: F401


def supported() -> list[str]:
    _load_all()
    return sorted(_ADAPTERS)


def get_adapter(name: str) -> Adapter:
    _load_all()
    try:
        return _ADAPTERS[name]
    except KeyError:
        raise UnsupportedPolicyError(
            f"no adapter for policy {name!r}; adapters: {', '.join(sorted(_ADAPTERS))}"
        ) from None
