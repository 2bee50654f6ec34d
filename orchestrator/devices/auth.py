"""Runner credentials: ``<runner id>.<secret>`` as a bearer token; the farm stores only sha256(secret).

A credential of an unknown runner, or one that does not match, is 401; a revoked runner's is 403.
Both are decided before an endpoint touches anything, so a refused request writes nothing.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from farmrun.signing import credential_hash
from orchestrator.deps import SessionDep
from orchestrator.devices import repository
from orchestrator.devices.errors import Forbidden, Unauthenticated
from orchestrator.inputs import DB_INT_MAX
from orchestrator.models import Runner, RunnerState

_bearer = HTTPBearer(auto_error=False, description="a runner credential or the admin token")


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def credential(runner_id: int, secret: str) -> str:
    return f"{runner_id}.{secret}"


def runner_id_of(presented: str) -> int | None:
    """The runner id a credential names; None when it is not ``<id>.<secret>`` with an id that can exist
    (ASCII digits only: ``str.isdigit`` also takes ``²``, which ``int`` refuses; at most DB_INT_MAX)."""
    ident, dot, _secret = presented.partition(".")
    if not dot or not ident.isascii() or not ident.isdigit() or len(ident) > len(str(DB_INT_MAX)):
        return None
    number = int(ident)
    return number if 1 <= number <= DB_INT_MAX else None


def runner_for(session: Session, presented: str) -> Runner:
    runner_id = runner_id_of(presented)
    secret = presented.partition(".")[2]
    runner = repository.get_runner(session, runner_id) if runner_id is not None else None
    if runner is None or not secrets.compare_digest(credential_hash(secret), runner.credential_hash):
        raise Unauthenticated("unknown runner credential (Authorization: Bearer <runner id>.<secret>)")
    if runner.state == RunnerState.REVOKED.value:
        raise Forbidden(f"runner {runner.id} ({runner.name}) is revoked")
    return runner


def current_runner(
    session: SessionDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Runner:
    if credentials is None:
        raise Unauthenticated("runner credential required (Authorization: Bearer <runner id>.<secret>)")
    return runner_for(session, credentials.credentials)


def runner_or_admin(
    request: Request,
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    if credentials is None:
        raise Unauthenticated("a runner credential or the admin token is required")
    admin: str = request.app.state.admin_token
    if secrets.compare_digest(credentials.credentials.encode(), admin.encode()):
        return
    runner_for(session, credentials.credentials)


RunnerDep = Annotated[Runner, Depends(current_runner)]
RunnerOrAdminDep = Depends(runner_or_admin)
