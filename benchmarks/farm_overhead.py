"""Measure the farm's own overhead per job: sweeps of STAND-IN jobs through real workers.

The stand-in engine (tests/farm/standin_engine.py: no torch, no ExecuTorch) sleeps --standin-seconds per
cell, so what a sweep takes beyond that is the farm's: the broker's hand-over, the job's start, its
heartbeats and the storing of its result, on the worker and in the database. For each number of
workers (--workers, 1, 2, 4 and 8 by default) a sweep of --jobs-per-worker jobs per worker runs through
that many ``coverfarm worker`` processes, and the benchmark prints:

- wall: from the sweep's POST to its last job's finish (the database's own stamps);
- overhead per job: (wall - jobs per worker x stand-in seconds) / jobs per worker, the time each job
  adds to a worker's timeline beyond its engine's;
- where it goes: the median gap on a worker from one job's finish to its next job's start, the median
  of each job's start-to-finish beyond the stand-in's seconds, and the delay to the first job's start.

With --baseline CHECKOUT (another checkout of coverfarm, e.g. main's) a second farm runs that code, and
each number of workers runs on both in turn, so that the machine's load weighs on both alike. The
machine's load average is printed with each row.

    python benchmarks/farm_overhead.py [--workers 1,2,4,8] [--jobs-per-worker 12] [--baseline /work/main]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import psycopg
from farmbench import TOKEN, Farm, load

BACKENDS = ["vulkan", "xnnpack"]


@dataclass(frozen=True)
class Run:
    workers: int
    jobs: int
    wall_s: float
    overhead_ms: float  # per job, on a worker's timeline
    gap_ms: float  # median, a worker's finish to its next start
    inside_ms: float  # median, a job's start to finish beyond the stand-in's seconds
    first_ms: float  # the POST to the first start
    post_ms: float  # the POST itself (the sweep made, its jobs sent)


def stamps(farm: Farm, sweep_id: int) -> list[tuple[str, datetime, datetime]]:
    """(worker, started, finished) of each of the sweep's jobs, read with SQL alone (any schema)."""
    url = farm.env["COVERFARM_DATABASE_URL"]
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT j.worker, j.started_at, j.finished_at FROM jobs j JOIN cells c ON c.id = j.cell_id"
            " WHERE c.sweep_id = %s AND j.status = 'ok'",
            (sweep_id,),
        ).fetchall()
    return [(worker, started, finished) for worker, started, finished in rows]


def run(farm: Farm, workers: int, per_worker: int, standin_s: float) -> Run:
    names = [f"{farm.name}{workers}-{i}" for i in range(workers)]
    farm.workers(names, STANDIN_SECONDS=str(standin_s))
    jobs = per_worker * workers
    policies = farm.settings.policies[: jobs // len(BACKENDS)]
    body = {"policies": policies, "backends": BACKENDS, "timeout_s": 30}
    try:
        with httpx.Client(base_url=farm.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as api:
            posted = time.time()
            response = api.post("/api/sweeps", json=body)
            answered = time.time()
            response.raise_for_status()
            sweep_id = response.json()["id"]
            deadline = time.monotonic() + 60 + 10 * jobs * standin_s
            while (summary := api.get(f"/api/sweeps/{sweep_id}/summary").json())["state"] != "done":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sweep {sweep_id} did not finish: {summary['counts']}")
                time.sleep(0.2)
        if summary["counts"] != {"ok": jobs}:
            raise RuntimeError(f"sweep {sweep_id} did not finish ok: {summary['counts']}")
    finally:
        farm.stop_workers()
    rows = stamps(farm, sweep_id)
    wall = max(finished for _, _, finished in rows).timestamp() - posted
    by_worker: dict[str, list[tuple[datetime, datetime]]] = {}
    for worker, started, finished in rows:
        by_worker.setdefault(worker, []).append((started, finished))
    gaps = [
        (after[0] - before[1]).total_seconds()
        for runs in by_worker.values()
        for before, after in zip(sorted(runs), sorted(runs)[1:], strict=False)
    ]
    inside = [(finished - started).total_seconds() - standin_s for _, started, finished in rows]
    first = min(started for _, started, _ in rows).timestamp() - posted
    return Run(
        workers=workers,
        jobs=jobs,
        wall_s=wall,
        overhead_ms=1000 * (wall - per_worker * standin_s) / per_worker,
        gap_ms=1000 * statistics.median(gaps) if gaps else float("nan"),
        inside_ms=1000 * statistics.median(inside),
        first_ms=1000 * first,
        post_ms=1000 * (answered - posted),
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", default="1,2,4,8", help="comma-separated numbers of workers")
    parser.add_argument("--jobs-per-worker", type=int, default=12)
    parser.add_argument("--standin-seconds", type=float, default=1.0)
    parser.add_argument("--baseline", type=Path, help="another checkout to measure side by side")
    parser.add_argument("--keep-logs", type=Path, help="write the farms' logs here (an empty folder)")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]

    jobs = max(counts) * args.jobs_per_worker
    policies = ",".join(f"p{i:03d}" for i in range((jobs + 1) // len(BACKENDS)))
    env = {
        "COVERFARM_POLICIES": policies,
        "COVERFARM_BACKENDS": ",".join(BACKENDS),
        # The farm's own heartbeats (every 15 s, silent after 90 s), not the quick ones of the other
        # benchmarks: a beat every second would fall at the end of each one-second job and be waited for.
        "COVERFARM_HEARTBEAT_INTERVAL_S": "15",
        "COVERFARM_HEARTBEAT_TIMEOUT_S": "90",
    }
    with tempfile.TemporaryDirectory(prefix="coverfarm-bench-") as folder:
        if args.keep_logs is not None:
            folder = str(args.keep_logs)
        farms: list[Farm] = []
        try:
            farms.append(Farm(Path(folder), "after", env))
            if args.baseline is not None:
                farms.append(Farm(Path(folder), "before", env, root=args.baseline))
            for farm in farms:
                farm.serve()
            labels = ["this checkout", f"baseline {args.baseline}"]
            print(f"Overhead per job, STAND-IN engine sleeping {args.standin_seconds:g} s per job, "
                  f"{args.jobs_per_worker} jobs per worker ({load()})")  # fmt: skip
            print(f"   {'code':<28} {'workers':>7} {'jobs':>5} {'wall s':>8} {'overhead/job ms':>16} "
                  f"{'gap ms':>7} {'in-job ms':>9} {'first ms':>8} {'POST ms':>7}  load")  # fmt: skip
            for workers in counts:
                for label, farm in zip(labels, farms, strict=False):
                    result = run(farm, workers, args.jobs_per_worker, args.standin_seconds)
                    averages = load().split(" on ")[0].removeprefix("load average ")
                    print(f"   {label:<28} {workers:>7} {result.jobs:>5} {result.wall_s:>8.2f} "
                          f"{result.overhead_ms:>16.1f} {result.gap_ms:>7.1f} {result.inside_ms:>9.1f} "
                          f"{result.first_ms:>8.1f} {result.post_ms:>7.1f}  {averages}")  # fmt: skip
        finally:
            for farm in reversed(farms):
                farm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
