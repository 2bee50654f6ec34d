"""The orchestrator's FastAPI app, the REST API: ``create_app(settings)``. The farm serves it with the
dashboard's pages mounted (``dashboard.app``, which sits above the orchestrator and imports it).

Never imports torch (tests/orchestrator/test_no_torch.py checks it in a fresh interpreter).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from coverfarm.settings import Settings, get_settings
from farmrun.celery_app import make_celery
from orchestrator.db import make_engine, make_sessionmaker
from orchestrator.devices.endpoints import imports_router
from orchestrator.devices.endpoints import router as devices_router
from orchestrator.devices.errors import Refused
from orchestrator.errors import Invalid, NotFound
from orchestrator.events.endpoints import router as events_router
from orchestrator.events.hub import EventHub
from orchestrator.reconciler import Reconciler
from orchestrator.reports.endpoints import router as reports_router
from orchestrator.reports.endpoints import tracker_router
from orchestrator.sweeps.endpoints import router as sweeps_router
from orchestrator.workers.endpoints import router as workers_router

log = logging.getLogger(__name__)
# A 422 names what is wrong; it does not echo a large input back (a 64 MiB body would get a 64 MiB 422).
ECHO_LIMIT = 200


def _bounded(error: dict[str, Any]) -> dict[str, Any]:
    shown = {key: value for key, value in error.items() if key != "input"}
    if "input" in error:
        text = json.dumps(jsonable_encoder(error["input"]), ensure_ascii=True, default=str)
        if len(text) <= ECHO_LIMIT:
            shown["input"] = error["input"]
    return shown


def create_app(
    settings: Settings | None = None,
    *,
    sessions: Callable[[], Session] | None = None,
    background: bool = True,
) -> FastAPI:
    """The app. ``sessions`` lets tests bind every request to their own rolled-back connection;
    ``background=False`` skips the event listener and the reconciler threads (for those same tests)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = None
        if sessions is None:
            engine = make_engine(settings)
            app.state.sessions = make_sessionmaker(engine)
        else:
            app.state.sessions = sessions
        app.state.celery = make_celery(settings)
        app.state.admin_token = settings.ensure_admin_token()
        app.state.hub = EventHub(app.state.sessions, settings.sqlalchemy_url)
        reconciler = Reconciler(app.state.sessions, app.state.celery, settings)
        if background:
            app.state.hub.start()
            reconciler.start()
        try:
            yield
        finally:
            if background:
                reconciler.stop()
                app.state.hub.stop()
            if engine is not None:
                engine.dispose()

    app = FastAPI(title="coverfarm", lifespan=lifespan, max_body_size=settings.max_body_bytes)
    app.state.settings = settings
    app.include_router(sweeps_router, prefix="/api")
    app.include_router(tracker_router, prefix="/api")
    app.include_router(reports_router, prefix="/api")
    app.include_router(events_router, prefix="/api")
    app.include_router(workers_router, prefix="/api")
    app.include_router(devices_router, prefix="/api")
    app.include_router(imports_router, prefix="/api", max_body_size=settings.max_import_bytes)

    @app.exception_handler(NotFound)
    async def not_found(_request: Request, error: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=status.HTTP_404_NOT_FOUND)

    @app.exception_handler(Refused)
    async def refused(_request: Request, error: Refused) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if error.status_code == 401 else None
        return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def internal(_request: Request, error: Exception) -> JSONResponse:
        # Starlette still logs the traceback; the client gets the same JSON shape as every error.
        log.error("unhandled %s", type(error).__name__)
        return JSONResponse({"detail": "internal server error"}, status_code=500)

    @app.exception_handler(Invalid)
    async def invalid(_request: Request, error: Invalid) -> JSONResponse:
        return JSONResponse({"detail": error.errors}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.exception_handler(RequestValidationError)
    async def unvalidated(_request: Request, error: RequestValidationError) -> JSONResponse:
        errors = [_bounded(item) for item in error.errors()]
        return JSONResponse(
            {"detail": jsonable_encoder(errors)}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT
        )

    return app


def app() -> FastAPI:
    """Factory for ``uvicorn --factory orchestrator.app:app``, the API alone (settings from the
    environment)."""
    return create_app()
