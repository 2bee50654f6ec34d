"""The result documents a sweep's reports read: each cell's latest stored one."""

from __future__ import annotations

from coverfarm.result import ResultDocument
from orchestrator.models import Sweep
from orchestrator.sweeps.cell_views import latest_document


def sweep_documents(sweep: Sweep, backend: str | None = None) -> list[ResultDocument]:
    """The latest document of every cell that has one (of one backend, when given), in cell order."""
    docs = []
    for cell in sweep.cells:
        if backend is not None and cell.backend != backend:
            continue
        doc = latest_document(cell)
        if doc is not None:
            docs.append(doc)
    return docs
