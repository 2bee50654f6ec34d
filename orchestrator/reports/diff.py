"""Compare two sweeps: cells whose numbers or states changed, blocker groups that appeared or vanished,
and device latency changes that count: beyond both runs' spread and in two consecutive sweeps of the
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
from orchestrator.reports.devices import Samples
from orchestrator.reports.latency import counted
from orchestrator.reports.schemas import CellChange, GroupKey, LatencyChange, SweepDiff
from orchestrator.sweeps.cell_views import latest_document
from orchestrator.sweeps.service import cell_state

Runs = dict[tuple[str, str], dict[str, tuple[Cell, DeviceRun]]]


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


def _groups(docs: Iterable[ResultDocument]) -> dict[tuple[str, str, str], GroupKey]:
    found: dict[tuple[str, str, str], GroupKey] = {}
    for doc in docs:
        for blocker in doc.blockers:
            key = (doc.backend, blocker.op, blocker.reason)
            group = found.setdefault(
                key, GroupKey(backend=key[0], op=key[1], reason=key[2], policies=[], nodes=0, macs=0)
            )
            group.policies.append(doc.policy)
            group.nodes += blocker.count
            group.macs += blocker.macs
    return found


def _runs(session: Session | None, sweep: Sweep) -> Runs:
    if session is None:
        return {}
    by_id = {cell.id: cell for cell in sweep.cells}
    found: Runs = {}
    for run in repository.runs_of_cells(session, list(by_id)):
        if run.status == "ok":
            cell = by_id[run.cell_id]
            found.setdefault((cell.policy, cell.backend), {})[run.device_class] = (cell, run)
    return found


def _previous(
    session: Session | None, runs: Runs, key: tuple[str, str], device_class: str
) -> history.Timed | None:
    """The same cell's sweep before this one (its options, class and stack), when there is one."""
    found = runs.get(key, {}).get(device_class)
    if session is None or found is None:
        return None
    earlier = history.previous(session, *found)
    return history.timed(*earlier) if earlier is not None else None


def diff_sweeps(
    a: Sweep, b: Sweep, samples_a: Samples | None = None, samples_b: Samples | None = None
) -> SweepDiff:
    """``samples_*``: (policy, backend) -> {device class: samples}; the sweep before ``b`` of each cell is
    looked up in ``b``'s session, so a latency change counts only once it holds in two consecutive
    sweeps of the same cell."""
    session = object_session(b)
    runs_b = _runs(session, b)
    cells_a = {(cell.policy, cell.backend): cell for cell in a.cells}
    cells_b = {(cell.policy, cell.backend): cell for cell in b.cells}
    docs_a = {key: latest_document(cell) for key, cell in cells_a.items()}
    docs_b = {key: latest_document(cell) for key, cell in cells_b.items()}
    changed = []
    for key in sorted(cells_a.keys() & cells_b.keys()):
        before = _cell_values(cells_a[key], docs_a[key])
        after = _cell_values(cells_b[key], docs_b[key])
        changes = {
            name: [before.get(name), after.get(name)]
            for name in dict.fromkeys([*before, *after])
            if before.get(name) != after.get(name)
        }
        latency = []
        for device_class in sorted(
            (samples_a or {}).get(key, {}).keys() & (samples_b or {}).get(key, {}).keys()
        ):
            timed_a = history.Timed(a.id, (samples_a or {})[key][device_class])
            timed_b = history.Timed(b.id, (samples_b or {})[key][device_class])
            before_b = _previous(session, runs_b, key, device_class)
            latency.append(counted(device_class, timed_a, timed_b, before_b))
        # A change beyond the spread in one sweep only is listed, not counted (flagged false).
        if changes or any(change.beyond_spread for change in latency):
            changed.append(CellChange(policy=key[0], backend=key[1], changes=changes, latency=latency))
    groups_a = _groups(doc for doc in docs_a.values() if doc is not None)
    groups_b = _groups(doc for doc in docs_b.values() if doc is not None)
    return SweepDiff(
        a=a.id,
        b=b.id,
        changed=changed,
        only_in_a=[f"{p}/{k}" for p, k in sorted(cells_a.keys() - cells_b.keys())],
        only_in_b=[f"{p}/{k}" for p, k in sorted(cells_b.keys() - cells_a.keys())],
        blockers_appeared=[groups_b[k] for k in sorted(groups_b.keys() - groups_a.keys())],
        blockers_vanished=[groups_a[k] for k in sorted(groups_a.keys() - groups_b.keys())],
    )


def latency_flags(session: Session, sweep: Sweep) -> dict[tuple[str, str], dict[str, LatencyChange]]:
    """(policy, backend) -> {device class: the change of this sweep's run}, for every run that has two
    earlier sweeps of the same cell: this sweep and the one before it, both against the one before
    that (the reference). ``flagged`` marks a change that counts; ``regression`` one that is slower."""
    flags: dict[tuple[str, str], dict[str, LatencyChange]] = {}
    for key, by_class in _runs(session, sweep).items():
        for device_class, (cell, run) in by_class.items():
            previous = history.previous(session, cell, run)
            reference = history.previous(session, *previous) if previous is not None else None
            if previous is None or reference is None:
                continue
            change = counted(
                device_class, history.timed(*reference), history.timed(cell, run), history.timed(*previous)
            )
            flags.setdefault(key, {})[device_class] = change
    return flags


def diff_markdown(diff: SweepDiff) -> str:
    """The diff as the CLI prints it."""
    lines = [f"Sweep {diff.a} → sweep {diff.b}"]
    if not (
        diff.changed or diff.only_in_a or diff.only_in_b or diff.blockers_appeared or diff.blockers_vanished
    ):
        return "\n".join([*lines, "", "No cell, number or blocker group changed."])
    if diff.changed:
        lines += ["", "Changed cells:"]
        for cell in diff.changed:
            lines.append(f"- {cell.policy} on {tracker.backend_title(cell.backend)}")
            for name, (before, after) in cell.changes.items():
                lines.append(f"    {name}: {before or '-'} → {after or '-'}")
            for change in cell.latency:
                mark = "CHANGED" if change.flagged else "not counted yet" if change.beyond_spread else "same"
                lines.append(
                    f"    {change.device_class} latency {change.median_a_ms} → {change.median_b_ms} ms: "
                    f"{mark}, {change.why}"
                )
    for label, cells in (("Only in sweep", diff.only_in_a), ("Only in sweep", diff.only_in_b)):
        if cells:
            which = diff.a if cells is diff.only_in_a else diff.b
            lines += ["", f"{label} {which}: {', '.join(cells)}"]
    for label, groups in (("Blocker groups that appeared", diff.blockers_appeared),
                          ("Blocker groups that vanished", diff.blockers_vanished)):  # fmt: skip
        if groups:
            lines += ["", f"{label}:"]
            lines += [
                f"- {tracker.backend_title(g.backend)}: {g.op} ({g.reason}) in {', '.join(g.policies)}"
                for g in groups
            ]
    return "\n".join(lines)
