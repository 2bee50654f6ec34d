"""Measure a real sweep through the farm: `make run`'s cells (6 policies x 2 backends by default) lowered
for real (``worker.engine:analyze``, nothing reused) by 1 and then 2 CPU workers on this machine.

Each number of workers gets a farm of its own (its database, broker, home and trace cache,
``COVERFARM_TRACE_CACHE``, so no stored result or traced policy carries over from the run before), and
its workers share this machine's memory: each of N workers advertises MemTotal / N
(``COVERFARM_WORKER_MEMORY_GB``), which is what bounds the jobs that run at once here. The benchmark
prints, per number of workers: the wall time from the POST to the last job's finish (the database's
stamps), the sum of the jobs' start-to-finish, how busy the workers were (that sum over workers x wall),
and each cell's outcome, worker and seconds; with the machine's load before and after each run.

The whole 6 x 2 sweep takes about an hour on one worker of a 2-core machine (multi_task_dit and
diffusion take most of it); --policies picks fewer.

    python benchmarks/farm_sweep.py [--workers 1,2] [--policies act,vqbet,...] [--backends vulkan,xnnpack]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import psycopg
from farmbench import TOKEN, Farm, load

from coverfarm.settings import Settings
from coverfarm.worker_memory import GB, machine_memory_bytes
from coverfarm_cli.farm import UP_POLICIES


def memtotal_gb() -> float:
    total = machine_memory_bytes()
    if total is None:
        raise SystemExit("farm_sweep: this machine's memory is unknown (no /proc/meminfo)")
    return total / GB


POLICIES = UP_POLICIES
BACKENDS = "vulkan,xnnpack"


@dataclass(frozen=True)
class Job:
    policy: str
    backend: str
    stage: str
    status: str
    worker: str
    started: datetime
    finished: datetime

    @property
    def seconds(self) -> float:
        return (self.finished - self.started).total_seconds()


def jobs_of(farm: Farm, sweep_id: int) -> list[Job]:
    with psycopg.connect(farm.env["COVERFARM_DATABASE_URL"]) as conn:
        rows = conn.execute(
            "SELECT c.policy, c.backend, j.stage, j.status, j.worker, j.started_at, j.finished_at"
            " FROM jobs j JOIN cells c ON c.id = j.cell_id"
            " WHERE c.sweep_id = %s AND j.kind = 'lower' AND j.finished_at IS NOT NULL ORDER BY j.id",
            (sweep_id,),
        ).fetchall()
    return [Job(p, b, g, str(s), (w or "").split("@")[0], st, fi) for p, b, g, s, w, st, fi in rows]


def run(folder: Path, workers: int, policies: list[str], backends: list[str], timeout_s: float) -> None:
    memory = memtotal_gb() / workers
    defaults = Settings()
    env = {
        "COVERFARM_ENGINE": "worker.engine:analyze",
        "COVERFARM_WORKER_MEMORY_GB": f"{memory:.1f}",
        # The farm's own bounds, not the quick ones farmbench gives stand-in farms: a real cell is
        # measured once, not cut at 30 s and re-run.
        "COVERFARM_STAGE_TIMEOUT_S": str(defaults.stage_timeout_s),
        "COVERFARM_LONG_TIMEOUT_S": str(defaults.long_timeout_s),
        "COVERFARM_HEARTBEAT_INTERVAL_S": "15",
        "COVERFARM_HEARTBEAT_TIMEOUT_S": "90",
        # A trace cache of this farm's own: each run traces its policies afresh, as a first run does.
        "COVERFARM_TRACE_CACHE": str(folder / f"traces{workers}"),
    }
    farm = Farm(folder, f"real{workers}", env)
    try:
        farm.serve()
        farm.workers([f"real{workers}-{i}" for i in range(workers)])
        before = load()
        with httpx.Client(base_url=farm.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as api:
            posted = time.time()
            response = api.post("/api/sweeps", json={"policies": policies, "backends": backends})
            response.raise_for_status()
            sweep_id = int(response.json()["id"])
            deadline = time.monotonic() + timeout_s
            while (summary := api.get(f"/api/sweeps/{sweep_id}/summary").json())["state"] != "done":
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"sweep {sweep_id} did not finish in {timeout_s:.0f} s: {summary['counts']}"
                    )
                time.sleep(2)
        jobs = jobs_of(farm, sweep_id)
        if any(job.stage != "lower" for job in jobs):
            print("   (a cell ran out of its stage bound and was re-run with the long one: both are listed)")
        wall = max(job.finished for job in jobs).timestamp() - posted
        busy = sum(job.seconds for job in jobs)
        print(f"\n{workers} worker(s), {memory:.1f} GB each: {len(jobs)} lower jobs in {wall:.0f} s wall; "
              f"jobs' own time {busy:.0f} s, workers busy {100 * busy / (workers * wall):.0f}%; "
              f"counts {summary['counts']}")  # fmt: skip
        print(f"   before: {before}; after: {load()}")
        print(f"   {'policy':<16} {'backend':<8} {'stage':<10} {'status':<7} {'worker':<10} {'seconds':>8}")
        for job in sorted(jobs, key=lambda job: job.started):
            print(
                f"   {job.policy:<16} {job.backend:<8} {job.stage:<10} {job.status:<7} {job.worker:<10} "
                f"{job.seconds:>8.1f}"
            )
    finally:
        farm.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", default="1,2", help="comma-separated numbers of workers")
    parser.add_argument("--policies", default=POLICIES)
    parser.add_argument("--backends", default=BACKENDS)
    parser.add_argument("--timeout", type=float, default=7200.0, help="each sweep's bound, seconds")
    args = parser.parse_args()
    policies = [name for name in args.policies.split(",") if name]
    backends = [name for name in args.backends.split(",") if name]
    print(f"A real sweep of {len(policies)} x {len(backends)} cells through the farm ({load()}; "
          f"{memtotal_gb():.1f} GB MemTotal; {os.cpu_count()} cores)")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="coverfarm-sweep-") as folder:
        for workers in (int(n) for n in args.workers.split(",")):
            run(Path(folder), workers, policies, backends, args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
