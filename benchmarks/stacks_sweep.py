"""The real lowering of policies on backends under each stack, side by side: the progress table.

For each stack (``coverfarm.stacks``; its virtualenv from ``make stack STACK=NAME``, the default stack's
may be the checkout's ``.venv``), each policy and each backend, the engine runs in that stack's own
interpreter (``python -m coverfarm_cli analyze --json``: trace, partition, export, as a farm worker runs a
cell) and its result document is kept under ``--out``. It then prints, per policy and backend, each
stack's tracker row (ops on the backend / total, heavy-math share, programs, export) and its blocker
groups, and which groups are fixed and which introduced from one stack to the next, oldest first.

    python benchmarks/stacks_sweep.py --stacks et-1.4.1,et-1.5.1 --policies act,tdmpc,vqbet

Cells are measured one at a time (each lowering takes the cores it can); a document already under
``--out`` is read instead of measured again, so an interrupted sweep resumes, and ``--table-only``
prints the table from what is there. Each stack's traces are its own (the trace cache is keyed by the
versions). The machine's load is printed before and after, with each cell's wall time.

This measures through the engine directly; the farm routes a sweep's cells to each stack's workers
(``COVERFARM_STACK`` / ``coverfarm.stacks.current_stack``) and gives the same documents.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from coverfarm import tracker
from coverfarm.result import ResultDocument
from coverfarm.stacks import DEFAULT_STACK, REPO, Stack, catalogue

DEFAULT_POLICIES = "act,tdmpc,vqbet"
DEFAULT_BACKENDS = "vulkan,xnnpack"


def version_key(stack: Stack) -> tuple[int, ...]:
    """Oldest first: by executorch version's numbers."""
    numbers = []
    for part in stack.pins.get("executorch", "0").replace("+", ".").split("."):
        numbers.append(int(part) if part.isdigit() else -1)
    return tuple(numbers)


def interpreter(stack: Stack, root: Path) -> Path:
    """The Python of a stack's virtualenv, checked to be that stack (it detects as it)."""
    candidates = [root / stack.name / "bin" / "python"]
    if stack.name == DEFAULT_STACK:
        candidates.append(REPO / ".venv" / "bin" / "python")
    for python in candidates:
        if not python.exists():
            continue
        found = subprocess.run(
            [str(python), "-m", "coverfarm.stacks", "current"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=_env(),
        ).stdout.strip()
        if found.startswith(f"{stack.name}:"):
            return python
    raise SystemExit(f"stack {stack.name} has no virtualenv here: run make stack STACK={stack.name}")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COVERFARM_STACK"}
    env["PYTHONPATH"] = str(REPO)
    return env


@dataclass
class Cell:
    stack: str
    policy: str
    backend: str
    doc: ResultDocument | None
    wall_s: float | None = None
    note: str = ""


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def measure(python: Path, stack: str, policy: str, backend: str, out: Path, args: argparse.Namespace) -> Cell:
    path = out / stack / f"{policy}-{backend}.json"
    if path.exists():
        return Cell(stack, policy, backend, ResultDocument.model_validate_json(path.read_text()), note="kept")
    if args.table_only:
        return Cell(stack, policy, backend, None, note="not measured")
    path.parent.mkdir(parents=True, exist_ok=True)
    command = [
        str(python),
        "-m",
        "coverfarm_cli",
        "analyze",
        "--policy",
        policy,
        "--backend",
        backend,
        "--json",
    ]
    command += [
        "--out",
        str(out / stack / "work"),
        "--timeout",
        str(args.timeout),
        "--frames",
        str(args.frames),
    ]
    env = _env() | {"COVERFARM_TRACE_CACHE": str(out / "traces")}
    start = time.monotonic()
    print(f"[{stack}] {policy} on {backend}: measuring ({load()})", file=sys.stderr, flush=True)
    with (out / stack / f"{policy}-{backend}.log").open("w") as log:
        run = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO, env=env)
    wall = time.monotonic() - start
    if run.returncode != 0 or not run.stdout.strip():
        print(f"[{stack}] {policy} on {backend}: the engine exited {run.returncode}", file=sys.stderr)
        return Cell(stack, policy, backend, None, wall, note=f"engine exited {run.returncode}")
    doc = ResultDocument.model_validate_json(run.stdout)
    path.write_text(run.stdout)
    (out / stack / f"{policy}-{backend}.wall_s").write_text(f"{wall:.1f}\n")
    print(f"[{stack}] {policy} on {backend}: {doc.status.value} in {wall:.0f} s", file=sys.stderr, flush=True)
    return Cell(stack, policy, backend, doc, wall)


