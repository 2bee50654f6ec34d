"""Sweep summaries counted in the database, never loading a cell's jobs or documents: a page of them
(``list_``), one (``summary``), and a big sweep's overview with its per-backend columns (``overview``),
from its cells' kept states."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from orchestrator.errors import NotFound
from orchestrator.models import Sweep
from orchestrator.sweeps import repository
from orchestrator.sweeps.schemas import BackendColumn, SweepOptions, SweepOverview, SweepSummary
from orchestrator.sweeps.state import sweep_state


def list_(session: Session, limit: int, offset: int) -> list[SweepSummary]:
    """A page of sweep summaries, newest first.

    Counted in the database: a summary never loads a cell's jobs or result documents, so the list
    costs the same for a sweep of ten cells and one of ten thousand.
    """
    sweeps = repository.list_sweeps(session, limit, offset)
    return _light_summaries(session, sweeps)


def count(session: Session) -> int:
    return repository.count_sweeps(session)


def summary(session: Session, sweep_id: int) -> SweepSummary:
    """One sweep's summary, counted in the database like the list's (no cell loaded)."""
    sweep = repository.get_sweep_row(session, sweep_id)
    if sweep is None:
        raise NotFound("sweep", sweep_id)
    return _light_summaries(session, [sweep])[0]


def _light_summaries(session: Session, sweeps: Sequence[Sweep]) -> list[SweepSummary]:
    tallies = repository.tally(session, [sweep.id for sweep in sweeps])
    return [_light_summary(sweep, tallies[sweep.id]) for sweep in sweeps]


def _light_summary(sweep: Sweep, tally: repository.SweepTally) -> SweepSummary:
    return SweepSummary(
        id=sweep.id,
        created_at=sweep.created_at,
        options=SweepOptions.model_validate(
            {
                "constant_prop": sweep.constant_prop,
                "lowering": sweep.lowering,
                "weights": sweep.weights,
                "force_fp16": sweep.force_fp16,
                "etrecord": sweep.etrecord,
                "workarounds": list(sweep.workarounds),
            }
        ),
        timeout_s=sweep.timeout_s,
        policies=list(sweep.policies),
        backends=list(sweep.backends),
        stacks=list(sweep.stacks),
        device_classes=list(sweep.device_classes),
        fresh=sweep.fresh,
        reuse_unfinished=sweep.reuse_unfinished,
        reuse_device=sweep.reuse_device,
        state=sweep_state(sweep.cancelled_at is not None, tally.pending > 0),
        counts=dict(sorted(tally.counts.items())),
        cancelled_at=sweep.cancelled_at,
    )


def _whole(value: object) -> int | None:
    # Postgres sums a bigint column as numeric (a Decimal).
    return None if value is None else int(value)  # type: ignore[call-overload]


def _share(part: int | None, whole: int | None) -> float | None:
    return part / whole if part is not None and whole else None


def _add(total: int | None, value: object) -> int | None:
    """A sum over groups, None while no group had one (no measured cell counted it)."""
    whole = _whole(value)
    return total if whole is None else (total or 0) + whole


def overview(session: Session, sweep_id: int) -> SweepOverview:
    """The sweep's summary and per-backend columns, counted in the database from its cells' kept
    states: no cell, job or document is loaded, and the cells are counted once for both."""
    sweep = repository.get_sweep_row(session, sweep_id)
    if sweep is None:
        raise NotFound("sweep", sweep_id)
    tally = repository.SweepTally(pending=repository.device_pending(session, [sweep_id]).get(sweep_id, 0))
    # Per backend: cells, measured, exported (counts), then the sums of ops and MACs (None: none counted).
    sums: dict[str, list[int | None]] = {}
    for backend, state, pending, *counted in repository.cell_tally(session, sweep_id):
        tally.counts[state.value] = tally.counts.get(state.value, 0) + counted[0]
        tally.pending += counted[0] if pending else 0
        column = sums.setdefault(backend, [0, 0, 0, None, None, None, None])
        for index, value in enumerate(counted):
            column[index] = _add(column[index], value)
    columns = []
    order = {name: index for index, name in enumerate(sweep.backends)}  # the sweep's order (cell order)
    for backend in sorted(sums, key=lambda name: (order.get(name, len(order)), name)):
        cells, measured, exported, ops_on, ops, macs_on, macs = sums[backend]
        columns.append(
            BackendColumn(
                backend=backend,
                cells=cells or 0,
                measured=measured or 0,
                exported=exported or 0,
                ops_on_backend=ops_on,
                ops_total=ops,
                macs_on_backend=macs_on,
                macs_total=macs,
                ops_share=_share(ops_on, ops),
                macs_share=_share(macs_on, macs),
            )
        )
    return SweepOverview(**_light_summary(sweep, tally).model_dump(), columns=columns)
