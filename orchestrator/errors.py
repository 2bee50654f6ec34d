"""Errors services raise; the app turns them into JSON responses with ``detail``."""

from __future__ import annotations

from typing import Any


class NotFound(Exception):
    def __init__(self, what: str, ident: int) -> None:
        super().__init__(f"{what} {ident} not found")


class Invalid(Exception):
    """A request that is well-formed but names things the farm does not know (422).

    ``errors`` has FastAPI's own validation shape (loc, msg, type), so every 422 reads the same.
    """

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(str(error["msg"]) for error in errors))
        self.errors = errors
