"""Helpers for the grid's tests (a plain module: test files must not import conftest).

Result documents here are built with coverfarm.result's models and stored through the jobs service,
the same calls a worker makes (``jobs.start`` then ``jobs.finish``), with this test process as the
worker, and what they send (a slow cell's re-run) goes to the tests' real broker.
"""

from __future__ import annotations

from collections.abc import Callable
from html.parser import HTMLParser

from sqlalchemy.orm import Session

from coverfarm.result import (
    Blocker,
    Bundle,
    ErrorInfo,
    HeavyMacs,
    Ops,
    ProgramResult,
    Programs,
    ResultDocument,
    StageResult,
    StageStatus,
    TraceInfo,
)
from coverfarm.routes import worker_queues
from coverfarm.settings import Settings
from coverfarm.stacks import DEFAULT_STACK
from farmrun.celery_app import make_celery
from orchestrator.db import unit_of_work
from orchestrator.jobs import service as jobs
from orchestrator.workers import service as workers

OK = StageResult(status=StageStatus.OK, seconds=1.5)
TEST_WORKER = "dashboard-test@here"


def finished(
    policy: str,
    backend: str,
    ops: tuple[int, int] = (90, 100),
    macs: tuple[int, int] = (800, 1000),
    programs: int = 3,
    blockers: list[Blocker] | None = None,
) -> ResultDocument:
    """A document whose partitioning and export finished (ops and MACs as (on backend, total))."""
    if blockers is None:
        blockers = [Blocker(op="aten.elu.default", reason="no operator implementation", count=3, macs=0)]
    return ResultDocument(
        policy=policy,
        backend=backend,
        trace=OK,
        partition=OK,
        export=OK,
        ops=Ops(total=ops[1], on_backend=ops[0], supported=ops[0]),
        heavy_macs=HeavyMacs(total=macs[1], on_backend=macs[0], supported=macs[0]),
        programs=Programs(count=programs, connected_groups=programs, delegates=programs),
        blockers=blockers,
        trace_info=TraceInfo(seed=0, substitutions=[]),
        program_list=[
            ProgramResult(
                name="observation",
                runs_per_chunk=1,
                ops=ops[1] // 4,
                ops_on_backend=ops[0] // 4,
                macs=macs[1] // 10,
                macs_on_backend=macs[0] // 10,
                partitions=1,
                connected_groups=1,
                delegates=1,
                pt2=f"/farm/traces/{policy}/observation.pt2",
                pte=f"/farm/out/{policy}-{backend}/observation.pte",
            ),
            ProgramResult(
                name="denoise_step",
                runs_per_chunk=10,
                ops=ops[1] - ops[1] // 4,
                ops_on_backend=ops[0] - ops[0] // 4,
                macs=macs[1] // 11,
                partitions=programs - 1,
                pt2=f"/farm/traces/{policy}/denoise_step.pt2",
                pte=f"/farm/out/{policy}-{backend}/denoise_step.pte",
            ),
        ],
        timings={"trace_s": 12.5, "partition.observation_s": 3.25, "export.observation_s": 4.0},
        versions={"executorch": "1.5.1", "torch": "2.15.0"},
        bundle=Bundle(sha256="ab" * 32, path=f"/farm/bundles/{'ab' * 32}"),
    )


Pair = tuple[int, int]  # (on backend, total)


def partition_slow(policy: str, backend: str, ops: Pair, macs: Pair, groups: int) -> ResultDocument:
    """Partitioning ran out of its bound: the support check's bounds and the connected groups only."""
    slow = StageResult(
        status=StageStatus.SLOW,
        seconds=900.0,
        error=ErrorInfo(stage="partition", type="StageTimeout", message="partition exceeded 900 s"),
    )
    return ResultDocument(
        policy=policy,
        backend=backend,
        trace=OK,
        partition=slow,
        ops=Ops(total=ops[1], supported=ops[0]),
        heavy_macs=HeavyMacs(total=macs[1], supported=macs[0]),
        programs=Programs(connected_groups=groups),
    )


