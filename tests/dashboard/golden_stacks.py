"""A stored sweep over two stacks (ExecuTorch 1.4.1 and 1.5.1), and a later sweep of one, for the golden
files of the stack-aware renderings (test_golden_stacks.py): the grid of one stack and of both side by
side, the report's bodies per stack, the diff of two stacks of one sweep and across sweeps, and the
progress view (page, plot, Markdown, JSON).

The sweep is submitted for the default stack, et-1.5.1, and the cells of the second stack, with their
lower jobs (routed to that stack's queue by jobs.sending.create), are added in the database beside them, as a
sweep that names two stacks stores them: so that one policy and backend can be a cell of one stack
only, which the API never makes. The sweep names et-1.5.1 first, so the progress view's release order
(oldest first) is its own, not the sweep's. No CPU worker runs: a cell left queued waits for a worker.

Per (policy, backend) from et-1.4.1 to et-1.5.1:
- act on Vulkan: more ops on the backend, and its convolution group fixed;
- act on XNNPACK: a group introduced; its et-1.4.1 device run ran on the 1.5.1 runtime (flagged);
- diffusion on Vulkan: partitioning out of time, then finished; on XNNPACK: queued, then finished;
- tdmpc on Vulkan: export failed, then finished, its gelu group fixed; on XNNPACK: wrong output on the
  device, then right;
- vqbet on Vulkan: its trace failed, then measured (its groups are compared with nothing); on
  XNNPACK: a cell of et-1.5.1 only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dashtools import export_slow, finished, partition_slow, store
from fastapi.testclient import TestClient
from golden_sweep import (
    CONV,
    ELU,
    GELU,
    PROBE,
    XNNPACK_CLASS,
    Farm,
    enrol,
    latency,
    make_healthy,
)
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.device_result import DeviceResult, RuntimeIdentity
from coverfarm.queues import QUEUE_LOWER
from coverfarm.result import Blocker, Bundle, ErrorInfo, ResultDocument, StageResult, StageStatus
from coverfarm.settings import Settings
from farmrun.celery_app import make_celery
from orchestrator.artifacts import repository as artifacts
from orchestrator.artifacts.store import Stored
from orchestrator.db import unit_of_work
from orchestrator.jobs import sending
from orchestrator.models import Cell, Job, Sweep

OLD, NEW = "et-1.4.1", "et-1.5.1"
VERSIONS = {
    OLD: {"executorch": "1.4.1", "torch": "2.13.0", "transformers": "4.57.1", "lerobot": "0.6.1"},
    NEW: {"executorch": "1.5.1", "torch": "2.14.1", "transformers": "4.57.1", "lerobot": "0.6.1"},
}
UPSAMPLE = ("aten.upsample_nearest2d.vec", "op args not supported")
POLICIES = ["act", "diffusion", "tdmpc", "vqbet"]


@dataclass
class Built:
    two_stacks: int  # the sweep of both stacks
    later: int  # a later sweep of et-1.5.1 alone
    cells: dict[tuple[int, str, str, str], int] = field(
        default_factory=dict
    )  # (sweep, policy, backend, stack)


def blocker(key: tuple[str, str], count: int, macs: int = 0) -> Blocker:
    return Blocker(op=key[0], reason=key[1], count=count, macs=macs)


def of(stack: str, doc: ResultDocument, bundle: bool = False) -> ResultDocument:
    """The document as the stack's worker records it: its versions, and a bundle of its own."""
    doc.versions = dict(VERSIONS[stack])
    if bundle:
        sha = hashlib.sha256(f"{doc.policy}/{doc.backend}/{stack}".encode()).hexdigest()
        doc.bundle = Bundle(sha256=sha, path=f"/farm/bundles/{sha}")
    else:
        doc.bundle = None
    return doc


def export_failed(policy: str, backend: str, ops: tuple[int, int], programs: int) -> ResultDocument:
    doc = finished(policy, backend, ops, (1000, 1000), programs, [blocker(ELU, 4), blocker(GELU, 2)])
    doc.export = StageResult(
        status=StageStatus.FAILED,
        seconds=3.0,
        error=ErrorInfo(stage="export", type="RuntimeError", message="Missing out variants: {'aten::gelu'}"),
    )
    return doc


