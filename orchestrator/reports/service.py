"""A sweep's tracker report (Markdown), one body per backend, ready to paste into the tracker issue:
the Coverage table with its legend and causes, Notes (random or real weights, options, substitutions),
"Built on" from the versions recorded with the results, and the Known issues table with what-if
estimates and the verified repros. Rendered with coverfarm.tracker's own cell formats."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy.orm import Session

from coverfarm import backends, tracker
from coverfarm.cell_view import CellView, Kind, OffRelease
from coverfarm.device_words import RUNTIME_FAILURES
from coverfarm.result import Options, ResultDocument
from coverfarm.tracker import PENDING, backend_title, columns, markdown_table
from orchestrator.errors import Invalid
from orchestrator.models import Cell, Sweep
from orchestrator.reports.blockers import NO_REPRO, READY, blocker_groups, blockers_report, reason_what_ifs
from orchestrator.reports.devices import (
    DEPARTS,
    RuntimeIssue,
    device_intervals,
    device_runtimes,
    runtime_issues,
)
from orchestrator.reports.diff import diff_markdown, diff_sweeps
from orchestrator.reports.documents import sweep_documents
from orchestrator.reports.numerics import CellNumerics, numerics_section, sweep_numerics
from orchestrator.reports.profiles import CellProfile, profile_section, sweep_profiles
from orchestrator.reports.schemas import BlockerGroup, BlockersReport, ReasonWhatIf, SweepDiff
from orchestrator.sweeps.cell_views import plain_views, sweep_stacks, sweep_views

OUTPUT_LINES = 30  # of a repro's output, in the report (the API has all of it)
Views = dict[int, CellView]  # cell id -> its view


def _percent(share: float | None) -> str:
    return tracker.share_percent(share, missing="?")


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
    lines.append(f"  • {PENDING}: this cell is being measured (running or queued).")
    return lines


def _notes(sweep: Sweep, docs: list[ResultDocument]) -> list[str]:
    random = sorted(d.policy for d in docs if d.trace_info is not None and d.trace_info.weights == "random")
    real = sorted(d.policy for d in docs if d.trace_info is not None and d.trace_info.weights == "checkpoint")
    seeds = sorted({d.trace_info.seed for d in docs if d.trace_info is not None and d.policy in random})
    lines = ["Notes:", ""]
    if random:
        seed_text = ", ".join(str(s) for s in seeds)
        lines.append(
            f"  • {', '.join(random)} {'uses' if len(random) == 1 else 'use'} random weights, made from "
            "LeRobot's default config with seed "
            f"{seed_text} in the config's dtypes; device outputs are compared against eager PyTorch with "
            "the same weights. A checkpoint in another dtype (bf16) can change what the backend takes."
        )
    if real:
        verb = "uses its" if len(real) == 1 else "use their"
        lines.append(f"  • {', '.join(real)} {verb} real weights (a local checkpoint).")
    lines.append(
        "  • Constant propagation (ExecuTorch's constant_prop_pass) "
        f"{'on' if sweep.constant_prop else 'off'}; "
        f"{sweep.lowering} partitioning; each stage bounded at {sweep.timeout_s:g} s."
    )
    for doc in docs:
        if doc.trace_info is not None and doc.trace_info.substitutions:
            lines.append(f"  • {doc.policy}: {'; '.join(doc.trace_info.substitutions)}.")
    return lines


def _versions_line(docs: list[ResultDocument], package: str) -> str:
    found: dict[str, list[str]] = defaultdict(list)
    for doc in docs:
        found[doc.versions.get(package, "not recorded")].append(doc.policy)
    if len(found) <= 1:
        return next(iter(found), "not recorded")
    return "; ".join(
        f"{version} ({', '.join(sorted(policies))})" for version, policies in sorted(found.items())
    )


def _built_on(
    docs: list[ResultDocument], runtimes: list[str], off_release: list[tuple[str, str, OffRelease]]
) -> list[str]:
    lines = ["### Built on", ""]
    if not docs:
        return [*lines, "  • No result has been stored yet."]
    lines += [
        f"  • ExecuTorch: {_versions_line(docs, 'executorch')} "
        "(its backends' Python code is what was measured).",
        f"  • torch {_versions_line(docs, 'torch')}, transformers {_versions_line(docs, 'transformers')}.",
        f"  • LeRobot: {_versions_line(docs, 'lerobot')}.",
    ]
    if runtimes:
        lines += [f"  • Device {line}." for line in runtimes]
    else:
        lines.append("  • No device runs: the numbers above come from the partitioner and export only.")
    if off_release:
        runs = "; ".join(
            f"{policy} on {device_class}: {tracker.off_release_hint(flag)}"
            for policy, device_class, flag in off_release
        )
        lines.append(f"  • {tracker.OFF_RELEASE} Device runs not on the stack's release: {runs}.")
    return lines


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


def backend_body(
    sweep: Sweep,
    backend: str,
    views: Views,
    runtimes: list[str] | None = None,
    issues: list[RuntimeIssue] | None = None,
    stack: str | None = None,
    profiles: list[CellProfile] | None = None,
    numerics: list[CellNumerics] | None = None,
) -> list[str]:
    """One backend's tracker body; of one stack's cells when ``stack`` is given (its heading names it)."""
    cells = sorted(
        (cell for cell in sweep.cells if cell.backend == backend and stack in (None, cell.stack)),
        key=lambda cell: cell.policy,
    )
    docs = sweep_documents(sweep, backend, stack)
    title = backend_title(backend)
    where = title if stack is None else f"{title} on {stack}"
    lines = [f"## {where}: how much of each LeRobot policy {title} takes, and what blocks the rest", ""]
    lines += _coverage(cells, backend, views)
    flagged = off_release_runs([views[cell.id] for cell in cells])
    lines += ["", *_notes(sweep, docs), "", *_built_on(docs, runtimes or [], flagged), ""]
    lines += _known_issues(blocker_groups(docs), reason_what_ifs(docs), backend)
    lines += _runtime_issues(issues or [])
    lines += profile_section(profiles or [])
    lines += numerics_section(numerics or [])
    return lines


Part = tuple[str, str | None]  # (backend, stack): one body of the report; stack None: every stack


def report_markdown(
    sweep: Sweep,
    backend: str | None = None,
    views: Views | None = None,
    runtimes: dict[Part, list[str]] | None = None,
    issues: dict[Part, list[RuntimeIssue]] | None = None,
    stack: str | None = None,
    profiles: dict[Part, list[CellProfile]] | None = None,
    numerics: dict[Part, list[CellNumerics]] | None = None,
) -> str:
    """The whole tracker body of each backend of the sweep (or of ``backend`` alone). A sweep of several
    stacks gets one body per backend and stack (or of ``stack`` alone), each with its own Built on.
    ``views``: the cells' views with their device columns (without: none); ``runtimes``, ``issues``,
    ``profiles`` and ``numerics`` per body, from the device side when it has results."""
    seed = Options.model_validate(sweep.cells[0].options).seed if sweep.cells else Options().seed
    lines = [
        f"# Sweep {sweep.id}",
        "",
        f"Options: constant propagation {'on' if sweep.constant_prop else 'off'}, "
        f"lowering {sweep.lowering}, stage bound {sweep.timeout_s:g} s (seed {seed})"
        + (_fp16_note(sweep) or "")
        + ".",
    ]
    stacks = sweep_stacks(sweep)
    if len(stacks) > 1:
        lines.append(f"Stacks: {', '.join(stacks)}; one body per backend and stack.")
    views = plain_views(sweep) if views is None else views
    for name, part in report_parts(sweep, backend, stack):
        key = (name, part)
        body = backend_body(
            sweep,
            name,
            views,
            (runtimes or {}).get(key),
            (issues or {}).get(key),
            part,
            (profiles or {}).get(key),
            (numerics or {}).get(key),
        )
        lines += ["", *body]
    lines.append("")
    return "\n".join(lines)


def report_parts(sweep: Sweep, backend: str | None = None, stack: str | None = None) -> list[Part]:
    """The report's bodies: per backend, and per stack when the sweep has more than one (or one is asked)."""
    backends = [backend] if backend is not None else list(dict.fromkeys(cell.backend for cell in sweep.cells))
    stacks = [stack] if stack is not None else sweep_stacks(sweep)
    if stack is None and len(stacks) == 1:
        return [(name, None) for name in backends]
    return [(name, part) for name in backends for part in stacks]


