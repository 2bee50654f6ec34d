"""The result document a cell's reports read: its latest stored one."""

from __future__ import annotations

from coverfarm.result import ResultDocument
from orchestrator.models import Cell, Sweep


def latest_document(cell: Cell) -> ResultDocument | None:
    for job in reversed(cell.jobs):
        if job.result is not None:
            return ResultDocument.model_validate(job.result.document)
    return None


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