def export_slow(policy: str, backend: str, ops: Pair, macs: Pair, programs: int) -> ResultDocument:
    doc = finished(policy, backend, ops, macs, programs)
    doc.export = StageResult(
        status=StageStatus.SLOW,
        seconds=900.0,
        error=ErrorInfo(stage="export", type="StageTimeout", message="export exceeded 900 s"),
    )
    doc.bundle = None
    return doc


def export_failed(policy: str, backend: str) -> ResultDocument:
    failed = StageResult(
        status=StageStatus.FAILED,
        seconds=2.0,
        error=ErrorInfo(
            stage="trace",
            type="KeyError",
            message="model.paligemma_with_expert.paligemma.model.vision_tower.embeddings.patch_embedding.weight",
            traceback='Traceback (most recent call last):\n  File "trace.py", line 1\nKeyError: ...',
        ),
    )
    return ResultDocument(policy=policy, backend=backend, trace=failed)


def start_job(session: Session, settings: Settings, job_id: int) -> int:
    started = jobs.start(session, job_id, TEST_WORKER, settings)
    assert started is not None, f"job {job_id} could not be started"
    return started.attempt


def worker_online(sessions: Callable[[], Session], settings: Settings) -> None:
    """``TEST_WORKER`` online on the default stack's lower queues, as a farm has one: its queued cells
    wait for their turn, not for a worker ("no worker")."""
    with unit_of_work(sessions, make_celery(settings)) as session:
        queues = worker_queues(DEFAULT_STACK, 24.0)
        workers.register(session, TEST_WORKER, queues, DEFAULT_STACK, None, 24.0)


def store(sessions: Callable[[], Session], settings: Settings, job_id: int, doc: ResultDocument) -> None:
    """Start the job and store ``doc`` as its result, committed like a worker's two transactions."""
    with unit_of_work(sessions, make_celery(settings)) as session:
        attempt = start_job(session, settings, job_id)
    with unit_of_work(sessions, make_celery(settings)) as session:
        jobs.finish(session, job_id, attempt, doc, settings)


def start(sessions: Callable[[], Session], settings: Settings, job_id: int) -> None:
    with unit_of_work(sessions, make_celery(settings)) as session:
        start_job(session, settings, job_id)


def fail(sessions: Callable[[], Session], settings: Settings, job_id: int, error: str) -> None:
    """The engine raised: no document, the worker's traceback is stored on the job."""
    with unit_of_work(sessions, make_celery(settings)) as session:
        attempt = start_job(session, settings, job_id)
    with unit_of_work(sessions, make_celery(settings)) as session:
        jobs.fail(session, job_id, attempt, error)


class _Cells(HTMLParser):
    """Texts of the grid's columns per cell id (``<td data-cell=...>``), in order."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[int, list[str]] = {}
        self.attrs: dict[int, list[dict[str, str | None]]] = {}
        self._current: int | None = None
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "td" and values.get("data-cell"):
            self._current = int(values["data-cell"] or 0)
            self.cells.setdefault(self._current, []).append("")
            self.attrs.setdefault(self._current, []).append(values)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._current = None

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            texts = self.cells[self._current]
            texts[-1] = " ".join(f"{texts[-1]} {data}".split())


def grid_cells(html: str) -> dict[int, list[str]]:
    parser = _Cells()
    parser.feed(html)
    return parser.cells


def grid_cell_attrs(html: str) -> dict[int, list[dict[str, str | None]]]:
    parser = _Cells()
    parser.feed(html)
    return parser.attrs


def text_of(html: str) -> str:
    """The visible text of a page, whitespace collapsed (scripts and styles left out)."""

    class _Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.parts: list[str] = []
            self._skip = 0

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self._skip += tag in ("script", "style")

        def handle_endtag(self, tag: str) -> None:
            self._skip -= tag in ("script", "style")

        def handle_data(self, data: str) -> None:
            if not self._skip:
                self.parts.append(data)

    parser = _Text()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())
