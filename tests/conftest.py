"""Test-session settings shared by every test directory.

All tests (and the worker processes they start, which inherit the environment) share one trace cache
for the session, so that each real policy is traced once however many tests and backends use it. Under
pytest-xdist (``make test`` runs two worker processes) the controller loads this file first and the
workers inherit its environment, so they share the cache too (the engine writes each trace by an atomic
rename).

Under xdist each test file is one unit of work (``pytest_xdist_make_scheduler`` below), so a file's
module fixtures are built once, by the worker that runs it; files that share session fixtures are one
unit (``SHARED_UNITS``). Files with real-policy tests come first, so that the longest units start at once
and the quick ones fill in around them. (xdist's own ``loadgroup`` marks do not group under pytest 9:
xdist 3.8 writes the group into ``item._nodeid``, which pytest 9 no longer reads, so every test became a
unit of its own and a file's module fixtures were built again on each worker that ran one of its tests.)

Every test has a time bound (pytest-timeout): ``timeout`` in pyproject.toml for all of them, above
every wait a test sets itself, and ``REAL_POLICY_TIMEOUT_S`` for a real-policy test that sets none
(its bound covers the module fixtures it builds first: a real policy traced and lowered).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("COVERFARM_TRACE_CACHE", tempfile.mkdtemp(prefix="coverfarm-traces-"))

# Helper modules that test directories import from each other (the stand-in engines, device helpers,
# the stand-in executor_runner), importable whichever directories a run collects; appended, so they never
# shadow a package.
for _helpers in ("farm", "orchestrator/devices", "gpu_runner"):
    _path = str(Path(__file__).resolve().parent / _helpers)
    if _path not in sys.path:
        sys.path.append(_path)

REAL_POLICY_TIMEOUT_S = 1800

# file -> the file whose unit it joins (tests/worker/enginedocs.py: the act documents both check)
SHARED_UNITS = {"tests/worker/test_fake_weights.py": "tests/worker/test_engine_real.py"}


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the file whose unit its file joins."""
    file = nodeid.split("::", 1)[0]
    return SHARED_UNITS.get(file, file)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Scheduling by ``unit_of``: each unit goes whole to one worker, in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class FileUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return FileUnits(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    heavy = {_file(item) for item in items if item.get_closest_marker("real_policy")}
    items.sort(key=lambda item: _file(item) not in heavy)  # stable: each file keeps its order
    for item in items:
        if item.get_closest_marker("real_policy") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(REAL_POLICY_TIMEOUT_S))
