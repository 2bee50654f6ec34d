"""Alembic owns the schema: head on an empty Postgres and on SQLite, round trips, and no drift."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from farmkit import recreate_database
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from coverfarm.settings import Settings
from orchestrator.migrate import alembic_config
from orchestrator.models import Base

TABLES = {"sweeps", "cells", "jobs", "job_attempts", "results", "workers", "events", "alembic_version"}
TABLES |= {"runners", "enrolment_tokens", "artifacts", "device_runs"}  # 0003
TABLES |= {"device_baselines"}  # 0004


def postgres_settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path, database_url=recreate_database("coverfarm_test_migrations"))


def sqlite_settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path)  # the embedded default: a SQLite file in home


@pytest.mark.parametrize("make_settings", [postgres_settings, sqlite_settings], ids=["postgres", "sqlite"])
def test_upgrade_downgrade_round_trip_without_drift(
    make_settings: Callable[[Path], Settings], tmp_path: Path
) -> None:
    settings = make_settings(tmp_path)
    config = alembic_config(settings)
    engine = create_engine(settings.sqlalchemy_url)
    try:
        command.upgrade(config, "head")
        assert set(inspect(engine).get_table_names()) == TABLES
        with engine.connect() as conn:
            # The migrations produce exactly what the models map: nothing to autogenerate.
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        command.downgrade(config, "base")
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
        command.upgrade(config, "head")
        assert set(inspect(engine).get_table_names()) == TABLES
    finally:
        engine.dispose()


def test_every_revision_upgrades_from_its_predecessor_with_data(tmp_path: Path) -> None:
    """Each revision in turn, on Postgres, with a row written at the previous one kept across."""
    settings = postgres_settings(tmp_path)
    config = alembic_config(settings)
    revisions = list(reversed(list(ScriptDirectory.from_config(config).walk_revisions())))
    engine = create_engine(settings.sqlalchemy_url)
    try:
        for revision in revisions:
            command.upgrade(config, revision.revision)
            with engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO sweeps (created_at, constant_prop, lowering, timeout_s)"
                        " VALUES (now(), true, 'stock', 900)"
                    )
                )
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM sweeps")) == len(revisions)
    finally:
        engine.dispose()


def test_0002_keeps_workers_and_jobs_and_adds_empty_state_reason_and_pid(tmp_path: Path) -> None:
    settings = postgres_settings(tmp_path)
    config = alembic_config(settings)
    engine = create_engine(settings.sqlalchemy_url)
    try:
        command.upgrade(config, "0001")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO workers (name, queues, state, started_at, last_heartbeat)"
                    " VALUES ('cpu@old', '[\"lower\"]', 'online', now(), now());"
                    "INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s)"
                    " VALUES (1, now(), true, 'stock', 900);"
                    "INSERT INTO cells (id, sweep_id, policy, backend, options)"
                    " VALUES (1, 1, 'act', 'vulkan', '{}');"
                    "INSERT INTO jobs (cell_id, stage, queue, timeout_s, status, attempt, worker, created_at)"
                    " VALUES (1, 'lower', 'lower', 900, 'running', 1, 'cpu@old', now())"
                )
            )
        command.upgrade(config, "0002")
        with engine.connect() as conn:
            assert conn.execute(
                text("SELECT name, state, state_reason, state_changed_at FROM workers")
            ).all() == [("cpu@old", "online", None, None)]
            assert conn.execute(text("SELECT worker, status, worker_pid FROM jobs")).all() == [
                ("cpu@old", "running", None)
            ]
        command.downgrade(config, "0001")
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM jobs")) == 1
    finally:
        engine.dispose()


def test_0006_adds_an_empty_reuse_key_and_sweeps_that_reuse(tmp_path: Path) -> None:
    """Results stored before 0006 keep their rows with no key (never reused); sweeps read as reusing,
    not fresh; the downgrade keeps both rows."""
    settings = postgres_settings(tmp_path)
    config = alembic_config(settings)
    engine = create_engine(settings.sqlalchemy_url)
    try:
        command.upgrade(config, "0005")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s)"
                    " VALUES (1, now(), true, 'fast', 900);"
                    "INSERT INTO cells (id, sweep_id, policy, backend, options)"
                    " VALUES (1, 1, 'act', 'xnnpack', '{}');"
                    "INSERT INTO jobs (id, cell_id, stage, queue, timeout_s, status, attempt, created_at)"
                    " VALUES (1, 1, 'lower', 'lower', 900, 'ok', 1, now());"
                    "INSERT INTO results (job_id, cell_id, attempt, status, export_status, document,"
                    " created_at, updated_at) VALUES (1, 1, 1, 'ok', 'ok', '{}', now(), now())"
                )
            )
        command.upgrade(config, "0006")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT job_id, reuse_key FROM results")).all() == [(1, None)]
            assert conn.execute(text("SELECT fresh, reuse_unfinished FROM sweeps")).all() == [(False, False)]
        indexes = {index["name"]: index["column_names"] for index in inspect(engine).get_indexes("results")}
        assert indexes["ix_results_reuse_key"] == ["reuse_key"]
        command.downgrade(config, "0005")
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM results")) == 1
            assert conn.scalar(text("SELECT count(*) FROM sweeps")) == 1
        assert "reuse_key" not in {column["name"] for column in inspect(engine).get_columns("results")}
    finally:
        engine.dispose()


@pytest.mark.parametrize("make_settings", [postgres_settings, sqlite_settings], ids=["postgres", "sqlite"])
def test_no_revision_loses_a_row_up_or_down(
    make_settings: Callable[[Path], Settings], tmp_path: Path
) -> None:
    """A sweep, its cell and its job written at the first revision survive every upgrade and every
    downgrade, with foreign keys enforced as the farm enforces them (on SQLite a batch copy of a parent
    table would drop it and cascade the delete to its children)."""
    from orchestrator.db import make_engine

    settings = make_settings(tmp_path)
    config = alembic_config(settings)
    first = list(ScriptDirectory.from_config(config).walk_revisions())[-1].revision
    command.upgrade(config, first)
    engine = make_engine(settings)
    try:
        now = "now()" if engine.dialect.name == "postgresql" else "CURRENT_TIMESTAMP"
        with engine.begin() as conn:
            conn.execute(text(f"INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s) "
                              f"VALUES (1, {now}, true, 'fast', 900)"))  # fmt: skip
            conn.execute(text("INSERT INTO cells (id, sweep_id, policy, backend, options) "
                              "VALUES (1, 1, 'act', 'xnnpack', '{}')"))  # fmt: skip
            conn.execute(text("INSERT INTO jobs (id, cell_id, stage, queue, timeout_s, status, attempt, "
                              "created_at) VALUES (1, 1, 'lower', 'lower', 900, 'queued', 0, "
                              f"{now})"))  # fmt: skip

        def counts() -> list[int]:
            with engine.connect() as conn:
                return [
                    conn.scalar(text(f"SELECT count(*) FROM {table}")) or 0
                    for table in ("sweeps", "cells", "jobs")
                ]

        command.upgrade(config, "head")
        assert counts() == [1, 1, 1]
        command.downgrade(config, first)
        assert counts() == [1, 1, 1]
    finally:
        engine.dispose()


@pytest.mark.parametrize("make_settings", [postgres_settings, sqlite_settings], ids=["postgres", "sqlite"])
def test_0007_keys_cells_by_stack_and_refuses_a_lossy_downgrade(
    make_settings: Callable[[Path], Settings], tmp_path: Path
) -> None:
    """Cells stored before 0007 are of the default stack and keep their jobs; a sweep may then hold one
    policy and backend under two stacks; the downgrade refuses while it does, and goes down once it does
    not."""
    from orchestrator.db import make_engine

    settings = make_settings(tmp_path)
    config = alembic_config(settings)
    command.upgrade(config, "0006")
    engine = make_engine(settings)
    now = "now()" if engine.dialect.name == "postgresql" else "CURRENT_TIMESTAMP"
    try:
        with engine.begin() as conn:
            conn.execute(text(f"INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s) "
                              f"VALUES (1, {now}, true, 'fast', 900)"))  # fmt: skip
            conn.execute(text("INSERT INTO cells (id, sweep_id, policy, backend, options) "
                              "VALUES (1, 1, 'act', 'xnnpack', '{}')"))  # fmt: skip
            conn.execute(text("INSERT INTO jobs (id, cell_id, stage, queue, timeout_s, status, attempt, "
                              f"created_at) VALUES (1, 1, 'lower', 'lower', 900, 'ok', 1, "
                              f"{now})"))  # fmt: skip
            conn.execute(text("INSERT INTO workers (name, queues, state, started_at, last_heartbeat) "
                              f"VALUES ('cpu@old', '[\"lower\"]', 'online', {now}, {now})"))  # fmt: skip
        command.upgrade(config, "0007")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id, stack FROM cells")).all() == [(1, "et-1.5.1")]
            assert conn.scalar(text("SELECT count(*) FROM jobs")) == 1
            assert conn.execute(text("SELECT stack, versions, memory_gb FROM workers")).all() == [
                ("et-1.5.1", None, None)
            ]
            assert conn.scalar(text("SELECT memory_gb FROM jobs")) is None
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO cells (id, sweep_id, policy, backend, options, stack) "
                              "VALUES (2, 1, 'act', 'xnnpack', '{}', 'et-1.4.1')"))  # fmt: skip
        with pytest.raises(RuntimeError, match="sweeps 1 hold cells of more than one stack"):
            command.downgrade(config, "0006")
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM cells")) == 2
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM cells WHERE id = 2"))
        command.downgrade(config, "0006")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id FROM cells")).all() == [(1,)]
            assert conn.scalar(text("SELECT count(*) FROM jobs")) == 1
    finally:
        engine.dispose()


def _json_list(value: object) -> object:
    return json.loads(value) if isinstance(value, str) else value  # SQLite hands JSON back as text


@pytest.mark.parametrize("make_settings", [postgres_settings, sqlite_settings], ids=["postgres", "sqlite"])
def test_0008_keeps_each_cells_state_and_latest_result_and_each_sweeps_names(
    make_settings: Callable[[Path], Settings], tmp_path: Path
) -> None:
    """Cells stored before 0008 get the state their CPU jobs say (a slow result with its re-run queued
    reads slow; a device job changes nothing) and their newest result; sweeps get their policies and
    backends in cell order and the options their cells record; the downgrade keeps every row."""
    from orchestrator.db import make_engine

    settings = make_settings(tmp_path)
    config = alembic_config(settings)
    command.upgrade(config, "0007")
    engine = make_engine(settings)
    now = "now()" if engine.dialect.name == "postgresql" else "CURRENT_TIMESTAMP"
    fp16, real = '{"weights": "real", "force_fp16": true}', '{"weights": "real"}'
    device = "run:cpu-x86_64-xnnpack"
    cells = [  # id, sweep, policy, backend, options, its jobs' (stage, status)
        (1, 1, "vqbet", "vulkan", fp16, [("lower", "slow"), ("lower.long", "queued")]),
        (2, 1, "vqbet", "xnnpack", real, [("lower", "ok"), (device, "running")]),
        (3, 1, "act", "vulkan", fp16, [("lower", "running")]),
        (4, 1, "act", "xnnpack", real, [("lower", "failed")]),
        (5, 2, "act", "xnnpack", "{}", [("lower", "queued")]),
        (6, 2, "act", "vulkan", "{}", []),
    ]
    sweep_row = (
        "INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s)"
        " VALUES ({}, {}, true, 'fast', 900)"
    )
    cell_row = "INSERT INTO cells (id, sweep_id, policy, backend, options) VALUES ({}, {}, '{}', '{}', '{}')"
    job_row = (
        "INSERT INTO jobs (id, cell_id, stage, queue, timeout_s, status, attempt, created_at)"
        " VALUES ({}, {}, '{}', 'lower', 900, '{}', 1, {})"
    )
    result_row = (
        "INSERT INTO results (job_id, cell_id, attempt, status, export_status, document, created_at,"
        " updated_at) VALUES ({}, {}, 1, '{}', '{}', '{{}}', {}, {})"
    )
    try:
        with engine.begin() as conn:
            for sweep in (1, 2):
                conn.execute(text(sweep_row.format(sweep, now)))
            job = 0
            for cell, sweep, policy, backend, options, stages in cells:
                conn.execute(text(cell_row.format(cell, sweep, policy, backend, options)))
                for stage, status in stages:
                    job += 1
                    conn.execute(text(job_row.format(job, cell, stage, status, now)))
                    if status in ("ok", "slow", "failed"):
                        conn.execute(text(result_row.format(job, cell, status, status, now, now)))
        command.upgrade(config, "0008")
        with engine.connect() as conn:
            latest = dict(conn.execute(text("SELECT cell_id, id FROM results")).all())
            assert conn.execute(
                text("SELECT id, state, pending, result_id FROM cells ORDER BY id")
            ).all() == [
                (1, "slow", True, latest[1]),
                (2, "ok", False, latest[2]),
                (3, "running", True, None),
                (4, "failed", False, latest[4]),
                (5, "queued", True, None),
                (6, "queued", True, None),
            ]
            sweeps = conn.execute(
                text("SELECT id, policies, backends, weights, force_fp16 FROM sweeps ORDER BY id")
            )
            assert [(i, _json_list(p), _json_list(b), w, bool(f)) for i, p, b, w, f in sweeps] == [
                (1, ["vqbet", "act"], ["vulkan", "xnnpack"], "real", True),
                (2, ["act"], ["xnnpack", "vulkan"], "auto", False),
            ]
        command.downgrade(config, "0007")
        with engine.connect() as conn:
            counts = [
                conn.scalar(text(f"SELECT count(*) FROM {t}")) for t in ("sweeps", "cells", "jobs", "results")
            ]
            assert counts == [2, 6, 7, 3]
        assert "state" not in {column["name"] for column in inspect(engine).get_columns("cells")}
        assert "policies" not in {column["name"] for column in inspect(engine).get_columns("sweeps")}
    finally:
        engine.dispose()


@pytest.mark.parametrize("make_settings", [postgres_settings, sqlite_settings], ids=["postgres", "sqlite"])
def test_0009_reads_each_jobs_kind_and_device_class_off_its_stage(
    make_settings: Callable[[Path], Settings], tmp_path: Path
) -> None:
    """Jobs stored before 0009 get the kind and device class their stages say (lower jobs, whatever
    their stage, none); a job that contradicts its kind is refused after it; the downgrade keeps every
    row and its stage."""
    from orchestrator.db import make_engine

    settings = make_settings(tmp_path)
    config = alembic_config(settings)
    command.upgrade(config, "0008")
    engine = make_engine(settings)
    now = "now()" if engine.dialect.name == "postgresql" else "CURRENT_TIMESTAMP"
    long_class = "mali-g610-mc4-with-a-long-board-name-vulkan"
    stages = [  # id, stage, queue
        (1, "lower", "lower"),
        (2, "lower.long", "lower.long@et-1.4.1"),
        (3, "run:cpu-x86_64-xnnpack", "device.cpu-x86_64-xnnpack"),
        (4, "baseline:cpu-x86_64-xnnpack", "baseline.cpu-x86_64-xnnpack"),
        (5, f"run:{long_class}", f"device.{long_class}"),
        (6, "runner", "lower"),  # not a device stage: no prefix but "run:" and "baseline:" is
    ]
    job_row = (
        "INSERT INTO jobs (id, cell_id, stage, queue, timeout_s, status, attempt, created_at)"
        " VALUES ({}, 1, '{}', '{}', 900, 'queued', 0, {})"
    )
    try:
        with engine.begin() as conn:
            conn.execute(text(f"INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s) "
                              f"VALUES (1, {now}, true, 'fast', 900)"))  # fmt: skip
            conn.execute(text("INSERT INTO cells (id, sweep_id, policy, backend, options) "
                              "VALUES (1, 1, 'act', 'xnnpack', '{}')"))  # fmt: skip
            for job, stage, queue in stages:
                conn.execute(text(job_row.format(job, stage, queue, now)))
        command.upgrade(config, "0009")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id, stage, kind, device_class FROM jobs ORDER BY id")).all() == [
                (1, "lower", "lower", None),
                (2, "lower.long", "lower", None),
                (3, "run:cpu-x86_64-xnnpack", "device_run", "cpu-x86_64-xnnpack"),
                (4, "baseline:cpu-x86_64-xnnpack", "baseline", "cpu-x86_64-xnnpack"),
                (5, f"run:{long_class}", "device_run", long_class),
                (6, "runner", "lower", None),
            ]
        checks = {check["name"] for check in inspect(engine).get_check_constraints("jobs")}
        assert {"ck_jobs_job_kind", "ck_jobs_kind_device_class"} <= checks
        columns = {column["name"]: column for column in inspect(engine).get_columns("jobs")}
        assert columns["kind"]["default"] is None  # the job service names every job's kind
        # (kind, device class): no kind, an unknown one, a device job of no class, a lower job of one
        refused = [
            "NULL, NULL",
            "'repro', NULL",
            "'device_run', NULL",
            "'lower', 'cpu-x86_64-xnnpack'",
        ]
        for values in refused:
            with pytest.raises(IntegrityError), engine.begin() as conn:
                conn.execute(text(
                    "INSERT INTO jobs (cell_id, stage, queue, timeout_s, status, attempt, created_at, kind,"
                    f" device_class) VALUES (1, 'x', 'lower', 900, 'queued', 0, {now}, {values})"
                ))  # fmt: skip
        command.downgrade(config, "0008")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id, stage, queue FROM jobs ORDER BY id")).all() == stages
        columns = {column["name"]: column for column in inspect(engine).get_columns("jobs")}
        assert not {"kind", "device_class"} & set(columns)
        checks = {check["name"] for check in inspect(engine).get_check_constraints("jobs")}
        assert checks == {"ck_jobs_job_status"}
    finally:
        engine.dispose()


def test_0010_postgres_notifies_the_events_channel_at_commit_once_per_insert(tmp_path: Path) -> None:
    """After 0010 the database notifies ``coverfarm_events`` for every INSERT into events (whoever
    writes it, with no statement of its own): nothing before the commit, nothing for a rolled-back
    transaction, one for a committed one; the downgrade takes the trigger away."""
    import psycopg

    from orchestrator.events.repository import CHANNEL

    settings = postgres_settings(tmp_path)
    config = alembic_config(settings)
    command.upgrade(config, "0010")
    url = settings.database_url
    assert url is not None
    insert = "INSERT INTO events (created_at, kind, payload) VALUES (now(), 'test', '{}')"

    def notified(listener: psycopg.Connection[tuple[object, ...]], expected: int) -> list[str]:
        """The notifications that arrive: waited for up to 10 s while ``expected`` are due (a loaded
        machine delivers late), then 0.5 s more for any beyond them."""
        notes = (
            [note.channel for note in listener.notifies(timeout=10, stop_after=expected)] if expected else []
        )
        return notes + [note.channel for note in listener.notifies(timeout=0.5, stop_after=10)]

    with psycopg.connect(url, autocommit=True) as listener, psycopg.connect(url) as writer:
        listener.execute(f"LISTEN {CHANNEL}")
        writer.execute(insert)
        writer.execute(insert)
        assert notified(listener, 0) == []  # not committed yet
        writer.commit()
        # Postgres folds identical notifications of one transaction into one.
        assert notified(listener, 1) == [CHANNEL]
        writer.execute(insert)
        writer.rollback()
        assert notified(listener, 0) == []
        writer.execute(insert)
        writer.commit()
        assert notified(listener, 1) == [CHANNEL]
        command.downgrade(config, "0009")
        writer.execute(insert)
        writer.commit()
        assert notified(listener, 0) == []


@pytest.mark.parametrize("make_settings", [postgres_settings, sqlite_settings], ids=["postgres", "sqlite"])
def test_0011_adds_reuse_device_off_for_every_stored_sweep(
    make_settings: Callable[[Path], Settings], tmp_path: Path
) -> None:
    """Sweeps stored before 0011 do not take stored device runs (``reuse_device`` false); a new one may;
    the downgrade drops the column and keeps every sweep and its cells (on SQLite a batch copy of
    ``sweeps`` would cascade to them)."""
    from orchestrator.db import make_engine

    settings = make_settings(tmp_path)
    config = alembic_config(settings)
    command.upgrade(config, "0010")
    engine = make_engine(settings)
    now = "now()" if engine.dialect.name == "postgresql" else "CURRENT_TIMESTAMP"
    sweep_row = (
        "INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s{})"
        " VALUES ({}, {}, true, 'fast', 900{})"
    )
    try:
        with engine.begin() as conn:
            conn.execute(text(sweep_row.format("", 1, now, "")))
            conn.execute(text("INSERT INTO cells (id, sweep_id, policy, backend, options) "
                              "VALUES (1, 1, 'act', 'xnnpack', '{}')"))  # fmt: skip
        command.upgrade(config, "0011")
        with engine.begin() as conn:
            assert conn.execute(text("SELECT id, reuse_device FROM sweeps")).all() == [(1, False)]
            conn.execute(text(sweep_row.format(", reuse_device", 2, now, ", true")))
            rows = conn.execute(text("SELECT id, reuse_device FROM sweeps ORDER BY id")).all()
            assert rows == [(1, False), (2, True)]
        command.downgrade(config, "0010")
        assert "reuse_device" not in {column["name"] for column in inspect(engine).get_columns("sweeps")}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id FROM sweeps ORDER BY id")).all() == [(1,), (2,)]
            assert conn.execute(text("SELECT id, sweep_id FROM cells")).all() == [(1, 1)]
    finally:
        engine.dispose()


@pytest.mark.parametrize("make_settings", [postgres_settings, sqlite_settings], ids=["postgres", "sqlite"])
def test_0005_adds_no_signing_key_to_runners_enrolled_before_it(
    make_settings: Callable[[Path], Settings], tmp_path: Path
) -> None:
    """A runner enrolled before 0005 has no public key (it signs nothing until it enrols again); one
    enrolled after may store its key; the downgrade drops the column and keeps every runner and the
    device runs that name them (on SQLite a batch copy of ``runners`` would reach those rows)."""
    from orchestrator.db import make_engine

    settings = make_settings(tmp_path)
    config = alembic_config(settings)
    command.upgrade(config, "0004")
    engine = make_engine(settings)
    now = "now()" if engine.dialect.name == "postgresql" else "CURRENT_TIMESTAMP"
    runner_row = (
        "INSERT INTO runners (id, name, device_classes, probe, credential_hash, state, enrolled_at{})"
        " VALUES ({}, 'board-{}', '[]', '{{}}', '{}', 'healthy', {}{})"
    )
    try:
        with engine.begin() as conn:
            conn.execute(text(runner_row.format("", 1, 1, "a" * 64, now, "")))
        command.upgrade(config, "0005")
        with engine.begin() as conn:
            assert conn.execute(text("SELECT id, signing_key FROM runners")).all() == [(1, None)]
            conn.execute(
                text(runner_row.format(", signing_key", 2, 2, "b" * 64, now, ", '" + "k" * 64 + "'"))
            )
            rows = conn.execute(text("SELECT id, signing_key FROM runners ORDER BY id")).all()
            assert rows == [(1, None), (2, "k" * 64)]
        command.downgrade(config, "0004")
        assert "signing_key" not in {column["name"] for column in inspect(engine).get_columns("runners")}
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT id, name, credential_hash FROM runners ORDER BY id")).all()
            assert rows == [(1, "board-1", "a" * 64), (2, "board-2", "b" * 64)]
    finally:
        engine.dispose()


@pytest.mark.parametrize("make_settings", [postgres_settings, sqlite_settings], ids=["postgres", "sqlite"])
def test_0012_adds_etrecord_off_for_every_stored_sweep(
    make_settings: Callable[[Path], Settings], tmp_path: Path
) -> None:
    """Sweeps stored before 0012 did not ask for ETRecords (``etrecord`` false); a new one may; the
    downgrade drops the column and keeps every sweep and its cells."""
    from orchestrator.db import make_engine

    settings = make_settings(tmp_path)
    config = alembic_config(settings)
    command.upgrade(config, "0011")
    engine = make_engine(settings)
    now = "now()" if engine.dialect.name == "postgresql" else "CURRENT_TIMESTAMP"
    sweep_row = (
        "INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s, reuse_device{})"
        " VALUES ({}, {}, true, 'fast', 900, false{})"
    )
    try:
        with engine.begin() as conn:
            conn.execute(text(sweep_row.format("", 1, now, "")))
            conn.execute(text("INSERT INTO cells (id, sweep_id, policy, backend, options) "
                              "VALUES (1, 1, 'act', 'vulkan', '{}')"))  # fmt: skip
        command.upgrade(config, "0012")
        with engine.begin() as conn:
            assert conn.execute(text("SELECT id, etrecord FROM sweeps")).all() == [(1, False)]
            conn.execute(text(sweep_row.format(", etrecord", 2, now, ", true")))
            rows = conn.execute(text("SELECT id, etrecord FROM sweeps ORDER BY id")).all()
            assert rows == [(1, False), (2, True)]
        command.downgrade(config, "0011")
        assert "etrecord" not in {column["name"] for column in inspect(engine).get_columns("sweeps")}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id FROM sweeps ORDER BY id")).all() == [(1,), (2,)]
            assert conn.execute(text("SELECT id, sweep_id FROM cells")).all() == [(1, 1)]
    finally:
        engine.dispose()


@pytest.mark.parametrize("make_settings", [postgres_settings, sqlite_settings], ids=["postgres", "sqlite"])
def test_0013_keys_device_runs_by_runtime_patches_and_refuses_a_lossy_downgrade(
    make_settings: Callable[[Path], Settings], tmp_path: Path
) -> None:
    """Runs stored before 0013 are of a release runtime (no patches); a candidate fix's run may then
    stand beside one on the same cell and class, and a second of the same runtime still may not; the
    downgrade refuses while a cell and class hold two runs, and goes through once one is deleted."""
    from orchestrator.db import make_engine

    settings = make_settings(tmp_path)
    config = alembic_config(settings)
    command.upgrade(config, "0012")
    engine = make_engine(settings)
    now = "now()" if engine.dialect.name == "postgresql" else "CURRENT_TIMESTAMP"
    run = (
        "INSERT INTO device_runs (id, cell_id, device_class, source, status, bundle_sha256, document, "
        "created_at, updated_at{}) VALUES ({}, 1, 'h200-vulkan', 'import', 'ok', 'ab', '{{}}', {}, {}{})"
    )
    try:
        with engine.begin() as conn:
            conn.execute(text(f"INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s) "
                              f"VALUES (1, {now}, true, 'fast', 900)"))  # fmt: skip
            conn.execute(text("INSERT INTO cells (id, sweep_id, policy, backend, options) "
                              "VALUES (1, 1, 'act', 'vulkan', '{}')"))  # fmt: skip
            conn.execute(text(run.format("", 1, now, now, "")))
        command.upgrade(config, "0013")
        with engine.begin() as conn:
            assert conn.execute(text("SELECT id, runtime_patches FROM device_runs")).all() == [(1, "")]
            conn.execute(text(run.format(", runtime_patches", 2, now, now, ", 'pytorch/executorch#22786'")))
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(text(run.format(", runtime_patches", 3, now, now, ", 'pytorch/executorch#22786'")))
        with pytest.raises(RuntimeError, match="cannot downgrade below 0013: cells 1 hold a candidate-fix"):
            command.downgrade(config, "0012")
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM device_runs WHERE id = 2"))
        command.downgrade(config, "0012")
        assert "runtime_patches" not in {c["name"] for c in inspect(engine).get_columns("device_runs")}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id, cell_id FROM device_runs")).all() == [(1, 1)]
    finally:
        engine.dispose()


@pytest.mark.parametrize("make_settings", [postgres_settings, sqlite_settings], ids=["postgres", "sqlite"])
def test_0014_adds_workarounds_empty_for_every_stored_sweep(
    make_settings: Callable[[Path], Settings], tmp_path: Path
) -> None:
    """Sweeps stored before 0014 asked for no workaround (an empty list); a new one may name some; the
    downgrade drops the column and keeps every sweep and its cells."""
    from orchestrator.db import make_engine

    settings = make_settings(tmp_path)
    config = alembic_config(settings)
    command.upgrade(config, "0013")
    engine = make_engine(settings)
    now = "now()" if engine.dialect.name == "postgresql" else "CURRENT_TIMESTAMP"
    sweep_row = (
        "INSERT INTO sweeps (id, created_at, constant_prop, lowering, timeout_s{}) "
        "VALUES ({}, {}, true, 'fast', 900{})"
    )
    try:
        with engine.begin() as conn:
            conn.execute(text(sweep_row.format("", 1, now, "")))
            conn.execute(text("INSERT INTO cells (id, sweep_id, policy, backend, options) "
                              "VALUES (1, 1, 'diffusion', 'vulkan', '{}')"))  # fmt: skip
        command.upgrade(config, "0014")
        with engine.begin() as conn:
            conn.execute(text(sweep_row.format(", workarounds", 2, now, """, '["group_norm_4d"]'""")))
            rows = conn.execute(text("SELECT id, workarounds FROM sweeps ORDER BY id")).all()
            assert [(i, json.loads(w) if isinstance(w, str) else w) for i, w in rows] == [
                (1, []),
                (2, ["group_norm_4d"]),
            ]
        command.downgrade(config, "0013")
        assert "workarounds" not in {column["name"] for column in inspect(engine).get_columns("sweeps")}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id FROM sweeps ORDER BY id")).all() == [(1,), (2,)]
            assert conn.execute(text("SELECT id, sweep_id FROM cells")).all() == [(1, 1)]
    finally:
        engine.dispose()
