"""Derived state, defined once: a cell's state from its CPU jobs, and a sweep's from its cells.

A cell's state is a function of two facts about its CPU jobs (device jobs have their own columns): the
latest one's status (none yet: queued) and whether one of them ended slow. ``cell_state`` is that rule.
``cell_state_sql`` is the same rule for the database, which counts ten thousand cells without loading
one: a CASE with a branch for every possible pair of facts, each branch's answer computed by
``cell_state`` itself, so the two cannot disagree.
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, case, literal

from orchestrator.models import PENDING_STATUSES, JobStatus

SweepState = Literal["running", "done", "cancelled"]


def cell_state(latest: JobStatus | None, any_slow: bool) -> tuple[JobStatus, bool]:
    """(state, pending): the latest CPU job's status, except that a pending longer re-run of a slow
    result keeps "slow" (its numbers stand while it runs); no CPU job yet is queued."""
    status = latest if latest is not None else JobStatus.QUEUED
    pending = status in PENDING_STATUSES
    return (JobStatus.SLOW if pending and any_slow else status), pending


def cell_state_sql(
    latest: ColumnElement[Any], any_slow: ColumnElement[Any]
) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """(state, pending) as SQL over the latest CPU job's status column (NULL: none) and a 0/1 column
    saying whether one ended slow: ``cell_state`` tabulated over every input."""
    states, pendings = [], []
    for status in [None, *JobStatus]:
        for slow in (False, True):
            state, pending = cell_state(status, slow)
            when = and_(latest.is_(None) if status is None else latest == status.value, any_slow == int(slow))
            states.append((when, literal(state.value)))
            pendings.append((when, literal(pending)))
    return case(*states), case(*pendings)


def sweep_state(cancelled: bool, anything_pending: bool) -> SweepState:
    """A sweep runs while one of its cells or device jobs is queued or running, unless it was cancelled."""
    if cancelled:
        return "cancelled"
    return "running" if anything_pending else "done"
