"""Replace a module's or a class's attributes for the duration of a block: how fast lowering swaps
upstream functions and methods."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import Any

__all__ = ["replaced_attributes", "within"]


@contextmanager
def replaced_attributes(owner: ModuleType | type, **values: object) -> Iterator[None]:
    """Within the block, ``owner.<name>`` is ``values[name]`` for each name; on exit each is restored to
    the very object ``owner`` held (from its ``__dict__``, so a class's ``staticmethod`` stays one).
    Nested blocks restore in turn. Process-global and not thread-safe: every caller sees the
    replacements."""
    saved = {name: vars(owner)[name] for name in values}
    for name, value in values.items():
        setattr(owner, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(owner, name, value)


def within(
    function: Callable[..., Any], context: Callable[[], AbstractContextManager[object]]
) -> Callable[..., Any]:
    """``function``, each call of it run inside a fresh ``context()``."""

    def run(*args: Any, **kwargs: Any) -> Any:
        with context():
            return function(*args, **kwargs)

    run.__wrapped__ = function  # type: ignore[attr-defined]
    return run
