"""The farm's served app: the orchestrator's REST API (``orchestrator.app``) with the live grid mounted.

The dashboard reads the orchestrator's services, so the app that serves both is put together here, above
the orchestrator: the orchestrator's own app never imports the dashboard. ``coverfarm farm serve`` and
``coverfarm farm up`` serve this app, and so does ``uvicorn --factory dashboard.app:app``. No torch.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from sqlalchemy.orm import Session

from coverfarm.settings import Settings
from dashboard.endpoints import router as dashboard_router
from orchestrator.app import create_app as create_api


def create_app(
    settings: Settings | None = None,
    *,
    sessions: Callable[[], Session] | None = None,
    background: bool = True,
) -> FastAPI:
    """``orchestrator.app.create_app`` (the same arguments) with the dashboard's pages."""
    app = create_api(settings, sessions=sessions, background=background)
    app.include_router(dashboard_router)
    return app


def app() -> FastAPI:
    """Factory for ``uvicorn --factory dashboard.app:app`` (settings from the environment)."""
    return create_app()
