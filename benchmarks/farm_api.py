"""Measure the farm's API and queueing on a scratch Postgres database and a private redis-server.

Prints:
1. API latency (p50/p99 over --requests) of GET /api/sweeps (the light list), GET /api/sweeps/{id}/summary
   (counts per state and backend column), a page of 100 cells from the middle of GET /api/sweeps/{id}/cells
   (unfiltered, and filtered by backend and state) and GET /api/sweeps/{id} (the full view, every cell
   with its jobs and result document) for one sweep of --cells cells, all stored through the jobs
   service (start, then finish with a result document), as a worker would.
2. The delay from a result committed (by this process, through the jobs service) to its event on the
   SSE stream of a running orchestrator: median and max over --events results.
3. Sweep wall time with one and with two CPU workers, using the STAND-IN engine
   (tests/farm/standin_engine.py: sleeps --standin-seconds per cell, no torch, no ExecuTorch), so the
   figure is the farm's queueing and bookkeeping around a fixed amount of work, not the engine's.

    python benchmarks/farm_api.py [--cells 10000] [--requests 100] [--events 50] [--api-only]

Needs Postgres on 127.0.0.1:5432 (user postgres, trust) and redis-server on PATH. Everything runs on
loopback; the scratch database is dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.processes import stop_group
from coverfarm.queues import QUEUE_LOWER
from coverfarm.result import HeavyMacs, Ops, Options, Programs, ResultDocument, StageResult, StageStatus
from coverfarm.settings import Settings
from orchestrator.db import make_engine, make_sessionmaker, take_outbox, unit_of_work
from orchestrator.jobs import service as jobs
from orchestrator.migrate import upgrade
from orchestrator.models import Cell, Sweep

ROOT = Path(__file__).resolve().parents[1]
STANDIN_DIR = ROOT / "tests" / "farm"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
TOKEN = "bench-admin-token"
BATCH = 500
# No broker traffic from this process: jobs stored here are never sent (the outbox is dropped), and
# a start or finish transition sends nothing.
NO_BROKER = Celery(broker="memory://")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop(process: subprocess.Popen[bytes]) -> None:
    stop_group(process, grace_s=15)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


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


class Farm:
    """A scratch database, a private redis-server and the processes of one farm."""

    def __init__(self, folder: Path, env_extra: dict[str, str]) -> None:
        self.folder = folder
        self.database = f"coverfarm_bench_{os.getpid()}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.database}"')
        self.redis_port = free_port()
        self.processes: list[subprocess.Popen[bytes]] = []
        self._spawn(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port), "--save", "",
             "--appendonly", "no", "--dir", str(folder)],
            "redis.log",
        )  # fmt: skip
        self.env = {
            "COVERFARM_HOME": str(folder / "home"),
            "COVERFARM_DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{self.database}",
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
        upgrade(self.settings)
        self.engine = make_engine(self.settings)
        self.sessions: sessionmaker[Session] = make_sessionmaker(self.engine)

    def _spawn(self, command: list[str], log: str, **extra: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("COVERFARM_")}
        env |= getattr(self, "env", {}) | extra
        env["PYTHONPATH"] = os.pathsep.join([str(STANDIN_DIR), str(ROOT)])
        with (self.folder / log).open("ab") as out:
            process = subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes.append(process)
        return process

    def _coverfarm(self, *args: str, log: str, **extra: str) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-c", "import sys; from coverfarm.cli import main; sys.exit(main())"]
        return self._spawn([*command, *args], log, **extra)

    def serve(self) -> str:
        port = free_port()
        process = self._coverfarm("serve", "--port", str(port), log="serve.log")
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/api/workers", timeout=2).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"coverfarm serve did not start; see {self.folder / 'serve.log'}")
            time.sleep(0.2)

    def worker(self, name: str, **extra: str) -> subprocess.Popen[bytes]:
        log = f"{name}.log"
        process = self._coverfarm("worker", "--name", f"{name}@%h", log=log, **extra)
        deadline = time.monotonic() + 90
        while b" ready." not in (self.folder / log).read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start; see {self.folder / log}")
            time.sleep(0.2)
        return process

    def stop_workers(self) -> None:
        for process in self.processes[2:]:
            stop(process)
        del self.processes[2:]

    def close(self) -> None:
        for process in reversed(self.processes):
            stop(process)
        self.engine.dispose()
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


def seed_sweep(farm: Farm, cells: int) -> int:
    """One sweep of ``cells`` cells, each job started and finished with a result through the service."""
    backends = ["vulkan", "xnnpack"]
    with unit_of_work(farm.sessions, NO_BROKER) as session:
        sweep = Sweep(constant_prop=True, lowering="stock", timeout_s=900.0)
        session.add(sweep)
        session.flush()
        sweep_id = sweep.id
    options = Options(timeout_s=900.0).model_dump(mode="json")
    job_ids: list[tuple[int, str, str]] = []
    for start in range(0, cells, BATCH):
        with unit_of_work(farm.sessions, NO_BROKER) as session:
            sweep = session.get_one(Sweep, sweep_id)
            for index in range(start, min(cells, start + BATCH)):
                policy, backend = f"policy{index // len(backends):05d}", backends[index % len(backends)]
                cell = Cell(sweep=sweep, policy=policy, backend=backend, options=options)
                session.add(cell)
                job = jobs.create(session, cell, jobs.STAGE_LOWER, QUEUE_LOWER, 900.0)
                job_ids.append((job.id, policy, backend))
            take_outbox(session)  # never sent: nobody consumes this sweep
    for start in range(0, len(job_ids), BATCH):
        with unit_of_work(farm.sessions, NO_BROKER) as session:
            for job_id, policy, backend in job_ids[start : start + BATCH]:
                started = jobs.start(session, job_id, "bench@seed", farm.settings)
                assert started is not None
                jobs.finish(session, job_id, started.attempt, document(policy, backend), farm.settings)
    return sweep_id


def api_latency(url: str, sweep_id: int, requests: int) -> list[tuple[str, list[float], int]]:
    rows = []
    with httpx.Client(base_url=url, timeout=120) as client:
        middle = f"/api/sweeps/{sweep_id}/cells?limit=100&offset=5000"
        for path, count in (
            ("/api/sweeps", requests),
            (f"/api/sweeps/{sweep_id}/summary", requests),
            (middle, requests),
            (f"/api/sweeps/{sweep_id}/cells?limit=100&backend=vulkan&state=ok", requests),
            (f"/api/sweeps/{sweep_id}", max(5, requests // 10)),
        ):
            client.get(path).raise_for_status()  # warm up
            seconds = []
            size = 0
            for _ in range(count):
                began = time.perf_counter()
                response = client.get(path)
                seconds.append(time.perf_counter() - began)
                response.raise_for_status()
                size = len(response.content)
            rows.append((path, seconds, size))
    return rows


@contextmanager
def event_stream(url: str, sweep_id: int) -> Iterator[queue.Queue[tuple[float, dict[str, Any]]]]:
    received: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
    opened = threading.Event()
    client = httpx.Client(timeout=httpx.Timeout(10, read=None))

    def read() -> None:
        try:
            with client.stream("GET", f"{url}/api/events", params={"sweep": sweep_id}) as response:
                for line in response.iter_lines():
                    opened.set()
                    if line.startswith("data:"):
                        received.put((time.perf_counter(), json.loads(line.removeprefix("data:"))))
        except httpx.HTTPError:
            pass  # closed below

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not opened.wait(10):
        raise RuntimeError("the event stream did not open")
    try:
        yield received
    finally:
        client.close()
        reader.join(timeout=5)


def event_delay(farm: Farm, url: str, results: int) -> list[float]:
    """Seconds from a result's commit to its job's "ok" event arriving on the stream."""
    with unit_of_work(farm.sessions, NO_BROKER) as session:
        sweep = Sweep(constant_prop=True, lowering="stock", timeout_s=900.0)
        session.add(sweep)
        options = Options(timeout_s=900.0).model_dump(mode="json")
        cells = [Cell(sweep=sweep, policy=f"e{i}", backend="vulkan", options=options) for i in range(results)]
        session.add_all(cells)
        job_ids = [jobs.create(session, cell, jobs.STAGE_LOWER, QUEUE_LOWER, 900.0).id for cell in cells]
        for job_id in job_ids:
            assert jobs.start(session, job_id, "bench@events", farm.settings) is not None
        take_outbox(session)
        sweep_id = sweep.id
    delays = []
    with event_stream(url, sweep_id) as received:
        for job_id in job_ids:
            with unit_of_work(farm.sessions, NO_BROKER) as session:
                jobs.finish(session, job_id, 1, document("e", "vulkan"), farm.settings)
            committed = time.perf_counter()
            while True:
                arrived, event = received.get(timeout=10)
                if event["job_id"] == job_id and event["payload"].get("status") == "ok":
                    delays.append(arrived - committed)
                    break
            time.sleep(0.02)  # one result at a time, as a worker stores them
    return delays


def sweep_wall_time(farm: Farm, url: str, workers: int, cells: int, standin_s: float) -> float:
    names = [f"bench{workers}-{i}" for i in range(workers)]
    for name in names:
        farm.worker(name, STANDIN_SECONDS=str(standin_s))
    policies = farm.settings.policies[: cells // 2]
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        began = time.perf_counter()
        response = client.post(
            "/api/sweeps", json={"policies": policies, "backends": ["vulkan", "xnnpack"], "timeout_s": 30}
        )
        response.raise_for_status()
        sweep_id = response.json()["id"]
        while True:
            summary = client.get(f"/api/sweeps/{sweep_id}").json()
            if summary["state"] == "done":
                elapsed = time.perf_counter() - began
                break
            time.sleep(0.05)
    if set(summary["counts"]) != {"ok"}:
        raise RuntimeError(f"sweep {sweep_id} did not finish ok: {summary['counts']}")
    farm.stop_workers()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--sweep-cells", type=int, default=12, help="cells of the wall-time sweep")
    parser.add_argument("--standin-seconds", type=float, default=1.0)
    parser.add_argument("--api-only", action="store_true", help="only the API latency (1.)")
    args = parser.parse_args()

    policies = ",".join(f"p{i}" for i in range(max(1, args.sweep_cells // 2)))
    with tempfile.TemporaryDirectory(prefix="coverfarm-bench-") as folder:
        farm = Farm(Path(folder), {"COVERFARM_POLICIES": policies, "COVERFARM_BACKENDS": "vulkan,xnnpack"})
        try:
            began = time.perf_counter()
            sweep_id = seed_sweep(farm, args.cells)
            print(f"seeded one sweep of {args.cells} cells through the jobs service in "
                  f"{time.perf_counter() - began:.1f} s")  # fmt: skip
            url = farm.serve()

            print(f"\n1. API latency, {args.cells}-cell sweep in the database (ms)")
            print(f"   {'request':<60} {'n':>5} {'p50':>9} {'p99':>9} {'bytes':>12}")
            for path, seconds, size in api_latency(url, sweep_id, args.requests):
                name = "GET " + path.replace(f"/{sweep_id}", "/{id}")
                print(f"   {name:<60} {len(seconds):>5} {1000 * percentile(seconds, 0.5):>9.1f} "
                      f"{1000 * percentile(seconds, 0.99):>9.1f} {size:>12}")  # fmt: skip
            if args.api_only:
                return 0

            delays = event_delay(farm, url, args.events)
            print("\n2. Result committed -> its event on the SSE stream (ms)")
            print(f"   n={len(delays)} median {1000 * statistics.median(delays):.1f} "
                  f"p90 {1000 * percentile(delays, 0.9):.1f} max {1000 * max(delays):.1f}")  # fmt: skip

            cells = 2 * max(1, args.sweep_cells // 2)
            print(f"\n3. Sweep wall time, {cells} cells, STAND-IN engine sleeping {args.standin_seconds:g} s "
                  "per cell (queueing and bookkeeping only, not the real engine)")  # fmt: skip
            for workers in (1, 2):
                elapsed = sweep_wall_time(farm, url, workers, cells, args.standin_seconds)
                ideal = cells * args.standin_seconds / workers
                print(f"   {workers} CPU worker{'s' if workers > 1 else ' '}: {elapsed:6.2f} s "
                      f"(engine time alone {ideal:.1f} s)")  # fmt: skip
        finally:
            farm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
