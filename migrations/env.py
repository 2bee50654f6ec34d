"""Alembic environment: the URL comes from coverfarm's settings; callers may hand in a connection."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from coverfarm.settings import Settings
from orchestrator.db import make_engine
from orchestrator.models import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def run_with(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # A batch copy drops and recreates a table; with foreign keys on, dropping a parent table deletes
        # its children's rows. SQLite only changes this setting outside a transaction, so it is set and the
        # implicit transaction ended before the migrations begin, checked and restored after them.
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.commit()
    try:
        _migrate(connection)
    finally:
        if sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()
            if broken:
                raise RuntimeError(f"the migration left rows whose parent is gone: {broken[:5]}")


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_with(connection)
        return
    settings = config.attributes.get("settings") or Settings()
    engine = make_engine(settings)
    try:
        with engine.connect() as conn:
            run_with(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("coverfarm migrations run online only (alembic upgrade head)")
run_migrations_online()
