"""Helpers for the orchestrator's tests (a plain module: test files must not import conftest, whose
name every test directory shares)."""

from __future__ import annotations

from pathlib import Path

import psycopg

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
ROOT = Path(__file__).resolve().parents[2]


def recreate_database(name: str) -> str:
    """An empty Postgres database (dropped first if a previous run left it), as a URL."""
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql://postgres@127.0.0.1:5432/{name}"
