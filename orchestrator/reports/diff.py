"""Compare two sweeps: cells whose numbers or states changed, blocker groups that appeared or vanished,
and device latency changes that count: beyond both runs' intervals and in two consecutive sweeps of the
same cell (``orchestrator.reports.latency``). ``latency_flags`` gives the same verdict per cell of one
sweep against the same cell's history, for the report and the grid."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session, object_session

from coverfarm import tracker
from coverfarm.result import ResultDocument
from orchestrator.devices import repository
from orchestrator.models import Cell, DeviceRun, Sweep
from orchestrator.reports import history
from orchestrator.reports.devices import Intervals
from orchestrator.reports.latency import counted
from orchestrator.reports.schemas import CellChange, GroupKey, LatencyChange, SweepDiff
from orchestrator.sweeps.cell_views import latest_document
from orchestrator.sweeps.public_views import cell_state

Runs = dict[int, dict[str, tuple[Cell, DeviceRun]]]  # cell id -> {device class: its cell and run}
# What pairs a cell of one side with a cell of the other: (policy, backend, stack), the stack None when
# each side chose one stack (so a cell pairs with the same policy and backend of the other stack).
Pair = tuple[str, str, str | None]


def _cell_values(cell: Cell, doc: ResultDocument | None) -> dict[str, str | None]:
    """What the diff compares for one cell: its state, the tracker's columns and the raw numbers
    behind the rounded ones, and each blocker group (nodes and multiply-adds)."""
    state, pending = cell_state(cell)
    values: dict[str, str | None] = {"state": state.value + (" (pending)" if pending else "")}
    if doc is None:
        return values
    for column, text in zip(tracker.columns(cell.backend)[1:], tracker.row(doc)[1:], strict=True):
        values[column] = text
    values["heavy_macs.total"] = str(doc.heavy_macs.total)
    values["heavy_macs.on_backend"] = str(doc.heavy_macs.on_backend)
    for blocker in doc.blockers:
        values[f"blocker {blocker.op}: {blocker.reason}"] = f"{blocker.count} nodes, {blocker.macs} MACs"
    return values


GroupId = tuple[str, str | None, str, str]  # (backend, stack, op, reason)


def _groups(docs: Iterable[tuple[ResultDocument, str | None]]) -> dict[GroupId, GroupKey]:
    """Blocker groups per (backend, op, reason) over (document, stack) pairs, kept apart per stack when
    the stack is given (None: the documents' stacks are not told apart)."""
    found: dict[GroupId, GroupKey] = {}
    for doc, stack in docs:
        for blocker in doc.blockers:
            key = (doc.backend, stack, blocker.op, blocker.reason)
            group = found.setdefault(
                key,
                GroupKey(
                    backend=doc.backend, op=blocker.op, reason=blocker.reason, policies=[], nodes=0, macs=0,
                    stack=stack,
                ),
            )  # fmt: skip
            group.policies.append(doc.policy)
            group.nodes += blocker.count
            group.macs += blocker.macs
    return found


def _sort(key: GroupId) -> tuple[str, str, str, str]:
    return (key[0], key[1] or "", key[2], key[3])


def group_changes(
    before: Iterable[tuple[ResultDocument, str | None]], after: Iterable[tuple[ResultDocument, str | None]]
) -> tuple[list[GroupKey], list[GroupKey]]:
    """(appeared, vanished): the blocker groups of ``after`` that ``before`` lacks, and the other way."""
    groups_a, groups_b = _groups(before), _groups(after)
    return (
        [groups_b[key] for key in sorted(groups_b.keys() - groups_a.keys(), key=_sort)],
        [groups_a[key] for key in sorted(groups_a.keys() - groups_b.keys(), key=_sort)],
    )


def _runs(session: Session | None, sweep: Sweep) -> Runs:
    if session is None:
        return {}
    by_id = {cell.id: cell for cell in sweep.cells}
    found: Runs = {}
    for run in repository.runs_of_cells(session, list(by_id)):
        if run.status == "ok":
            found.setdefault(run.cell_id, {})[run.device_class] = (by_id[run.cell_id], run)
    return found


def _previous(session: Session | None, runs: Runs, cell: Cell, device_class: str) -> history.Timed | None:
    """The same cell's sweep before this one (its options, class and stack), when there is one."""
    found = runs.get(cell.id, {}).get(device_class)
    if session is None or found is None:
        return None
    earlier = history.previous(session, *found)
    return history.timed(*earlier) if earlier is not None else None


def _side(sweep: Sweep, stack: str | None) -> dict[Pair, Cell]:
    """The sweep's cells by what pairs them: of ``stack`` alone when one is chosen."""
    if stack is not None:
        return {(cell.policy, cell.backend, None): cell for cell in sweep.cells if cell.stack == stack}
    return {(cell.policy, cell.backend, cell.stack): cell for cell in sweep.cells}


def _order(pair: Pair) -> tuple[str, str, str]:
    return (pair[0], pair[1], pair[2] or "")


def _label(pair: Pair, with_stack: bool) -> str:
    policy, backend, stack = pair
    return f"{policy}/{backend}" + (f" ({stack})" if with_stack and stack is not None else "")


def diff_sweeps(
    a: Sweep,
    b: Sweep,
    samples_a: Intervals | None = None,
    samples_b: Intervals | None = None,
    stack_a: str | None = None,
    stack_b: str | None = None,
) -> SweepDiff:
    """Sweep ``b`` against sweep ``a`` (which may be the same sweep). ``stack_a`` and ``stack_b`` choose
    one stack of each side, and the cells of the one pair with the same policy and backend of the other;
    one given alone chooses the same stack on both sides; with neither, cells pair by policy, backend
    and stack. ``samples_*``: cell id -> {device class: its latency interval}; the sweep before ``b``
    of each cell is looked up in ``b``'s session, so a latency change counts only once it holds in two
    consecutive sweeps of the same cell."""
    stack_a, stack_b = stack_a or stack_b, stack_b or stack_a
    session = object_session(b)
    runs_b = _runs(session, b)
    cells_a, cells_b = _side(a, stack_a), _side(b, stack_b)
    stacks = list(dict.fromkeys(pair[2] for pair in [*cells_a, *cells_b] if pair[2] is not None))
    with_stack = len(stacks) > 1
    docs_a = {key: latest_document(cell) for key, cell in cells_a.items()}
    docs_b = {key: latest_document(cell) for key, cell in cells_b.items()}
    changed = []
    for key in sorted(cells_a.keys() & cells_b.keys(), key=_order):
        cell_a, cell_b = cells_a[key], cells_b[key]
        before = _cell_values(cell_a, docs_a[key])
        after = _cell_values(cell_b, docs_b[key])
        changes = {
            name: [before.get(name), after.get(name)]
            for name in dict.fromkeys([*before, *after])
            if before.get(name) != after.get(name)
        }
        by_class_a = (samples_a or {}).get(cell_a.id, {})
        by_class_b = (samples_b or {}).get(cell_b.id, {})
        latency = []
        for device_class in sorted(by_class_a.keys() & by_class_b.keys()):
            timed_a = history.Timed(a.id, by_class_a[device_class])
            timed_b = history.Timed(b.id, by_class_b[device_class])
            before_b = _previous(session, runs_b, cell_b, device_class)
            latency.append(counted(device_class, timed_a, timed_b, before_b))
        # A change beyond the intervals in one sweep only is listed, not counted (flagged false).
        if changes or any(change.beyond_spread for change in latency):
            changed.append(
                CellChange(policy=key[0], backend=key[1], stack=key[2], changes=changes, latency=latency)
            )
    appeared, vanished = group_changes(
        ((doc, key[2]) for key, doc in docs_a.items() if doc is not None),
        ((doc, key[2]) for key, doc in docs_b.items() if doc is not None),
    )
    return SweepDiff(
        a=a.id,
        b=b.id,
        stack_a=stack_a,
        stack_b=stack_b,
        stacks=stacks,
        changed=changed,
        only_in_a=[_label(key, with_stack) for key in sorted(cells_a.keys() - cells_b.keys(), key=_order)],
        only_in_b=[_label(key, with_stack) for key in sorted(cells_b.keys() - cells_a.keys(), key=_order)],
        blockers_appeared=appeared,
        blockers_vanished=vanished,
    )


def latency_flags(session: Session, sweep: Sweep) -> dict[int, dict[str, LatencyChange]]:
    """Cell id -> {device class: the change of this sweep's run}, for every run that has two earlier
    sweeps of the same cell: this sweep and the one before it, both against the one before that (the
    reference). ``flagged`` marks a change that counts; ``regression`` one that is slower."""
    flags: dict[int, dict[str, LatencyChange]] = {}
    for cell_id, by_class in _runs(session, sweep).items():
        for device_class, (cell, run) in by_class.items():
            previous = history.previous(session, cell, run)
            reference = history.previous(session, *previous) if previous is not None else None
            if previous is None or reference is None:
                continue
            now, before, against = (
                history.timed(cell, run),
                history.timed(*previous),
                history.timed(*reference),
            )
            if now is None or against is None:
                continue
            change = counted(device_class, against, now, before)
            flags.setdefault(cell_id, {})[device_class] = change
    return flags


def _side_title(sweep_id: int, stack: str | None) -> str:
    return f"sweep {sweep_id}" + (f" ({stack})" if stack is not None else "")


def diff_markdown(diff: SweepDiff) -> str:
    """The diff as the CLI prints it. Cells and groups name their stack where the diff pairs more than
    one; a diff that chose a stack on each side names them in its first line."""
    with_stack = len(diff.stacks) > 1
    first = _side_title(diff.a, diff.stack_a)
    lines = [f"{first[0].upper()}{first[1:]} → {_side_title(diff.b, diff.stack_b)}"]
    if not (
        diff.changed or diff.only_in_a or diff.only_in_b or diff.blockers_appeared or diff.blockers_vanished
    ):
        return "\n".join([*lines, "", "No cell, number or blocker group changed."])
    if diff.changed:
        lines += ["", "Changed cells:"]
        for cell in diff.changed:
            where = f" ({cell.stack})" if with_stack and cell.stack is not None else ""
            lines.append(f"- {cell.policy} on {tracker.backend_title(cell.backend)}{where}")
            for name, (before, after) in cell.changes.items():
                lines.append(f"    {name}: {before or '-'} → {after or '-'}")
            for change in cell.latency:
                mark = "CHANGED" if change.flagged else "not counted yet" if change.beyond_spread else "same"
                lines.append(
                    f"    {change.device_class} latency {change.median_a_ms} → {change.median_b_ms} ms: "
                    f"{mark}, {change.why}"
                )
    for cells, sweep_id, stack in (
        (diff.only_in_a, diff.a, diff.stack_a),
        (diff.only_in_b, diff.b, diff.stack_b),
    ):
        if cells:
            lines += ["", f"Only in {_side_title(sweep_id, stack)}: {', '.join(cells)}"]
    for label, groups in (("Blocker groups that appeared", diff.blockers_appeared),
                          ("Blocker groups that vanished", diff.blockers_vanished)):  # fmt: skip
        if groups:
            lines += ["", f"{label}:"]
            lines += [
                f"- {tracker.backend_title(g.backend)}{f' ({g.stack})' if with_stack and g.stack else ''}: "
                f"{g.op} ({g.reason}) in {', '.join(g.policies)}"
                for g in groups
            ]
    return "\n".join(lines)
