"""The tracker report's Known issues of one backend (``_known_issues``): the blocker groups with their
what-if estimates and repro status, the what-ifs per reason, the verified repros with their output; and
what a device runtime refused or crashed on (``_runtime_issues``)."""

from __future__ import annotations

from coverfarm import tracker
from coverfarm.device_words import RUNTIME_FAILURES
from coverfarm.tracker import backend_title, markdown_table
from orchestrator.reports.blockers import NO_REPRO, READY
from orchestrator.reports.devices import DEPARTS, RuntimeIssue
from orchestrator.reports.schemas import BlockerGroup, ReasonWhatIf

OUTPUT_LINES = 30  # of a repro's output, in the report (the API has all of it)


def _percent(share: float | None) -> str:
    return tracker.share_percent(share, missing="?")


def _policies_cell(group: BlockerGroup) -> str:
    parts = []
    for hit in group.policies:
        detail = f"{hit.nodes} node{'s' if hit.nodes != 1 else ''}"
        if hit.macs and hit.macs_share is not None:
            detail = f"{_percent(hit.macs_share)} of its heavy math stays on the CPU, {detail}"
        parts.append(f"{hit.policy} ({detail})")
    return ", ".join(parts)


def _whatif_cell(group: BlockerGroup) -> str:
    parts = []
    for hit in group.policies:
        if hit.ops_if_supported is None or hit.ops_total is None:
            continue
        text = f"{hit.policy}: ops {hit.ops_on_backend} → {hit.ops_if_supported} / {hit.ops_total}"
        if hit.macs:
            text += f", heavy math {_percent(hit.heavy_share)} → {_percent(hit.heavy_share_if_supported)}"
        parts.append(text)
    return "; ".join(parts) or "-"


def _known_issues(groups: list[BlockerGroup], reasons: list[ReasonWhatIf], backend: str) -> list[str]:
    title = backend_title(backend)
    lines = ["### Known issues", ""]
    if not groups:
        return [*lines, f"Nothing is left on the CPU by {title} in the stored results."]
    numbers: dict[int, int] = {}
    for index, group in enumerate(groups):
        if group.repro.text is not None:
            numbers[index] = len(numbers) + 1
    lines += [
        f"Every op {title} leaves on the CPU, grouped by op and the partitioner's reason, heaviest first. "
        '"Extra programs": how many fewer programs the policies would lower to if the group were '
        'supported. "Repro ready" means the repro below ran against the installed wheel and showed the '
        "same reason.",
        "",
    ]
    rows = []
    for index, group in enumerate(groups):
        extra = "-" if group.extra_programs is None else str(group.extra_programs)
        if group.repro_status == READY:
            status = f"Repro ready (repro {numbers[index]})"
        elif group.repro_status == NO_REPRO:
            status = f"No repro: {group.repro.note or 'none recorded'}"
        else:
            why = group.repro.error or f"shows {group.repro.reason_seen or 'no refusal'}"
            status = f"Repro does not reproduce (repro {numbers[index]}: {why})"
        problem = f"`{group.op}`: {group.reason}."
        rows.append([problem, _policies_cell(group), _whatif_cell(group), extra, status])
    lines.append(markdown_table(["Problem", "Policies", "If supported", "Extra programs", "Status"], rows))
    regained = [r for r in reasons if r.ops_if_supported is not None]
    if regained:
        lines += ["", "#### If every op of one reason were supported", ""]
        lines.append(
            markdown_table(
                ["Reason", "Policy", "Ops", f"Ops on {title}", f"Heavy math on {title}"],
                (
                    [
                        r.reason,
                        r.policy,
                        ", ".join(f"`{op}`" for op in r.ops),
                        f"{r.ops_on_backend} → {r.ops_if_supported} / {r.ops_total}",
                        f"{_percent(r.heavy_share)} → {_percent(r.heavy_share_if_supported)}",
                    ]
                    for r in regained
                ),
            )
        )
    if numbers:
        lines += ["", f"#### Repros (export only, no GPU; {title} partitioner of the installed wheel)"]
        for index, number in numbers.items():
            group = groups[index]
            repro = group.repro
            verdict = "reproduces the reason" if repro.status == READY else "does not reproduce the reason"
            output = "\n".join((repro.output or "").strip().splitlines()[-OUTPUT_LINES:])
            lines += [
                "",
                f"Repro {number}: `{group.op}` ({group.reason}), from a node of {repro.policy}; {verdict}.",
                "",
                "```python",
                (repro.text or "").rstrip(),
                "```",
                "",
                "Output:",
                "",
                "```",
                output or (repro.error or ""),
                "```",
            ]
    return lines


def _runtime_issues(issues: list[RuntimeIssue]) -> list[str]:
    if not issues:
        return []
    lines = [
        "",
        "#### On the device",
        "",
        "Programs the partitioner delegated that a device runtime refused to load or crashed on, grouped "
        "by the runtime's own check, and the ops whose output a numerics run found to depart from eager "
        "first. The repro is the op alone, lowered the same way "
        "(`python -m worker.repros.runtime OUT` writes its bundle for `coverfarm runner run-bundle`; "
        "`python -m worker.repros.numerics` that of a numerics run's op).",
        "",
    ]
    rows = []
    for issue in issues:
        op = f"`{issue.op}`" if issue.op else "-"
        if issue.kind == DEPARTS:
            said = f"output departs from eager first at `{issue.where}` ({issue.message})"
        else:
            said = f"{RUNTIME_FAILURES[issue.kind]}: `{issue.where}`"
        rows.append(
            [
                op,
                said,
                ", ".join(issue.policies),
                ", ".join(issue.device_classes),
                issue.repro or "none yet",
            ]
        )
    lines.append(markdown_table(["Op", "Runtime's message", "Policies", "Device classes", "Repro"], rows))
    return lines
