"""Refusals of the device endpoints: who is asking is unknown (401), not allowed (403), or the job is
not theirs to run any more (409). The app turns them into JSON responses with ``detail``."""

from __future__ import annotations


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


class Unprocessable(Refused):
    status_code = 422


class Missing(Refused):
    status_code = 404


class NotReady(Refused):
    """The runner must pass its health check before it claims work (423 Locked)."""

    status_code = 423