def _fp16_note(sweep: Sweep) -> str | None:
    """Which cells were lowered with ``force_fp16`` (and so are checked against the fp16 tolerance)."""
    fp16 = sorted(
        f"{cell.policy}/{cell.backend}"
        for cell in sweep.cells
        if Options.model_validate(cell.options).force_fp16
    )
    if not fp16:
        return None
    return f"; force_fp16 for {', '.join(fp16)} (device outputs checked at the fp16 tolerance)"


def check_backend(sweep: Sweep, backend: str | None) -> None:
    """A backend the sweep does not have is a 422 that names the ones it has."""
    known = list(dict.fromkeys(cell.backend for cell in sweep.cells))
    if backend is not None and backend not in known:
        raise Invalid(
            [
                {
                    "loc": ["query", "backend"],
                    "msg": f"sweep {sweep.id} has no backend {backend!r}; "
                    f"it has: {', '.join(known) or 'none'}",
                    "type": "value_error",
                    "input": backend,
                }
            ]
        )


def check_stack(sweep: Sweep, stack: str | None, loc: str = "stack") -> None:
    """A stack the sweep does not have is a 422 that names the ones it has."""
    check_stack_of(sweep.id, sweep_stacks(sweep), stack, loc)


def check_stack_of(sweep_id: int, known: list[str], stack: str | None, loc: str = "stack") -> None:
    """A stack not among ``known`` (sweep ``sweep_id``'s) is a 422 that names those."""
    if stack is not None and stack not in known:
        raise Invalid(
            [
                {
                    "loc": ["query", loc],
                    "msg": f"sweep {sweep_id} has no stack {stack!r}; it has: {', '.join(known)}",
                    "type": "value_error",
                    "input": stack,
                }
            ]
        )


