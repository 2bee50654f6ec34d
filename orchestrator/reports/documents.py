"""The result documents a sweep's reports read: each cell's latest stored one."""

from __future__ import annotations

from coverfarm.result import ResultDocument
from orchestrator.models import Sweep
from orchestrator.sweeps.cell_views import latest_document


def sweep_documents(
    sweep: Sweep, backend: str | None = None, stack: str | None = None
) -> list[ResultDocument]:
    """The latest document of every cell that has one (of one backend and one stack, when given), in
    cell order."""
    docs = []
    for cell in sweep.cells:
        if backend not in (None, cell.backend) or stack not in (None, cell.stack):
            continue
        doc = latest_document(cell)
        if doc is not None:
            docs.append(doc)
    return docs
