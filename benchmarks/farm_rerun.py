"""Measure the rerun of an unchanged sweep: `make run`'s 12 cells (6 policies x 2 backends, no device
classes) submitted again to a farm that holds a result for each of them, through one real CPU worker
with the real engine (``worker.engine:analyze``).

What a first run of the sweep stores is what the rerun needs: each cell's result under its reuse key
(``coverfarm.reuse``, with ``worker.engine.stack_fields``: trace key, backend, options, weights resolution,
versions, the engine's code digest).
Lowering those 12 cells for real takes about an hour on 2 cores, so the first run's results are stored
here through the jobs service, as a worker stores them, each under the key the real engine gives its
cell on this machine (computed here with the worker's own memory setting), with stand-in numbers. The
rerun is then the farm as it is: the POST, the broker, the real worker taking each job, computing its
cell's key and finding the stored result. It prints the rerun's wall time from the POST to the last
job's finish (the database's stamps; the target is under 10 s), how many cells were reused, the median
start-to-finish of a job, and the machine's load.

With --devices the sweep also names a device class per backend (h200-vulkan, cpu-x86_64-xnnpack): the first
run's results then carry a bundle, and each cell a stored device run and eager baseline (stand-in figures),
and the rerun asks for device reuse (``reuse_device``), so it ends once each cell has taken those too.

    python benchmarks/farm_rerun.py [--runs 3] [--devices]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis
from farmbench import TOKEN, Farm, document, load

POLICIES = ["act", "gaussian_actor", "vqbet", "multi_task_dit", "tdmpc", "diffusion"]  # `coverfarm up`'s
BACKENDS = ["vulkan", "xnnpack"]
DEVICE_CLASSES = ["h200-vulkan", "cpu-x86_64-xnnpack"]  # one per backend, with --devices
MEMORY_GB = "24"  # the worker's memory per job, set alike for the worker and the keys computed here


def submit(api: httpx.Client, devices: bool = False) -> tuple[int, float]:
    body: dict[str, object] = {"policies": POLICIES, "backends": BACKENDS}
    if devices:
        body |= {"device_classes": DEVICE_CLASSES, "reuse_device": True}
    posted = time.time()
    response = api.post("/api/sweeps", json=body)
    response.raise_for_status()
    return int(response.json()["id"]), posted


def seed(farm: Farm, sweep_id: int, devices: bool) -> None:
    """Store a result under the real engine's reuse key for each of the sweep's cells, as the worker
    that lowered it would (start, then finish with the key), and take their messages off the broker.
    With ``devices``, each result has a bundle in the store's records, and each cell a device run and a
    baseline on its backend's class, as a runner would have reported them."""
    os.environ["COVERFARM_WORKER_MEMORY_GB"] = MEMORY_GB
    from coverfarm.result import Bundle, Options
    from coverfarm.reuse import engine_fields, reuse_key
    from orchestrator.artifacts import repository as artifacts
    from orchestrator.artifacts.store import Stored
    from orchestrator.devices import repository as device_rows
    from orchestrator.jobs import service as jobs
    from orchestrator.models import Cell

    fields = engine_fields("worker.engine:analyze")
    assert fields is not None, "the real engine names no reuse fields"
    with farm.sessions() as session:
        cells = session.query(Cell).filter(Cell.sweep_id == sweep_id).order_by(Cell.id).all()
        for cell in cells:
            options = Options.model_validate(cell.options)
            key = reuse_key(fields, cell.policy, cell.backend, options)
            started = jobs.start(session, cell.jobs[0].id, "seed@benchmark", farm.settings)
            assert started is not None
            doc = document(cell.policy, cell.backend)
            if devices:
                sha = hashlib.sha256(key.encode()).hexdigest()
                artifacts.record(session, Stored(sha, farm.folder / "store" / sha, 1, 1))
                doc.bundle = Bundle(sha256=sha, path=str(farm.folder / "bundle"))
            jobs.finish(session, started.job_id, started.attempt, doc, farm.settings, reuse_key=key)
            if devices:
                seed_device_rows(session, device_rows, cell.id, cell.backend, sha)
        session.commit()
    redis.Redis(port=farm.redis_port).flushall()


