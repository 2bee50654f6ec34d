"""docs/map.md names every module of the repository's packages, each in one row.

A package's section (``## `worker/`: ...``) is a table, a row per file or folder: the first cell names
them (`` `result.py` ``, `` `lower/fast/` ``), the rest says what they own. A module is listed when a
first cell names its path in the package, or names a folder it is in while the row (or the section's
text outside the table, as the orchestrator's "each domain package has `endpoints.py`, ...") names the
rest of its path or a folder on the way (`` `adapters/` ``). A package's ``__init__.py`` says what the
package may import and needs no row (the command's, its parser, has one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "map.md"
PACKAGES = ("coverfarm", "farmrun", "worker", "orchestrator", "gpu_runner", "dashboard", "coverfarm_cli")
_NAMED = re.compile(r"`([^`]+)`")

Row = tuple[list[str], set[str]]  # (what its first cell names, what the rest of its row names)


def sections(text: str) -> dict[str, str]:
    """Package name -> its section of the map (from its ``## `name/` `` heading to the next)."""
    found = {}
    for part in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        if heading := re.match(r"`([a-z_]+)/`", part):
            found[heading.group(1)] = part
    return found


def rows(section: str) -> Iterator[Row]:
    """The section's table rows, each with the names its text outside the table gives every row."""
    lines = section.splitlines()
    prose = {name for line in lines if not line.startswith("|") for name in _NAMED.findall(line)}
    for line in lines:
        if line.startswith("| ") and not line.startswith("|---"):
            first, *rest = (cell.strip() for cell in line.strip().strip("|").split("|"))
            if rest:
                yield _NAMED.findall(first), set(_NAMED.findall("|".join(rest))) | prose


def listed(path: str, table: list[Row]) -> bool:
    """Whether ``path`` (a module's, within its package: ``events/hub.py``) is in the table."""
    for named, said in table:
        if path in named:
            return True
        for folder in (name for name in named if name.endswith("/") and path.startswith(name)):
            rest = path.removeprefix(folder).split("/")
            ways = {"/".join(rest)} | {"/".join(rest[:end]) + "/" for end in range(1, len(rest))}
            if ways & said:
                return True
    return False


def unlisted(text: str, modules: dict[str, list[str]]) -> list[str]:
    """Those of ``modules`` (package -> its module paths) the map ``text`` does not list, and the names
    a package's table names in two rows."""
    found = sections(text)
    wrong = [f"{package}/: no section" for package in modules if package not in found]
    for package, paths in modules.items():
        table = list(rows(found.get(package, "")))
        wrong += [f"{package}/{path}" for path in paths if not listed(path, table)]
        firsts = [name for named, _ in table for name in named]
        wrong += [f"{package}/{name}: in two rows" for name in sorted(set(firsts)) if firsts.count(name) > 1]
    return wrong


def source_modules() -> dict[str, list[str]]:
    return {
        package: [
            path.relative_to(ROOT / package).as_posix()
            for path in sorted((ROOT / package).rglob("*.py"))
            if path.name != "__init__.py" or package == "coverfarm_cli"
        ]
        for package in PACKAGES
    }


def test_the_map_lists_every_module_once() -> None:
    assert unlisted(MAP.read_text(), source_modules()) == []


def test_the_check_finds_a_module_left_out_and_one_listed_twice() -> None:
    text = """## `orchestrator/`: the API

Each domain package has `endpoints.py` and `service.py`.

| file | owns |
|---|---|
| `app.py`, `db.py` | the app; sessions |
| `events/` | the event log, its hub (`hub.py`) |
| `reports/` | reports (`devices.py`), progress (`progress/`) |
| `db.py` | sessions again |

## `worker/`: the CPU side
"""
    modules = {
        "orchestrator": [
            "app.py",
            "db.py",
            "inputs.py",
            "events/hub.py",
            "events/service.py",
            "events/stream.py",
            "reports/devices.py",
            "reports/progress/plot.py",
        ],
        "worker": ["engine.py"],
        "dashboard": ["views.py"],
    }
    assert unlisted(text, modules) == [
        "dashboard/: no section",
        "orchestrator/inputs.py",
        "orchestrator/events/stream.py",
        "orchestrator/db.py: in two rows",
        "worker/engine.py",
        "dashboard/views.py",
    ]


# The suites that run the whole farm as processes, with no source folder of their own (docs/map.md).
FARM_SUITES = ("farm", "hosts")


def test_the_tests_mirror_the_source_tree() -> None:
    """Every folder of tests below ``tests/`` is the mirror of a source folder (``tests/orchestrator/devices``
    of ``orchestrator/devices``), or one of the farm suites the map names."""
    tests = ROOT / "tests"
    folders = {path.parent.relative_to(tests) for path in tests.rglob("test_*.py")} - {Path(".")}
    strays = sorted(
        str(folder)
        for folder in folders
        if not (ROOT / folder).is_dir() and folder.parts[0] not in FARM_SUITES
    )
    assert strays == [], f"test folders with no source folder of the same path: {strays}"
    text = MAP.read_text()
    assert all(f"`tests/{suite}/`" in text for suite in FARM_SUITES)
