"""The borders between the repository's packages: one layer order, no arrow back up, no import loop.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import`` anywhere in a
module (at module level, in functions, under ``if TYPE_CHECKING:``: a typing-only import still ties
the two modules together for a reader and for mypy), with relative imports resolved. An engine loaded
by its configured name (``importlib.import_module(settings.engine)``) is a plugin, not an arrow.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What each top-level package may import of the others (besides itself): a package, or single modules
# of one. Each package's __init__.py docstring says the same in words; docs/map.md shows the table.
# Bottom to top: the contract; farmrun, the running machinery the farm's processes share (the Celery app,
# the host's timing lock, the timing statistics and host facts a device run and an eager baseline both
# record, heartbeats, signing, the stack builder); then side by side, none importing another, gpu_runner,
# worker (its eager baseline is timed with farmrun's statistics, never the runner's code) and
# orchestrator (the contract and farmrun: its CPU worker task registers a worker with the torch-free host
# facts of coverfarm.worker_memory and coverfarm.versions, and keys reuse with coverfarm.reuse; the engine
# itself is a plugin named by settings.engine, no import); dashboard (pages over the orchestrator's
# services, and the app that serves both); the command on top.
ALLOWED: dict[str, frozenset[str]] = {
    "coverfarm": frozenset(),
    "farmrun": frozenset({"coverfarm"}),
    "gpu_runner": frozenset({"coverfarm", "farmrun"}),
    "worker": frozenset({"coverfarm", "farmrun"}),
    "orchestrator": frozenset({"coverfarm", "farmrun"}),
    "dashboard": frozenset({"coverfarm", "orchestrator"}),
    "coverfarm_cli": frozenset({"coverfarm", "farmrun", "gpu_runner", "worker", "orchestrator", "dashboard"}),
}
PACKAGES = tuple(ALLOWED)
# Third-party imports a package must never make (outside the repository's packages). The contract
# describes what runs and runs nothing: the Celery app and signing are farmrun's.
FORBIDDEN_EXTERNAL: dict[str, frozenset[str]] = {
    "coverfarm": frozenset({"torch", "celery", "cryptography"}),
    "farmrun": frozenset({"torch"}),
    "gpu_runner": frozenset({"torch"}),
    "orchestrator": frozenset({"torch"}),
}
# The order of sibling subpackages and modules, bottom first: an arrow between two of them points down it.
# The worker's are all of its children, in the order of the pipeline of one cell: the child processes
# every stage runs in, a fake-weight trace's programs across a save and a load (the trace saves them, the
# lower stage loads them), trace, lower, bundle, reading a bundle's device profiles, the blocker groups'
# repros, and the engine that runs them.
# The orchestrator's are its domains: the event log and the artifact store at the bottom, then CPU
# workers, jobs (the state machine, and the cell state its CPU jobs give), devices (runners and device
# runs, which are jobs), sweeps (cells and jobs, the cells' views with their device columns), and the
# reports over sweeps and device runs on top. The app and the reconciler loop sit above them all.
SIBLING_ORDERS: dict[str, tuple[str, ...]] = {
    "worker": (
        "worker.child",
        "worker.fake_programs",
        "worker.trace",
        "worker.lower",
        "worker.bundle",
        "worker.profile",
        "worker.repros",
        "worker.engine",
    ),
    "orchestrator": (
        "orchestrator.events",
        "orchestrator.artifacts",
        "orchestrator.workers",
        "orchestrator.jobs",
        "orchestrator.devices",
        "orchestrator.sweeps",
        "orchestrator.reports",
    ),
}


def allows(source: str, target: str) -> bool:
    """Whether module ``source`` may import module ``target`` by the layer table: a module a rule names,
    one inside it, or a package around it (importing ``worker.engine`` runs ``worker/__init__.py``)."""
    if top(target) == top(source):
        return True
    return any(
        target == rule or target.startswith(rule + ".") or rule.startswith(target + ".")
        for rule in ALLOWED[top(source)]
    )


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            modules[module_name(path)] = path
    return modules


def imported_names(path: Path, name: str) -> Iterator[tuple[str, int]]:
    """Every module name ``path`` imports (``from a import b`` yields ``a`` and ``a.b``), with its line."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            yield stem, node.lineno
            for alias in node.names:
                if alias.name != "*":
                    yield f"{stem}.{alias.name}", node.lineno


def resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The repository module ``target`` names: itself, or the nearest enclosing package or module."""
    parts = target.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def build_graph() -> tuple[dict[str, Path], dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """The modules, their arrows to repository modules and to outside top-level names (with a line)."""
    modules = source_modules()
    edges: dict[str, dict[str, int]] = defaultdict(dict)
    external: dict[str, dict[str, int]] = defaultdict(dict)
    for name, path in modules.items():
        for target, line in imported_names(path, name):
            resolved = resolve(target, modules)
            if resolved is None:
                if target.split(".")[0] not in PACKAGES:
                    external[name].setdefault(target.split(".")[0], line)
            elif resolved != name:
                edges[name].setdefault(resolved, line)
    # ``import a.b.c`` runs a/__init__ and a/b/__init__ too, but those arrows are the package's own.
    return modules, edges, external


def top(name: str) -> str:
    return name.split(".")[0]


def arrow(modules: dict[str, Path], source: str, target: str, line: int) -> str:
    return f"{modules[source].relative_to(ROOT)}:{line}: {source} -> {target}"


def test_every_package_is_known() -> None:
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages <= set(PACKAGES), f"packages without a layer rule: {sorted(packages - set(PACKAGES))}"


def test_packages_import_only_what_their_layer_allows() -> None:
    modules, edges, external = build_graph()
    wrong = []
    for source, targets in sorted(edges.items()):
        for target, line in sorted(targets.items()):
            if not allows(source, target):
                wrong.append(arrow(modules, source, target, line))
    for source, names in sorted(external.items()):
        for name, line in sorted(names.items()):
            if name in FORBIDDEN_EXTERNAL.get(top(source), frozenset()):
                wrong.append(arrow(modules, source, name, line))
    assert not wrong, "imports across a border their layer forbids:\n" + "\n".join(wrong)


def test_the_layer_table_has_no_loop() -> None:
    # A package that may import another must not be importable by it, directly or through others.
    def reaches(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in {top(rule) for rule in ALLOWED[todo.pop()]}:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    loops = [package for package in PACKAGES if package in reaches(package)]
    assert not loops, f"the layer table loops through {loops}"
    assert not any("coverfarm_cli" in {top(rule) for rule in rules} for rules in ALLOWED.values())


def strongly_connected(nodes: list[str], edges: Mapping[str, Mapping[str, object]]) -> list[list[str]]:
    """Tarjan's components, iteratively (the module graph is deep enough to hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, {})))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def test_no_import_loop_between_modules() -> None:
    modules, edges, _ = build_graph()
    # A package's __init__ imported by its own submodule is no loop of their making: importing
    # ``a.b`` runs ``a`` first anyway. Only a submodule's arrow up to its own package is left out.
    own = {
        source: {t: line for t, line in targets.items() if not source.startswith(t + ".")}
        for source, targets in edges.items()
    }
    loops = [c for c in strongly_connected(sorted(modules), own) if len(c) > 1]
    lines = []
    for component in loops:
        members = set(component)
        lines.append("loop: " + ", ".join(component))
        for source in component:
            for target, line in sorted(own.get(source, {}).items()):
                if target in members:
                    lines.append("  " + arrow(modules, source, target, line))
    assert not loops, "import loops between modules:\n" + "\n".join(lines)


def sibling_edges(edges: dict[str, dict[str, int]]) -> dict[str, dict[str, str]]:
    """The module arrows lifted to siblings: ``a.x.m -> a.y.n`` is an arrow ``a.x -> a.y`` (the two
    children of their nearest common package), each with one module arrow that makes it."""
    lifted: dict[str, dict[str, str]] = defaultdict(dict)
    for source, targets in edges.items():
        for target in targets:
            if source.startswith(target + ".") or target.startswith(source + "."):
                continue  # a module and its own package
            s, t = source.split("."), target.split(".")
            common = 0
            while common < min(len(s), len(t)) and s[common] == t[common]:
                common += 1
            lifted[".".join(s[: common + 1])].setdefault(".".join(t[: common + 1]), f"{source} -> {target}")
    return lifted


def sibling_loops(lifted: dict[str, dict[str, str]]) -> list[str]:
    """The loops between siblings of the lifted arrows (``sibling_edges``), each with the arrows that make
    it: a loop's line, then one per arrow inside it (empty: no loop)."""
    nodes = sorted(set(lifted) | {t for targets in lifted.values() for t in targets})
    loops = [c for c in strongly_connected(nodes, lifted) if len(c) > 1]
    lines = []
    for component in sorted(loops):
        lines.append("loop: " + ", ".join(component))
        for source in component:
            for target, why in sorted(lifted.get(source, {}).items()):
                if target in component:
                    lines.append(f"  {source} -> {target} (as {why})")
    return lines


def test_no_import_loop_between_sibling_packages() -> None:
    # worker.lower -> worker.repros -> worker.lower would be a loop even when no two modules formed one.
    _, edges, _ = build_graph()
    lines = sibling_loops(sibling_edges(edges))
    assert not lines, "import loops between packages or modules of one package:\n" + "\n".join(lines)


def test_the_sibling_loop_check_finds_a_loop_no_two_modules_make() -> None:
    # No module loop here: observe -> script -> example; lifted to siblings, lower -> repros -> lower.
    edges = {
        "worker.lower.observe": {"worker.repros.script": 1},
        "worker.repros.script": {"worker.lower.metrics.example": 2},
        "worker.engine": {"worker.lower.observe": 3, "worker.repros.script": 4},
    }
    modules = sorted({*edges, *(t for targets in edges.values() for t in targets)})
    assert [c for c in strongly_connected(modules, edges) if len(c) > 1] == []
    assert sibling_loops(sibling_edges(edges)) == [
        "loop: worker.lower, worker.repros",
        "  worker.lower -> worker.repros (as worker.lower.observe -> worker.repros.script)",
        "  worker.repros -> worker.lower (as worker.repros.script -> worker.lower.metrics.example)",
    ]
    # Without the arrow back, the same graph has none.
    del edges["worker.repros.script"]
    assert sibling_loops(sibling_edges(edges)) == []


def test_ordered_siblings_import_only_down_their_order() -> None:
    _, edges, _ = build_graph()
    lifted = sibling_edges(edges)
    wrong = []
    for order in SIBLING_ORDERS.values():
        rank = {name: place for place, name in enumerate(order)}
        for source in order:
            for target, why in sorted(lifted.get(source, {}).items()):
                if target in rank and rank[target] > rank[source]:
                    wrong.append(f"{source} -> {target} (as {why})")
    assert not wrong, "imports up an order of sibling packages:\n" + "\n".join(wrong)


def test_every_child_of_the_worker_has_its_place_in_the_pipeline() -> None:
    children = {".".join(name.split(".")[:2]) for name in source_modules() if name.startswith("worker.")}
    assert children == set(SIBLING_ORDERS["worker"]), sorted(children ^ set(SIBLING_ORDERS["worker"]))
