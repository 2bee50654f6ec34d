"""Run Alembic's migrations from code (``serve``, ``worker`` and the tests use this, never create_all)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

from coverfarm.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def alembic_config(settings: Settings | None = None, connection: Connection | None = None) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["configure_logger"] = False
    if settings is not None:
        config.attributes["settings"] = settings
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade(settings: Settings, revision: str = "head") -> None:
    command.upgrade(alembic_config(settings), revision)


def downgrade(settings: Settings, revision: str) -> None:
    command.downgrade(alembic_config(settings), revision)