def groups(doc: ResultDocument | None) -> set[tuple[str, str]]:
    return set() if doc is None else {(b.op, b.reason) for b in doc.blockers}


def cell_text(cell: Cell) -> str:
    if cell.doc is None:
        return cell.note
    _policy, ops, heavy, programs, export = tracker.row(cell.doc)
    text = f"{ops}; heavy {heavy}; {programs} programs; export {export}"
    cause = tracker.cause_line(cell.doc)
    if cause:
        text += f" ({cause if len(cause) <= 90 else cause[:40] + ' … ' + cause[-45:]})"
    off = [name for name, state in cell.doc.levers.items() if state != "active"]
    if off:
        text += f"; stock levers: {', '.join(off)}"
    return text


def figures_of(cell: Cell) -> dict[str, object] | None:
    doc = cell.doc
    if doc is None:
        return None
    return {
        "status": doc.status.value,
        "ops": doc.ops.model_dump(),
        "heavy_macs": doc.heavy_macs.model_dump(),
        "programs": doc.programs.model_dump(),
        "blockers": sorted(map(list, groups(doc))),
        "levers": doc.levers,
        "versions": doc.versions,
        "wall_s": cell.wall_s,
    }


def group_text(group: tuple[str, str]) -> str:
    return f"{group[0]} ({group[1]})"


def report(
    stacks: list[Stack], cells: dict[tuple[str, str, str], Cell], policies: list[str], backends: list[str]
) -> str:
    names = [stack.name for stack in stacks]
    lines = ["## Stacks", ""]
    lines += [f"- {stack.describe()}" for stack in stacks]
    rows = []
    for policy in policies:
        for backend in backends:
            rows.append([policy, backend, *(cell_text(cells[(name, policy, backend)]) for name in names)])
    lines += ["", "## Progress", "", tracker.markdown_table(["Policy", "Backend", *names], rows), ""]
    lines += ["## Blocker groups per stack, and the change from the stack before", ""]
    for policy in policies:
        for backend in backends:
            lines.append(f"### {policy} on {tracker.backend_title(backend)}")
            before: set[tuple[str, str]] | None = None
            for name in names:
                cell = cells[(name, policy, backend)]
                now = groups(cell.doc)
                shown = "; ".join(group_text(g) for g in sorted(now)) or "none"
                lines.append(
                    f"- {name}: {len(now)} groups: {shown}" if cell.doc else f"- {name}: {cell.note}"
                )
                if before is not None and cell.doc is not None:
                    fixed, introduced = sorted(before - now), sorted(now - before)
                    lines.append(f"  - fixed: {'; '.join(map(group_text, fixed)) or 'none'}")
                    lines.append(f"  - introduced: {'; '.join(map(group_text, introduced)) or 'none'}")
                if cell.doc is not None:
                    before = now
            lines.append("")
    walls = [f"{c.stack} {c.policy}/{c.backend} {c.wall_s:.0f} s" for c in cells.values() if c.wall_s]
    if walls:
        lines += ["Wall time per measured cell: " + ", ".join(walls), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stacks", help="comma-separated stacks (default: every release stack)")
    parser.add_argument("--policies", default=DEFAULT_POLICIES)
    parser.add_argument("--backends", default=DEFAULT_BACKENDS)
    parser.add_argument("--root", type=Path, default=REPO / ".stacks", help="the stacks' virtualenvs")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "stacks-sweep")
    parser.add_argument("--timeout", type=float, default=900.0, help="each stage's bound, seconds")
    parser.add_argument("--frames", type=int, default=1, help="eager reference frames (1-16)")
    parser.add_argument("--table-only", action="store_true", help="print the table of what --out holds")
    parser.add_argument("--json", type=Path, help="also write every cell's figures here")
    args = parser.parse_args()

    known = catalogue()
    wanted = args.stacks.split(",") if args.stacks else [n for n, s in known.items() if s.wheel is None]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise SystemExit(f"unknown stacks {', '.join(unknown)}; the catalogue has {', '.join(known)}")
    stacks = sorted((known[name] for name in wanted), key=version_key)
    policies, backends = args.policies.split(","), args.backends.split(",")
    pythons = {stack.name: Path() if args.table_only else interpreter(stack, args.root) for stack in stacks}
    print(f"start: {load()}", file=sys.stderr)
    cells = {}
    for stack in stacks:
        for policy in policies:
            for backend in backends:
                cells[(stack.name, policy, backend)] = measure(
                    pythons[stack.name], stack.name, policy, backend, args.out, args
                )
    print(report(stacks, cells, policies, backends))
    print(f"end: {load()}")
    if args.json:
        figures = {"/".join(key): figures_of(cell) for key, cell in cells.items()}
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
