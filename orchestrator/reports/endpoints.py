"""HTTP for reports: a sweep's tracker body (report.md), its blocker groups with what-if estimates, the
diff of two sweeps (or two stacks), and a sweep's progress over its stacks. The tracker body is one of a
sweep's views and is listed with them (its own router, ``tracker_router``, under the sweeps' tag)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import PlainTextResponse

from orchestrator.deps import SnapshotDep
from orchestrator.errors import MARKDOWN, responses
from orchestrator.inputs import Id, Name
from orchestrator.reports import progress, service
from orchestrator.reports.progress_markdown import progress_markdown
from orchestrator.reports.schemas import BlockersReport, ProgressReport, SweepDiff
from orchestrator.sweeps import service as sweeps

router = APIRouter(tags=["reports"])
# The tracker body, listed in the schema with the sweep's other views; the app includes it right after
# the sweeps' router.
tracker_router = APIRouter(tags=["sweeps"])

BackendQuery = Annotated[Name | None, Query(description="only this backend's cells")]
StackQuery = Annotated[Name | None, Query(description="only this stack's cells")]
StackA = Annotated[Name | None, Query(description="sweep a's stack (alone: the same stack of both sweeps)")]
StackB = Annotated[Name | None, Query(description="sweep b's stack (alone: the same stack of both sweeps)")]


@tracker_router.get(
    "/sweeps/{sweep_id:int}/report.md",
    response_class=Response,
    responses={**responses(404), **MARKDOWN},
)
def sweep_report(
    sweep_id: Id,
    session: SnapshotDep,
    backend: Annotated[
        list[Name] | None,
        Query(
            description="only these backends' tracker bodies, in this order (repeat it: "
            "backend=vulkan&backend=vgf); each must be one of the sweep's"
        ),
    ] = None,
    stack: Annotated[Name | None, Query(description="only this stack's tracker bodies")] = None,
) -> PlainTextResponse:
    """The tracker body of each backend, the body of that backend's tracker issue: Coverage with legend,
    Notes, Built on, Known issues, repros; of each backend and stack when the sweep has several stacks."""
    markdown = service.report(session, sweeps.get(session, sweep_id), backend, stack)
    return PlainTextResponse(markdown, media_type="text/markdown; charset=utf-8")


@router.get("/sweeps/{sweep_id:int}/blockers", responses=responses(404))
def sweep_blockers(
    sweep_id: Id, session: SnapshotDep, backend: BackendQuery = None, stack: StackQuery = None
) -> BlockersReport:
    """Blocker groups per (backend, op, reason) over the sweep's stored results, heaviest first, with
    the policies each hits and what-if estimates per group and per reason."""
    return service.blockers(sweeps.get(session, sweep_id), backend, stack)


@router.get(
    "/sweeps/{a:int}/diff/{b:int}.md",
    response_class=Response,
    responses={**responses(404), **MARKDOWN},
)
def sweep_diff_markdown(
    a: Id, b: Id, session: SnapshotDep, stack_a: StackA = None, stack_b: StackB = None
) -> PlainTextResponse:
    diff = service.diff(session, sweeps.get(session, a), sweeps.get(session, b), stack_a, stack_b)
    return PlainTextResponse(service.diff_text(diff) + "\n", media_type="text/markdown; charset=utf-8")


# After the .md route: Starlette tries routes in order and {b} would match "3.md".
@router.get("/sweeps/{a:int}/diff/{b:int}", responses=responses(404))
def sweep_diff(
    a: Id, b: Id, session: SnapshotDep, stack_a: StackA = None, stack_b: StackB = None
) -> SweepDiff:
    """Cells of sweep ``b`` whose numbers or states differ from sweep ``a``, blocker groups that
    appeared or vanished, and device latency changes beyond the runs' own intervals. ``stack_a`` and
    ``stack_b`` choose one stack of each sweep (``a`` and ``b`` may be the same sweep); without them,
    cells pair with the same stack's."""
    return service.diff(session, sweeps.get(session, a), sweeps.get(session, b), stack_a, stack_b)


@router.get("/sweeps/{sweep_id:int}/progress", responses=responses(404))
def sweep_progress(sweep_id: Id, session: SnapshotDep) -> ProgressReport:
    """Per policy and backend, each stack's tracker row (oldest ExecuTorch release first) and its
    change from one stack to the next; per backend, the blocker groups each release fixed and
    introduced."""
    return progress.public(progress.progress(session, sweeps.get(session, sweep_id)))


@router.get(
    "/sweeps/{sweep_id:int}/progress.md",
    response_class=Response,
    responses={**responses(404), **MARKDOWN},
)
def sweep_progress_markdown(sweep_id: Id, session: SnapshotDep) -> PlainTextResponse:
    text = progress_markdown(progress.progress(session, sweeps.get(session, sweep_id)))
    return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")
