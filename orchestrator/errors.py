"""Errors services raise; the app turns them into JSON responses with ``detail``, and the shapes those
responses are published with in the OpenAPI schema (``responses``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


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


class Detail(BaseModel):
    """Every refusal but a 422: what was refused and why."""

    detail: str


_WHY = {
    401: "no credential, or one the farm does not know",
    403: "a credential that may not do this",
    404: "no such thing (or a path naming none: an id that is not a number)",
    409: "the job has nothing to run, or is no longer this attempt's",
    413: "the body is larger than COVERFARM_MAX_BODY_BYTES",
    423: "the runner must pass its health check first",
}


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route (or router) that may answer ``codes`` besides its own and 422."""
    return {code: {"model": Detail, "description": _WHY[code]} for code in codes}


# A route answering Markdown: its refusals are JSON all the same (its response_class stays Response, so
# that FastAPI files the refusals' schema under application/json, not under the route's media type).
MARKDOWN: dict[int | str, dict[str, Any]] = {
    200: {"description": "Markdown", "content": {"text/markdown": {"schema": {"type": "string"}}}}
}
