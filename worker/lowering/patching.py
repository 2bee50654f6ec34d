"""Replace a module's attributes for the duration of a block: how fast lowering swaps upstream functions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

__all__ = ["module_attributes"]


@contextmanager
def module_attributes(module: ModuleType, **values: object) -> Iterator[None]:
    """Within the block, ``module.<name>`` is ``values[name]`` for each name; the originals are restored
    on exit. Process-global and not thread-safe: every caller of the module sees the replacements."""
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