def report(session: Session, sweep: Sweep, backend: str | None = None, stack: str | None = None) -> str:
    check_backend(sweep, backend)
    check_stack(sweep, stack)
    parts = report_parts(sweep, backend, stack)
    runtimes = {part: device_runtimes(session, sweep, *part) for part in parts}
    issues = {part: runtime_issues(session, sweep, *part) for part in parts}
    profiles = {part: sweep_profiles(session, sweep, *part) for part in parts}
    numerics = {part: sweep_numerics(session, sweep, *part) for part in parts}
    views = sweep_views(session, sweep)
    return report_markdown(sweep, backend, views, runtimes, issues, stack, profiles, numerics)


def blockers(sweep: Sweep, backend: str | None = None, stack: str | None = None) -> BlockersReport:
    check_backend(sweep, backend)
    check_stack(sweep, stack)
    report = blockers_report(sweep.id, sweep_documents(sweep, backend, stack), backend)
    return report.model_copy(update={"stack": stack})


def diff(
    session: Session, a: Sweep, b: Sweep, stack_a: str | None = None, stack_b: str | None = None
) -> SweepDiff:
    """Sweep ``b`` against ``a``; ``stack_a`` and ``stack_b`` choose a stack of each (one alone: the same
    on both sides), so that one sweep's stacks compare with each other."""
    check_stack(a, stack_a or stack_b, "stack_a" if stack_a else "stack_b")
    check_stack(b, stack_b or stack_a, "stack_b" if stack_b else "stack_a")
    return diff_sweeps(a, b, device_intervals(session, a), device_intervals(session, b), stack_a, stack_b)


def diff_text(result: SweepDiff) -> str:
    return diff_markdown(result)
