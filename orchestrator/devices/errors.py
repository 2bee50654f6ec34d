"""Refusals of the device endpoints: who is asking is unknown (401), not allowed (403), or the job is
not theirs to run any more (409). The app turns them into JSON responses with ``detail``; a 422 has
the validation shape of every other 422 (a list of loc, msg, type), as the OpenAPI schema says."""

from __future__ import annotations

from orchestrator.errors import Invalid


class Refused(Exception):
    status_code = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Unauthenticated(Refused):
    status_code = 401


class Forbidden(Refused):
    status_code = 403


class Conflict(Refused):
    status_code = 409


class Unprocessable(Invalid):
    """Well-formed, but not something this endpoint can take (422), at ``loc`` of the request."""

    def __init__(self, detail: str, loc: tuple[str | int, ...] = ("body",)) -> None:
        super().__init__([{"loc": list(loc), "msg": detail, "type": "value_error"}])
        self.detail = detail


class Missing(Refused):
    status_code = 404


class NotReady(Refused):
    """The runner must pass its health check before it claims work (423 Locked)."""

    status_code = 423
