"""Helpers for the orchestrator's tests (a plain module: test files must not import conftest, whose
name every test directory shares)."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
ROOT = Path(__file__).resolve().parents[2]


def _xdist_worker() -> int:
    """This test process's index among pytest-xdist's workers (gw0, gw1, ...); 0 without xdist."""
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))


def recreate_database(name: str) -> str:
    """An empty Postgres database (dropped first if a previous run left it), as a URL. Each xdist worker
    gets its own database of that name (suffixed with its index), so parallel workers never share one."""
    if worker := _xdist_worker():
        name = f"{name}_gw{worker}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


def session_broker(database: int) -> str:
    """The machine's Redis (6379) as a broker URL on ``database``, shifted down by 4 per xdist worker:
    tests that flush their broker database never flush another worker's (databases 11-13 for gw0,
    7-9 for gw1)."""
    shifted = database - 4 * _xdist_worker()
    assert shifted >= 0, f"no Redis database left for xdist worker {_xdist_worker()}"
    return f"redis://127.0.0.1:6379/{shifted}"