def untraceable(policy: str, backend: str) -> ResultDocument:
    """The trace failed on this stack (its torch.export could not follow the policy's code)."""
    message = "Could not guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u0, 1))"
    error = ErrorInfo(stage="trace", type="GuardOnDataDependentSymNode", message=message)
    return ResultDocument(
        policy=policy, backend=backend, trace=StageResult(status=StageStatus.FAILED, error=error)
    )


def identity(runtime: str, export: str) -> dict[str, Any]:
    """What a runner records of the runtime that ran a bundle (gpu_runner.bundle_run.runtime_identity)."""
    differ = runtime != export
    note = f"runtime executorch {runtime} wheel; export executorch {export}"
    return RuntimeIdentity(
        kind="python", version=runtime, export_version=export, matches_export=not differ,
        note=note + (": runtime and export differ" if differ else ""),
    ).model_dump(mode="json")  # fmt: skip


def run_document(
    sha: str, median_ms: float, runtime: str, export: str, error: str | None = None
) -> dict[str, Any]:
    result = DeviceResult(
        bundle_sha256=sha, device_class=XNNPACK_CLASS, backend="xnnpack", probe=PROBE, runtime="python",
        latency=None if error else latency(median_ms), status="failed" if error else "ok", error=error,
        host_id="golden-host",
    ).model_dump(mode="json")  # fmt: skip
    result["runtime_identity"] = identity(runtime, export)
    return result


class StackFarm(Farm):
    """golden_sweep's farm, with cells told apart by their stack."""

    def __init__(self, client: TestClient, sessions: sessionmaker[Session], settings: Settings) -> None:
        super().__init__(client, sessions, settings)
        self.by_stack: dict[tuple[int, str, str, str], int] = {}

    def submit_stacks(self, policies: list[str], backends: list[str], **body: Any) -> int:
        sweep_id = self.submit(policies, backends, **body)
        for (sweep, policy, backend), cell_id in self.built.cells.items():
            if sweep == sweep_id:
                self.by_stack[(sweep, policy, backend, NEW)] = cell_id
        return sweep_id

    def add_stack(self, sweep_id: int, stack: str, cells: list[tuple[str, str]], stacks: list[str]) -> None:
        """Cells of ``stack`` beside the sweep's (their options the same), each with its queued lower job."""
        with unit_of_work(self.sessions, make_celery(self.settings)) as session:
            sweep = session.get(Sweep, sweep_id)
            assert sweep is not None
            options = {(cell.policy, cell.backend): cell.options for cell in sweep.cells}
            for policy, backend in cells:
                cell = Cell(
                    sweep=sweep, policy=policy, backend=backend, stack=stack, options=options[policy, backend]
                )
                session.add(cell)
                sending.create(session, cell, sending.STAGE_LOWER, QUEUE_LOWER, sweep.timeout_s)
                self.by_stack[(sweep_id, policy, backend, stack)] = cell.id
            sweep.stacks = stacks

    def stack_job(self, sweep: int, policy: str, backend: str, stack: str, stage: str = "lower") -> int:
        cell_id = self.by_stack[(sweep, policy, backend, stack)]
        with self.sessions() as session:
            return session.scalars(select(Job.id).where(Job.cell_id == cell_id, Job.stage == stage)).one()

    def put(self, sweep: int, stack: str, doc: ResultDocument, bundle: bool = False) -> None:
        """Store ``doc`` as the cell's result, with the stack's versions (``of``)."""
        doc = of(stack, doc, bundle)
        if doc.bundle is not None:
            with unit_of_work(self.sessions, make_celery(self.settings)) as session:
                stored = Stored(sha256=doc.bundle.sha256, path=Path(doc.bundle.path), size_bytes=1, files=1)
                artifacts.record(session, stored)
        store(self.sessions, self.settings, self.stack_job(sweep, doc.policy, doc.backend, stack), doc)

    def run_on(
        self, credential: dict[str, str], sweep: int, policy: str, stack: str, median_ms: float, runtime: str,
        error: str | None = None,
    ) -> None:  # fmt: skip
        """The xnnpack cell's bundle run, on a runtime of ExecuTorch ``runtime``."""
        job_id = self.stack_job(sweep, policy, "xnnpack", stack, f"run:{XNNPACK_CLASS}")
        export = VERSIONS[stack]["executorch"]
        self.report(
            credential,
            job_id,
            "result",
            lambda c: run_document(c["bundle_sha256"], median_ms, runtime, export, error),
        )


