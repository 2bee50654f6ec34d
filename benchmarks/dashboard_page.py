"""Time to load the grid page of a 50-cell sweep (25 policies × 2 backends) from the orchestrator.

By default it builds its own farm in a temporary home: the embedded SQLite database (or
``--database-url``), migrated, one sweep whose cells are stored through the jobs service the way a
worker stores them (most finished, some slow, failed, running or queued), and a real
``coverfarm serve`` process. It then times ``--requests`` sequential GETs of the grid page and of
the live JSON the page fetches on each event, and prints their medians.

    python benchmarks/dashboard_page.py --requests 50
    python benchmarks/dashboard_page.py --url http://127.0.0.1:8000 --sweep 3   # an existing farm
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from celery import Celery

from coverfarm.result import (
    Blocker,
    ErrorInfo,
    HeavyMacs,
    Ops,
    ProgramResult,
    Programs,
    ResultDocument,
    StageResult,
    StageStatus,
)
from coverfarm.settings import Settings
from orchestrator.db import make_engine, make_sessionmaker, unit_of_work
from orchestrator.jobs import service as jobs
from orchestrator.migrate import upgrade
from orchestrator.sweeps import service as sweeps
from orchestrator.sweeps.schemas import SweepCreate

ROOT = Path(__file__).resolve().parents[1]
POLICIES = [f"policy_{i:02d}" for i in range(25)]
BACKENDS = ["vulkan", "xnnpack"]
OK = StageResult(status=StageStatus.OK, seconds=1.0)
COMMAND = [sys.executable, "-c", "import sys; from coverfarm_cli import main; sys.exit(main())"]


def document(policy: str, backend: str, index: int) -> ResultDocument:
    total = 1000 + 37 * index
    export = OK
    if index % 7 == 3:
        error = ErrorInfo(stage="export", type="StageTimeout", message="export exceeded 900 s")
        export = StageResult(status=StageStatus.SLOW, seconds=900.0, error=error)
    return ResultDocument(
        policy=policy,
        backend=backend,
        trace=OK,
        partition=OK,
        export=export,
        ops=Ops(total=total, on_backend=total - 3 * index, supported=total - 3 * index),
        heavy_macs=HeavyMacs(total=10**9, on_backend=10**9 - index * 10**7, supported=10**9),
        programs=Programs(count=3 + index, connected_groups=2 + index, delegates=3 + index),
        blockers=[
            Blocker(op="aten.elu.default", reason="no operator implementation", count=index, macs=0),
            Blocker(
                op="aten.convolution.default", reason="op args not supported", count=2, macs=index * 10**7
            ),
        ],
        program_list=[ProgramResult(name="predict_action_chunk", runs_per_chunk=1, ops=total, macs=10**9)],
        timings={"trace_s": 10.0, "partition_s": 5.0, "export_s": 7.0},
    )


def build(settings: Settings) -> int:
    """A 50-cell sweep with stored results; its id."""
    upgrade(settings)
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    celery = Celery(broker="memory://")  # the sweep's jobs are never run here
    with unit_of_work(sessions, celery) as session:
        sweep = sweeps.create(session, settings, SweepCreate(policies=POLICIES, backends=BACKENDS))
        sweep_id = sweep.id
        job_ids = [(cell.policy, cell.backend, cell.jobs[0].id) for cell in sweep.cells]
    for index, (policy, backend, job_id) in enumerate(job_ids):
        if index % 10 == 9:
            continue  # left queued
        with unit_of_work(sessions, celery) as session:
            started = jobs.start(session, job_id, "bench@here", settings)
            assert started is not None
        if index % 10 == 8:
            continue  # left running
        with unit_of_work(sessions, celery) as session:
            if index % 10 == 7:
                jobs.fail(session, job_id, started.attempt, "Traceback ...\nRuntimeError: engine failed")
            else:
                jobs.finish(session, job_id, started.attempt, document(policy, backend, index), settings)
    engine.dispose()
    return sweep_id


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [*COMMAND, "serve", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/sweeps", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("coverfarm serve did not start")


def timed(client: httpx.Client, path: str, requests: int) -> list[float]:
    client.get(path).raise_for_status()  # warm-up: templates compiled, connections pooled
    seconds = []
    for _ in range(requests):
        start = time.perf_counter()
        response = client.get(path)
        response.raise_for_status()
        seconds.append(time.perf_counter() - start)
    return seconds


def report(label: str, seconds: list[float], size: int) -> None:
    ms = sorted(1000 * s for s in seconds)
    p90 = ms[int(0.9 * (len(ms) - 1))]
    median = statistics.median(ms)
    print(f"{label:34s} median {median:7.1f} ms   p90 {p90:7.1f} ms   ({size} bytes, n={len(ms)})")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=50, help="timed requests per page (50)")
    parser.add_argument("--database-url", help="Postgres to build the sweep in (default: embedded SQLite)")
    parser.add_argument("--url", help="an orchestrator that is already running (with --sweep)")
    parser.add_argument("--sweep", type=int, help="the sweep to load from --url")
    args = parser.parse_args()

    process = None
    with tempfile.TemporaryDirectory(prefix="coverfarm-bench-") as home:
        if args.url:
            if args.sweep is None:
                parser.error("--url needs --sweep")
            url, sweep_id = args.url.rstrip("/"), args.sweep
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith("COVERFARM_")}
            env |= {"COVERFARM_HOME": home, "COVERFARM_POLICIES": ",".join(POLICIES)}
            if args.database_url:
                env["COVERFARM_DATABASE_URL"] = args.database_url
            settings = Settings(home=Path(home), database_url=args.database_url, policies=POLICIES)
            sweep_id = build(settings)
            port = free_port()
            process = serve(env, port)
            url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=url, timeout=30) as client:
                cells = len(client.get(f"/api/sweeps/{sweep_id}").json()["cells"])
                print(f"sweep {sweep_id}: {cells} cells, {url}")
                page = timed(client, f"/sweeps/{sweep_id}", args.requests)
                report(f"grid page /sweeps/{sweep_id}", page, len(client.get(f"/sweeps/{sweep_id}").content))
                live = timed(client, f"/sweeps/{sweep_id}/live.json", args.requests)
                size = len(client.get(f"/sweeps/{sweep_id}/live.json").content)
                report("live update /sweeps/{id}/live.json", live, size)
                api = timed(client, f"/api/sweeps/{sweep_id}", args.requests)
                report(
                    "for reference: /api/sweeps/{id}", api, len(client.get(f"/api/sweeps/{sweep_id}").content)
                )
        finally:
            if process is not None:
                process.terminate()
                process.wait(timeout=15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
