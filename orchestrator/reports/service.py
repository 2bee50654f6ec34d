"""A sweep's tracker report (Markdown), one body per backend, ready to paste into the tracker issue:
the Coverage table with its legend and causes, Notes (random or real weights, options, substitutions),
"Built on" from the versions recorded with the results, and the Known issues table with what-if
estimates and the verified repros. Rendered with coverfarm.tracker's own cell formats.

This module assembles the bodies and checks what a request asks for; the sections are written by
``coverage_table`` (Coverage), ``notes`` (Notes, Built on) and ``known_issues`` (Known issues, on the
device)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from coverfarm import workarounds
from coverfarm.result import Options
from coverfarm.tracker import WORKAROUND, backend_title
from orchestrator.errors import Invalid
from orchestrator.models import Sweep
from orchestrator.reports.blockers import blocker_groups, blockers_report, reason_what_ifs
from orchestrator.reports.candidates import CandidateRun, candidate_section, sweep_candidates
from orchestrator.reports.coverage_table import Views, _coverage, off_release_runs
from orchestrator.reports.devices import RuntimeIssue, device_intervals, device_runtimes, runtime_issues
from orchestrator.reports.diff import diff_markdown, diff_sweeps
from orchestrator.reports.documents import sweep_documents
from orchestrator.reports.known_issues import _known_issues, _runtime_issues
from orchestrator.reports.notes import _built_on, _notes
from orchestrator.reports.numerics import CellNumerics, numerics_section, sweep_numerics
from orchestrator.reports.profiles import CellProfile, profile_section, sweep_profiles
from orchestrator.reports.schemas import BlockersReport, SweepDiff
from orchestrator.sweeps.cell_views import plain_views, sweep_stacks, sweep_views


def backend_body(
    sweep: Sweep,
    backend: str,
    views: Views,
    runtimes: list[str] | None = None,
    issues: list[RuntimeIssue] | None = None,
    stack: str | None = None,
    profiles: list[CellProfile] | None = None,
    numerics: list[CellNumerics] | None = None,
    candidates: list[CandidateRun] | None = None,
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
    by_policy = {cell.policy: cell for cell in cells}
    beside = [
        (run, views[by_policy[run.policy].id].devices.get(run.device_class))
        for run in candidates or []
        if run.policy in by_policy
    ]
    lines += candidate_section(beside)
    lines += profile_section(profiles or [])
    lines += numerics_section(numerics or [])
    return lines


Part = tuple[str, str | None]  # (backend, stack): one body of the report; stack None: every stack


def report_markdown(
    sweep: Sweep,
    names: Sequence[str] | None = None,
    views: Views | None = None,
    runtimes: dict[Part, list[str]] | None = None,
    issues: dict[Part, list[RuntimeIssue]] | None = None,
    stack: str | None = None,
    profiles: dict[Part, list[CellProfile]] | None = None,
    numerics: dict[Part, list[CellNumerics]] | None = None,
    candidates: dict[Part, list[CandidateRun]] | None = None,
) -> str:
    """The whole tracker body of each backend of the sweep (or of each of ``names``, in that order:
    the body of each backend's tracker issue, however many the sweep has). A sweep of several
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
        *_workaround_notes(sweep),
    ]
    stacks = sweep_stacks(sweep)
    if len(stacks) > 1:
        lines.append(f"Stacks: {', '.join(stacks)}; one body per backend and stack.")
    views = plain_views(sweep) if views is None else views
    for name, part in report_parts(sweep, names, stack):
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
            (candidates or {}).get(key),
        )
        lines += ["", *body]
    lines.append("")
    return "\n".join(lines)


def report_parts(sweep: Sweep, names: Sequence[str] | None = None, stack: str | None = None) -> list[Part]:
    """The report's bodies: per backend (each of ``names``, else every backend of the sweep), and per
    stack when the sweep has more than one (or one is asked)."""
    wanted = list(dict.fromkeys(names or (cell.backend for cell in sweep.cells)))
    stacks = [stack] if stack is not None else sweep_stacks(sweep)
    if stack is None and len(stacks) == 1:
        return [(name, None) for name in wanted]
    return [(name, part) for name in wanted for part in stacks]


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


def _workaround_notes(sweep: Sweep) -> list[str]:
    """Each workaround the sweep's cells were lowered with, what it does, why, and which cells: their
    figures are not the stock lowering's."""
    cells: dict[str, list[str]] = {}
    for cell in sweep.cells:
        for name in Options.model_validate(cell.options).workarounds:
            cells.setdefault(name, []).append(f"{cell.policy}/{cell.backend}")
    return [
        f"{WORKAROUND} Lowered with workaround {line} for {', '.join(sorted(set(cells[name])))}: "
        "not the stock lowering."
        for name, line in zip(sorted(cells), workarounds.described(sorted(cells)), strict=True)
    ]


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


def report(
    session: Session, sweep: Sweep, names: Sequence[str] | None = None, stack: str | None = None
) -> str:
    """The tracker bodies of ``names`` (each must be one of the sweep's; none: every one of them)."""
    for backend in names or ():
        check_backend(sweep, backend)
    check_stack(sweep, stack)
    parts = report_parts(sweep, names, stack)
    runtimes = {part: device_runtimes(session, sweep, *part) for part in parts}
    issues = {part: runtime_issues(session, sweep, *part) for part in parts}
    profiles = {part: sweep_profiles(session, sweep, *part) for part in parts}
    numerics = {part: sweep_numerics(session, sweep, *part) for part in parts}
    candidates = {part: sweep_candidates(session, sweep, *part) for part in parts}
    views = sweep_views(session, sweep)
    return report_markdown(sweep, names, views, runtimes, issues, stack, profiles, numerics, candidates)


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
