"""Count a method's calls while a test runs: how the fast-lowering tests see upstream repeat its work."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def counted_calls(owner: type, name: str) -> Iterator[Counter[int]]:
    """Within the block, every call of ``owner.<name>`` is counted by the id of the object it is called
    on, and runs as before; restored on exit. Each counted object is kept alive until the block ends, so
    a freed object's id is never reused by a new one and two objects never share a count."""
    calls: Counter[int] = Counter()
    seen: list[object] = []
    original = vars(owner)[name]

    def counting(self: object, *args: Any, **kwargs: Any) -> Any:
        if id(self) not in calls:
            seen.append(self)
        calls[id(self)] += 1
        return original(self, *args, **kwargs)

    setattr(owner, name, counting)
    try:
        yield calls
    finally:
        setattr(owner, name, original)
