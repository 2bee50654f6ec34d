"""The tracker report's Coverage section of one backend (``_coverage``): the table of its cells' views
with their device columns, the causes below it, and the legend; which device classes get a column
(``device_classes_shown``) and which device runs are not on their stack's release (``off_release_runs``)."""

from __future__ import annotations

from coverfarm import backends, tracker
from coverfarm.cell_view import CellView, Kind, OffRelease
from coverfarm.tracker import PENDING, backend_title, columns, markdown_table
from orchestrator.models import Cell

Views = dict[int, CellView]  # cell id -> its view


def device_classes_shown(rendered: list[CellView]) -> list[str]:
    """The device classes that get a column beside these cells: not those whose every cell here is "-"
    (they run another backend)."""
    names = dict.fromkeys(name for view in rendered for name in view.devices)
    return [
        name
        for name in names
        if any(
            name in view.devices and view.devices[name].kind is not Kind.NOT_APPLICABLE for view in rendered
        )
    ]


def off_release_runs(rendered: list[CellView]) -> list[tuple[str, str, OffRelease]]:
    """(policy, device class, flag) of each device run whose runtime is not its stack's release."""
    return [
        (view.policy, name, column.off_release)
        for view in rendered
        for name, column in view.devices.items()
        if column.off_release is not None
    ]


def _coverage(cells: list[Cell], backend: str, views: Views) -> list[str]:
    rendered = [views[cell.id] for cell in cells]
    header = columns(backend)
    classes = device_classes_shown(rendered)
    rows = []
    for view in rendered:
        devices = [
            tracker.device_text(view.devices[name]) if name in view.devices else tracker.NOT_APPLICABLE
            for name in classes
        ]
        rows.append([*tracker.view_row(view), *devices])
    lines = ["### Coverage", "", markdown_table([*header, *classes], rows)]
    causes = [(view.policy, view.cause) for view in rendered if view.cause]
    if causes:
        lines += ["", "Causes:", ""]
        lines += [f"- {policy}: {cause}" for policy, cause in causes]
    title = backend_title(backend)
    known = backends.info(backend)
    partitioner = known.partitioner if known else f"the {title} partitioner"
    lines += [
        "",
        "Legend:",
        "",
        f'  • "Ops on {title}": the graph ops that {partitioner} takes, out of all ops, over all programs '
        "of the policy. Ops are counted after to_edge (and constant propagation), so a linear layer "
        f"counts as a matmul and a transpose. {tracker.BOUND} means partitioning did not finish: the "
        "support check's "
        "count.",
        f'  • "Heavy math on {title}": the share of multiply-adds in matmuls, linear layers, convolutions '
        "and attention that the backend takes. A program counts as many times as one action chunk runs it.",
        f'  • "{title} programs": how many {title} partitions the policy is split into. Between 2 '
        'partitions, the data goes back to the CPU. "? (N groups)" means partitioning did not finish; N '
        "is the number of connected groups of ops the backend takes, not a bound on the programs.",
        f'  • "Exports to .pte": {tracker.DONE} means to_edge_transform_and_lower(...).to_executorch() '
        f"finished with the default options. {tracker.SLOW} means it did not finish within the stage "
        "bound; a longer run is "
        f"queued. {tracker.FAILED} means it fails; the cause is below the table.",
    ]
    if classes:
        lines.append(
            f"  • Device columns: {tracker.DONE} with the milliseconds per action chunk (batch 1: the median "
            "of its fresh-process replicas' medians) and, in brackets, the speed-up over eager PyTorch on "
            "the same host's CPU with its interval (from both sides' replica medians); "
            f'"{tracker.ABOUT}2.4×, 1.6–3.3 wide" when that interval is wider than the bound, '
            '"no interval" when a side has fewer than 2 replicas; '
            f"{tracker.FAILED} with its cause; "
            f'"{tracker.NO_DEVICE}" when no runner of that class is enrolled.'
        )
    if any(column.kind is Kind.UNSTABLE for view in rendered for column in view.devices.values()):
        lines.append(
            f"  • {tracker.ABOUT} before the milliseconds: that run's own interval (the range of its "
            "replicas' medians) is wider than the bound, or it has fewer than 2 replicas."
        )
    if off_release_runs(rendered):
        lines.append(
            f'  • "{tracker.OFF_RELEASE} runtime X" after a device cell: that run\'s ExecuTorch runtime is '
            "X, not the release of the cell's stack, so a difference there may be the runtime's (Built on)."
        )
    if any(column.patches for view in rendered for column in view.devices.values()):
        lines.append(
            f'  • "{tracker.CANDIDATE_FIX} with #N" after a device cell: that run\'s runtime was built with '
            "upstream pull request #N applied (a candidate fix, not a release; Built on says on top of what)."
        )
    if any(column.workarounds for view in rendered for column in view.devices.values()):
        lines.append(
            f'  • "{tracker.WORKAROUND} NAME" after a device cell: that run\'s bundle was lowered with '
            "workaround NAME, a graph rewrite around a backend's finding (not the stock lowering; see the "
            "workarounds under Options)."
        )
    lines.append(f"  • {PENDING}: this cell is being measured (running or queued).")
    return lines
