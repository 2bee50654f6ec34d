"""Dependencies shared by the endpoints, as Annotated aliases."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from coverfarm.settings import Settings
from orchestrator.db import read_one_snapshot, unit_of_work


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    # One session per request, committed once when the endpoint returns (before the response goes
    # out, see scope="function" below), and only then are its jobs sent to the broker.
    with unit_of_work(request.app.state.sessions, request.app.state.celery) as session:
        yield session


def get_snapshot_session(request: Request) -> Iterator[Session]:
    # For endpoints that only read, and read in several statements: one snapshot of the database.
    with unit_of_work(request.app.state.sessions, request.app.state.celery) as session:
        read_one_snapshot(session)
        yield session


_bearer = HTTPBearer(auto_error=False, description="the admin token")


def require_admin(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    expected: str = request.app.state.admin_token
    if credentials is None or not secrets.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="admin token required (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
SnapshotDep = Annotated[Session, Depends(get_snapshot_session, scope="function")]
AdminDep = Depends(require_admin)
