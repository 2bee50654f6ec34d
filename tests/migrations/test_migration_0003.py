"""Migration 0003 (device runners) upgrades a 0002 database with data in it, and downgrades back."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from farmkit import recreate_database
from sqlalchemy import create_engine, inspect, text

from coverfarm.settings import Settings
from orchestrator.migrate import alembic_config

NEW_TABLES = {"runners", "enrolment_tokens", "artifacts", "device_runs"}


def test_0003_keeps_sweeps_and_jobs_adds_device_tables_and_longer_stages(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, database_url=recreate_database("coverfarm_test_migration_0003"))
    config = alembic_config(settings)
    engine = create_engine(settings.sqlalchemy_url)
    try:
        command.upgrade(config, "0002")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s)"
                    " VALUES (1, now(), true, 'fast', 900);"
                    "INSERT INTO cells (id, sweep_id, policy, backend, options)"
                    " VALUES (1, 1, 'act', 'xnnpack', '{}');"
                    "INSERT INTO jobs (cell_id, stage, queue, timeout_s, status, attempt, worker, created_at)"
                    " VALUES (1, 'lower', 'lower', 900, 'ok', 1, 'cpu@old', now())"
                )
            )
        command.upgrade(config, "0003")
        assert set(inspect(engine).get_table_names()) >= NEW_TABLES
        with engine.begin() as conn:
            assert conn.execute(text("SELECT id, device_classes FROM sweeps")).all() == [(1, [])]
            assert conn.execute(text("SELECT stage, status FROM jobs")).all() == [("lower", "ok")]
            # A device job's stage and queue are longer than 0002's 32 characters allowed.
            stage = "run:mali-g610-mc4-with-a-long-board-name-vulkan"
            conn.execute(
                text(
                    "INSERT INTO jobs (cell_id, stage, queue, timeout_s, status, attempt, created_at)"
                    " VALUES (1, :stage, :queue, 900, 'queued', 0, now())"
                ),
                {"stage": stage, "queue": "device." + stage.removeprefix("run:")},
            )
            conn.execute(text("DELETE FROM jobs WHERE stage = :stage"), {"stage": stage})
        command.downgrade(config, "0002")
        assert not NEW_TABLES & set(inspect(engine).get_table_names())
        with engine.connect() as conn:
            assert conn.execute(text("SELECT stage, status FROM jobs")).all() == [("lower", "ok")]
            assert conn.scalar(text("SELECT count(*) FROM sweeps")) == 1
    finally:
        engine.dispose()
