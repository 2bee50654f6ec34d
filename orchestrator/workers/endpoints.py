"""HTTP for workers; the behaviour is in service.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from orchestrator.deps import SessionDep
from orchestrator.inputs import Offset
from orchestrator.workers import service
from orchestrator.workers.schemas import WorkerPublic

router = APIRouter(tags=["workers"])


@router.get("/workers")
def list_workers(
    session: SessionDep,
    response: Response,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Offset = 0,
) -> list[WorkerPublic]:
    """Every worker by name, with its state, why it is in it and its last heartbeat;
    ``X-Total-Count`` is the number of workers in all."""
    response.headers["X-Total-Count"] = str(service.count(session))
    return service.list_(session, limit, offset)
