"""GET /api/events: the stored changes as Server-Sent Events, optionally for one sweep."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from orchestrator.events.hub import EventHub
from orchestrator.inputs import DB_INT_MAX

router = APIRouter(tags=["events"])
KEEPALIVE_S = 15.0


def _frame(data: dict[str, Any]) -> str:
    return f"id: {data['id']}\nevent: {data['kind']}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


@router.get("/events", response_class=StreamingResponse)
async def stream_events(
    request: Request,
    sweep: Annotated[int | None, Query(ge=1, le=DB_INT_MAX, description="only this sweep's events")] = None,
    # Event ids are bigint.
    last_event_id: Annotated[int | None, Header(ge=0, le=2**63 - 1)] = None,
) -> StreamingResponse:
    hub: EventHub = request.app.state.hub
    subscriber = hub.subscribe(asyncio.get_running_loop(), sweep)
    backlog: list[dict[str, Any]] = []
    if last_event_id is not None:
        backlog = await run_in_threadpool(hub.backlog, last_event_id, subscriber.start, sweep)

    async def frames() -> AsyncIterator[str]:
        try:
            yield ": stream open\n\n"  # lets the client see the response start before the first event
            for data in backlog:
                yield _frame(data)
            while True:
                try:
                    data = await asyncio.wait_for(subscriber.queue.get(), timeout=KEEPALIVE_S)
                except TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                yield _frame(data)
        finally:
            hub.unsubscribe(subscriber)

    return StreamingResponse(
        frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
