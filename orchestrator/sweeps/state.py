"""A sweep's state, defined once, from its cells (a cell's, from its CPU jobs: ``jobs.cell_state``)."""

from __future__ import annotations

from typing import Literal

SweepState = Literal["running", "done", "cancelled"]


def sweep_state(cancelled: bool, anything_pending: bool) -> SweepState:
    """A sweep runs while one of its cells or device jobs is queued or running, unless it was cancelled."""
    if cancelled:
        return "cancelled"
    return "running" if anything_pending else "done"
