"""A real sweep through the engine, stored in a farm database, and the tracker report it generates.

Runs act, diffusion, tdmpc and vqbet on vulkan (by default) with ``worker.engine.analyze`` -- trace,
lower, blocker groups with what-if program counts and verified repros -- stores each result document
through the farm's job service in an embedded SQLite farm under ``--home``, exactly as a CPU worker does,
and prints ``GET /api/sweeps/{id}/report.md`` for the backend, plus the seconds each cell took and how
many of its repros reproduce their reason. ``--report-only`` prints the report of the last sweep stored
under ``--home`` again, without running anything.

    python benchmarks/tracker_report.py --home /tmp/tracker-farm
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from coverfarm.result import Options
from coverfarm.settings import Settings
from orchestrator.db import make_engine, make_sessionmaker, take_outbox
from orchestrator.jobs import service as jobs
from orchestrator.migrate import upgrade
from orchestrator.models import Sweep
from orchestrator.reports.service import report
from orchestrator.sweeps import service as sweeps
from orchestrator.sweeps.schemas import SweepCreate
from worker.engine import analyze


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default="act,diffusion,tdmpc,vqbet")
    parser.add_argument("--backend", default="vulkan")
    parser.add_argument("--home", type=Path, required=True, help="the embedded farm's directory")
    parser.add_argument("--timeout", type=float, default=1800.0, help="each stage's bound in seconds")
    parser.add_argument("--frames", type=int, default=1, help="eager reference frames in the trace")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()

    policies = [name for name in args.policies.split(",") if name]
    settings = Settings(home=args.home, policies=policies, backends=[args.backend])
    settings.ensure_home()
    upgrade(settings)
    sessions = make_sessionmaker(make_engine(settings))
    with sessions() as session:
        if args.report_only:
            sweep_id = session.scalar(select(func.max(Sweep.id)))
            if sweep_id is None:
                print(f"no sweep stored under {args.home}", file=sys.stderr)
                return 2
        else:
            sweep_id = run_sweep(session, settings, policies, args)
        print(report(session, sweeps.get(session, sweep_id), args.backend))
    return 0


def run_sweep(session: Session, settings: Settings, policies: list[str], args: argparse.Namespace) -> int:
    body = SweepCreate(policies=policies, backends=[args.backend], timeout_s=args.timeout)
    sweep = sweeps.create(session, settings, body)
    take_outbox(session)  # this script is the worker: nothing goes to a broker
    session.commit()
    print(f"{'policy':12s} {'seconds':>8s}  blocker groups  repros ready  status", file=sys.stderr)
    for cell in sweep.cells:
        job = cell.jobs[0]
        started = jobs.start(session, job.id, "benchmark", settings)
        assert started is not None
        session.commit()
        begin = time.monotonic()
        options = Options(timeout_s=args.timeout, frames=args.frames)
        doc = analyze(
            cell.policy,
            cell.backend,
            options,
            settings.results_dir,
            progress=lambda message: print(f"  {message}", file=sys.stderr),
        )
        seconds = time.monotonic() - begin
        jobs.finish(session, job.id, started.attempt, doc, settings)
        session.commit()
        ready = sum(1 for b in doc.blockers if b.repro_ready)
        print(
            f"{cell.policy:12s} {seconds:8.1f}  {len(doc.blockers):14d}  {ready:12d}  {doc.status.value}",
            file=sys.stderr,
        )
    return sweep.id


if __name__ == "__main__":
    sys.exit(main())
