"""Migration 0004 (device baselines) upgrades a 0003 database with data in it, and downgrades back."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from farmkit import recreate_database
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from coverfarm.settings import Settings
from orchestrator.migrate import alembic_config

CLASS = "cpu-x86_64-xnnpack"
BASELINE = (
    "INSERT INTO device_baselines (cell_id, device_class, job_id, status, median_ms, document, created_at,"
    " updated_at) VALUES (:cell, :class, :job, 'ok', 12.5, '{}', now(), now())"
)


def test_0004_adds_one_baseline_per_cell_and_class_and_keeps_every_other_row(tmp_path: Path) -> None:
    """A 0003 database keeps its sweeps, cells and jobs; a baseline is kept once per (cell, device class),
    loses its job when the job goes and goes with its cell; the downgrade takes the table away and
    keeps the rest."""
    settings = Settings(home=tmp_path, database_url=recreate_database("coverfarm_test_migration_0004"))
    config = alembic_config(settings)
    engine = create_engine(settings.sqlalchemy_url)
    try:
        command.upgrade(config, "0003")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s)"
                    " VALUES (1, now(), true, 'fast', 900);"
                    "INSERT INTO cells (id, sweep_id, policy, backend, options)"
                    " VALUES (1, 1, 'act', 'xnnpack', '{}'), (2, 1, 'vqbet', 'xnnpack', '{}');"
                    "INSERT INTO jobs (id, cell_id, stage, queue, timeout_s, status, attempt, created_at)"
                    f" VALUES (1, 1, 'lower', 'lower', 900, 'ok', 1, now()),"
                    f" (2, 1, 'baseline:{CLASS}', 'baseline.{CLASS}', 900, 'ok', 1, now())"
                )
            )
        assert "device_baselines" not in inspect(engine).get_table_names()
        command.upgrade(config, "0004")
        indexes = {i["name"]: i["column_names"] for i in inspect(engine).get_indexes("device_baselines")}
        assert indexes["ix_device_baselines_cell_id"] == ["cell_id"]
        with engine.begin() as conn:
            conn.execute(text(BASELINE), {"cell": 1, "class": CLASS, "job": 2})
            conn.execute(text(BASELINE), {"cell": 2, "class": CLASS, "job": None})
            conn.execute(text(BASELINE), {"cell": 1, "class": "h200-vulkan", "job": None})
        with pytest.raises(IntegrityError), engine.begin() as conn:  # a second one of (cell, class)
            conn.execute(text(BASELINE), {"cell": 1, "class": CLASS, "job": None})
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM jobs WHERE id = 2"))
            conn.execute(text("DELETE FROM cells WHERE id = 2"))
            rows = conn.execute(
                text("SELECT cell_id, device_class, job_id FROM device_baselines ORDER BY id")
            ).all()
            assert rows == [(1, CLASS, None), (1, "h200-vulkan", None)]
        command.downgrade(config, "0003")
        assert "device_baselines" not in inspect(engine).get_table_names()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id, policy FROM cells")).all() == [(1, "act")]
            assert conn.execute(text("SELECT id, stage, status FROM jobs")).all() == [(1, "lower", "ok")]
            assert conn.scalar(text("SELECT count(*) FROM sweeps")) == 1
    finally:
        engine.dispose()
