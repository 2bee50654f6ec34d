"""Redirect a policy module's hub lookups (``AutoConfig.from_pretrained`` …) to local builders.

LeRobot's VLA constructors call ``from_pretrained(model_id)`` on transformers' auto classes to get the
backbone's config, processor or tokenizer. Offline, those names in the one LeRobot module that calls
them are replaced, for the duration of the build only, by objects whose ``from_pretrained(name)``
returns what a local builder makes from the name, or raises a one-line error naming the missing name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any
from unittest import mock


class MissingOfflineConfig(ValueError):
    """A policy asked the hub for a checkpoint that has no offline stand-in."""


def known(table: Mapping[str, Any], name: str, what: str = "config") -> Any:
    """``table[name]``, or a clear error listing the names that do have an offline stand-in."""
    if name not in table:
        raise MissingOfflineConfig(f"no offline {what} for {name!r}; known: {sorted(table)}")
    return table[name]


class _Pretrained:
    def __init__(self, attribute: str, build: Callable[[str], Any]) -> None:
        self.attribute = attribute
        self.build = build

    def from_pretrained(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.build(str(name))

    def __getattr__(self, item: str) -> Any:
        raise AttributeError(f"offline stand-in for {self.attribute} has no {item!r}")


@contextlib.contextmanager
def redirected(module: ModuleType, builders: Mapping[str, Callable[[str], Any]]) -> Iterator[None]:
    """Inside the block, ``module.<attribute>.from_pretrained(name)`` is ``builders[attribute](name)``."""
    with contextlib.ExitStack() as stack:
        for attribute, build in builders.items():
            if not hasattr(module, attribute):
                raise AttributeError(f"{module.__name__} has no {attribute} to redirect")
            stack.enter_context(mock.patch.object(module, attribute, _Pretrained(attribute, build)))
        yield