def build(client: TestClient, sessions: sessionmaker[Session], settings: Settings) -> Built:
    farm = StackFarm(client, sessions, settings)
    _, board = enrol(client, farm.admin, "board")
    make_healthy(client, board)
    two = farm.submit_stacks(POLICIES, ["vulkan", "xnnpack"], device_classes=[XNNPACK_CLASS], timeout_s=60)
    older = [(policy, backend) for policy in POLICIES for backend in ("vulkan", "xnnpack")]
    farm.add_stack(two, OLD, [key for key in older if key != ("vqbet", "xnnpack")], [NEW, OLD])

    # act: more ops on Vulkan, its convolution group fixed; a group introduced on XNNPACK.
    act_old = finished("act", "vulkan", (1540, 1553), (990_000, 1_000_000), 3, [blocker(CONV, 13, 10_000)])
    farm.put(two, OLD, act_old)
    farm.put(two, NEW, finished("act", "vulkan", (1549, 1553), (1_000_000, 1_000_000), 3, []))
    farm.put(two, OLD, finished("act", "xnnpack", (1200, 1210), (995, 1000), 15, []), bundle=True)
    act_new = finished("act", "xnnpack", (1196, 1210), (990, 1000), 13, [blocker(UPSAMPLE, 14, 10)])
    farm.put(two, NEW, act_new, bundle=True)
    # diffusion: partitioning out of time, then finished; on XNNPACK queued, then measured.
    slow = partition_slow("diffusion", "vulkan", (5477, 5895), (100, 100), 41)
    slow.blockers = [blocker(ELU, 8)]
    farm.put(two, OLD, slow)
    farm.put(two, NEW, finished("diffusion", "vulkan", (5800, 5895), (95, 100), 50, [blocker(ELU, 8)]))
    farm.put(two, NEW, finished("diffusion", "xnnpack", (600, 610), (995, 1000), 4), bundle=True)
    # tdmpc: export failed, then finished with its gelu group fixed; wrong on the device, then right.
    farm.put(two, OLD, export_failed("tdmpc", "vulkan", (5400, 5895), 140))
    farm.put(two, NEW, finished("tdmpc", "vulkan", (5477, 5895), (1000, 1000), 140, [blocker(ELU, 4)]))
    farm.put(two, OLD, finished("tdmpc", "xnnpack", (300, 310), (1000, 1000), 6, []), bundle=True)
    farm.put(two, NEW, finished("tdmpc", "xnnpack", (300, 310), (1000, 1000), 6, []), bundle=True)
    # vqbet: its trace failed on the older stack; measured on the newer one, on XNNPACK there alone.
    farm.put(two, OLD, untraceable("vqbet", "vulkan"))
    farm.put(two, NEW, finished("vqbet", "vulkan", (567, 594), (230, 1000), 22, [blocker(CONV, 6, 770)]))
    farm.put(two, NEW, finished("vqbet", "xnnpack", (180, 200), (990, 1000), 20), bundle=True)

    # The device side: act's older bundle ran on the newer runtime; tdmpc's was wrong, then right.
    farm.run_on(board, two, "act", OLD, 30.0, runtime="1.5.1")
    farm.run_on(board, two, "act", NEW, 25.0, runtime="1.5.1")
    farm.run_on(board, two, "tdmpc", OLD, 0.0, runtime="1.4.1", error="output wrong\nframe 3 differs by 0.5")
    farm.run_on(board, two, "tdmpc", NEW, 40.0, runtime="1.5.1")

    # A later sweep of the newer stack alone.
    later = farm.submit_stacks(["act", "tdmpc"], ["vulkan"], timeout_s=60)
    farm.put(later, NEW, finished("act", "vulkan", (1553, 1553), (1_000_000, 1_000_000), 2, []))
    farm.put(later, NEW, export_slow("tdmpc", "vulkan", (5477, 5895), (1000, 1000), 140))
    farm.fix_times()
    return Built(two, later, dict(farm.by_stack))
