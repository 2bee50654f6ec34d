"""The embedded default's SQLite file: created readable by its owner only (it holds the runners'
credential hashes), and refused at start, with what to do, when it is damaged."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from coverfarm.settings import Settings
from orchestrator.migrate import upgrade

CLI = "import sys; from coverfarm_cli import main; sys.exit(main())"


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_database_and_its_journal_files_are_0600(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    os.umask(0o022)  # the usual umask, under which SQLite itself would make the file 0644
    upgrade(settings)
    database = settings.sqlite_path
    assert mode(database) == 0o600
    with sqlite3.connect(database) as conn:  # a WAL write makes the -wal and -shm files
        conn.execute("CREATE TABLE probe (x)")
        journals = [p for p in database.parent.iterdir() if p.name.startswith(database.name + "-")]
        assert journals and all(mode(p) == 0o600 for p in journals), [
            (p.name, oct(mode(p))) for p in journals
        ]


def test_an_existing_world_readable_database_is_made_0600(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    upgrade(settings)
    settings.sqlite_path.chmod(0o644)
    upgrade(settings)
    assert mode(settings.sqlite_path) == 0o600


def serve(home: Path) -> subprocess.CompletedProcess[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERFARM_")} | {
        "COVERFARM_HOME": str(home)
    }
    return subprocess.run([sys.executable, "-c", CLI, "serve", "--port", str(port)], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def damage_pages(path: Path) -> None:
    """Overwrite the b-tree header of every page but the first (the file's header): its page type and
    cell count. Damage to a page's free space would go unseen, and where free space lies moves with
    the schema's layout (a migration that copies a table moves it)."""
    data = bytearray(path.read_bytes())
    for offset in range(4096, len(data), 4096):
        data[offset : offset + 8] = b"\xa5" * 8
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["garbage", "pages"])
def test_serve_refuses_a_damaged_database_with_what_to_do(tmp_path: Path, damage: str) -> None:
    home = tmp_path / "home"
    settings = Settings(home=home)
    upgrade(settings)
    with sqlite3.connect(settings.sqlite_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if damage == "garbage":
        settings.sqlite_path.write_bytes(b"this is not a database " * 500)
    else:
        damage_pages(settings.sqlite_path)
    before = settings.sqlite_path.read_bytes()
    done = serve(home)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"the database {settings.sqlite_path} is damaged" in lines[0]
    assert "restore it from a backup" in lines[0]
    assert settings.sqlite_path.read_bytes() == before  # refused before anything wrote to it