def seed_device_rows(session: Any, repository: Any, cell_id: int, backend: str, sha: str) -> None:
    """A device run and a baseline with stand-in figures on the class of ``backend``, for the cell."""
    for name in DEVICE_CLASSES:
        if not name.endswith(f"-{backend}"):
            continue
        row = {"cell_id": cell_id, "device_class": name, "job_id": None, "runner_id": None, "attempt": 1,
               "status": "ok", "median_ms": 31.2, "error": None, "document": {"stand-in": True}}  # fmt: skip
        repository.upsert_run(session, row | {"source": "job", "bundle_sha256": sha})
        repository.upsert_baseline(session, row | {"median_ms": 78.0})


def rerun(farm: Farm, api: httpx.Client, devices: bool) -> tuple[float, int, float, int]:
    """(wall s from the POST to the last finish, cells reused, median job start-to-finish s, device runs
    and baselines taken from stored ones)."""
    sweep_id, posted = submit(api, devices)
    deadline = time.monotonic() + 600
    while (summary := api.get(f"/api/sweeps/{sweep_id}/summary").json())["state"] != "done":
        if time.monotonic() > deadline:
            raise RuntimeError(f"sweep {sweep_id} did not finish: {summary['counts']}")
        time.sleep(0.1)
    with psycopg.connect(farm.env["COVERFARM_DATABASE_URL"]) as conn:
        rows = conn.execute(
            "SELECT j.started_at, j.finished_at, j.status_reason FROM jobs j JOIN cells c ON c.id = j.cell_id"
            " WHERE c.sweep_id = %s",
            (sweep_id,),
        ).fetchall()
        taken = sum(
            conn.execute(
                f"SELECT count(*) FROM {table} d JOIN cells c ON c.id = d.cell_id WHERE c.sweep_id = %s",
                (sweep_id,),
            ).fetchone()[0]  # type: ignore[index]
            for table in ("device_runs", "device_baselines")
        )
    wall = max(finished for _, finished, _ in rows).timestamp() - posted
    reused = sum(1 for _, _, reason in rows if reason and "reused the result of job" in reason)
    inside = statistics.median((finished - started).total_seconds() for started, finished, _ in rows)
    return wall, reused, inside, taken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="reruns of the stored sweep")
    parser.add_argument("--devices", action="store_true", help="device classes, and device reuse asked for")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="coverfarm-rerun-"))
    farm = Farm(folder, "rerun", {"COVERFARM_ENGINE": "worker.engine:analyze",
                                  "COVERFARM_WORKER_MEMORY_GB": MEMORY_GB})  # fmt: skip
    try:
        farm.serve()
        with httpx.Client(base_url=farm.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as api:
            first, _ = submit(api, args.devices)
            seed(farm, first, args.devices)
            # The first sweep's own device jobs (no runner here) are withdrawn: it is over.
            api.post(f"/api/sweeps/{first}/cancel").raise_for_status()
            cells = len(POLICIES) * len(BACKENDS)
            print(f"stored: {cells} results of sweep {first} under the real engine's keys")
            farm.workers(["real"])
            print(f"one real-engine worker ready; {load()}")
            for run in range(1, args.runs + 1):
                wall, reused, inside, taken = rerun(farm, api, args.devices)
                print(
                    f"rerun {run}: {wall:.2f} s for {cells} cells (target < 10 s), {reused} of {cells} "
                    f"reused, median job start to finish {1000 * inside:.0f} ms"
                    + (f", {taken} stored device runs and baselines taken" if args.devices else "")
                    + f"; {load()}"
                )
    finally:
        farm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
