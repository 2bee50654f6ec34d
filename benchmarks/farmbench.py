"""What the farm benchmarks share: a farm of real processes on a scratch Postgres database and a private
redis-server, run from this checkout or from another one (``--baseline``: the code before a change,
measured side by side with this one in the same run), and the figures' arithmetic.

Needs Postgres on 127.0.0.1:5432 (user postgres, trust) and redis-server on PATH; everything runs on
loopback, and every database a farm makes is dropped when it closes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.result import HeavyMacs, Ops, Options, Programs, ResultDocument, StageResult, StageStatus
from coverfarm.settings import Settings
from coverfarm_cli.processes import stop_group
from orchestrator.db import make_engine, make_sessionmaker

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
TOKEN = "bench-admin-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def load() -> str:
    """The machine's load averages (1, 5, 15 minutes) and its cores, for the figures' context."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def head_revision(root: Path) -> str:
    """The newest Alembic revision of the checkout at ``root``."""
    config = Config(str(root / "alembic.ini"))
    config.set_main_option("script_location", str(root / "migrations"))
    head = ScriptDirectory.from_config(config).get_current_head()
    if head is None:
        raise RuntimeError(f"{root} has no migrations")
    return head


def document(policy: str, backend: str) -> ResultDocument:
    ok = StageResult(status=StageStatus.OK, seconds=1.0)
    return ResultDocument(
        policy=policy,
        backend=backend,
        options=Options(),
        trace=ok,
        partition=ok,
        export=ok,
        ops=Ops(total=1561, on_backend=1557, supported=1557),
        heavy_macs=HeavyMacs(total=10**9, on_backend=9 * 10**8, supported=9 * 10**8),
        programs=Programs(count=3, connected_groups=24, delegates=3),
        versions={"engine": "benchmark seed"},
    )


def create_database(name: str, template: str | None = None) -> str:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


def drop_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Farm:
    """A database, a private redis-server and the processes of one farm, whose code is the checkout at
    ``root`` (this one by default). The database is made empty unless ``template`` names one to copy."""

    def __init__(
        self,
        folder: Path,
        name: str,
        env_extra: dict[str, str],
        root: Path = ROOT,
        template: str | None = None,
    ) -> None:
        self.folder = folder / name
        self.folder.mkdir(parents=True)
        self.name = name
        self.root = root
        self.database = f"coverfarm_bench_{name}_{os.getpid()}"
        database_url = create_database(self.database, template)
        self.redis_port = free_port()
        self.processes: list[subprocess.Popen[bytes]] = []
        self.env: dict[str, str] = {}
        self._spawn(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port), "--save", "",
             "--appendonly", "no", "--dir", str(self.folder)],
            "redis.log",
        )  # fmt: skip
        self.env = {
            "COVERFARM_HOME": str(self.folder / "home"),
            "COVERFARM_DATABASE_URL": database_url,
            "COVERFARM_BROKER_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "COVERFARM_ADMIN_TOKEN": TOKEN,
            "COVERFARM_ENGINE": "standin_engine:analyze",
            "COVERFARM_STAGE_TIMEOUT_S": "30",
            "COVERFARM_LONG_TIMEOUT_S": "1200",
            "COVERFARM_HEARTBEAT_INTERVAL_S": "1",
            "COVERFARM_HEARTBEAT_TIMEOUT_S": "10",
            **env_extra,
        }
        self.settings = Settings.model_validate(
            {key.removeprefix("COVERFARM_").lower(): value for key, value in self.env.items()}
        )
        self.engine = make_engine(self.settings)
        self.sessions: sessionmaker[Session] = make_sessionmaker(self.engine)
        self.url = ""

    def _spawn(self, command: list[str], log: str, **extra: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("COVERFARM_")}
        env |= self.env | extra
        env["PYTHONPATH"] = os.pathsep.join([str(self.root / "tests" / "farm"), str(self.root)])
        with (self.folder / log).open("ab") as out:
            process = subprocess.Popen(
                command, env=env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes.append(process)
        return process

    def python(self, code: str, stdin: str = "") -> str:
        """Run ``code`` in a Python process of this farm's code and settings; its output."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("COVERFARM_")} | self.env
        env["PYTHONPATH"] = str(self.root)
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=self.root, input=stdin, capture_output=True, text=True
        )
        if done.returncode:
            raise RuntimeError(f"python in {self.root} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def _coverfarm(self, *args: str, log: str, **extra: str) -> subprocess.Popen[bytes]:
        # The command's package where the checkout has it (a checkout from before it had its own
        # package keeps it in coverfarm.cli).
        package = "coverfarm_cli" if (self.root / "coverfarm_cli").is_dir() else "coverfarm.cli"
        command = [sys.executable, "-c", f"import sys; from {package} import main; sys.exit(main())"]
        return self._spawn([*command, *args], log, **extra)

    def serve(self) -> str:
        """``coverfarm serve`` of this farm's code (which migrates its database to that code's head)."""
        port = free_port()
        process = self._coverfarm("serve", "--port", str(port), log="serve.log")
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/api/workers", timeout=2).status_code == 200:
                    self.url = url
                    return url
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"coverfarm serve did not start; see {self.folder / 'serve.log'}")
            time.sleep(0.2)

    def workers(self, names: list[str], **extra: str) -> None:
        """``coverfarm worker`` processes, started together, once each says it is ready."""
        logs = {name: f"{name}.log" for name in names}
        started = {
            name: self._coverfarm("worker", "--name", f"{name}@%h", log=logs[name], **extra) for name in names
        }
        deadline = time.monotonic() + 180
        for name, process in started.items():
            while b" ready." not in (self.folder / logs[name]).read_bytes():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker {name} did not start; see {self.folder / logs[name]}")
                time.sleep(0.2)

    def stop_workers(self) -> None:
        for process in self.processes[2:]:
            stop_group(process, grace_s=15)
        del self.processes[2:]

    def close(self) -> None:
        for process in reversed(self.processes):
            stop_group(process, grace_s=15)
        self.engine.dispose()
        drop_database(self.database)
