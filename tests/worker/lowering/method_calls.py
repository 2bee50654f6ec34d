"""Count a method's calls while a test runs: how the fast-lowering tests see upstream repeat its work."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def counted_calls(owner: type, name: str) -> Iterator[Counter[int]]:
    """Within the block, every call of ``owner.<name>`` is counted by the id of the object it is called
    on, and runs as before; restored on exit."""
    calls: Counter[int] = Counter()
    original = vars(owner)[name]

    def counting(self: object, *args: Any, **kwargs: Any) -> Any:
        calls[id(self)] += 1
        return original(self, *args, **kwargs)

    setattr(owner, name, counting)
    try:
        yield calls
    finally:
        setattr(owner, name, original)
