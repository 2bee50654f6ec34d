"""The engine's result documents for real-policy cells, computed once per test session and shared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from coverfarm.result import Options, ResultDocument

Analyzed = Callable[[str, str, Options], ResultDocument]

# The farm's own options for a real-weight cell (16 reference frames): one document per cell serves the
# engine's checks and the fake-weight comparison alike, and the trace is the one the farm's worker in
# tests/orchestrator/devices/test_farm_real_act.py looks up in the session's trace cache (the same trace key).
SESSION_OPTIONS = Options(weights="real")


class SessionDocuments:
    """``documents(policy, backend, options)``: analyzes the cell on first use, then returns that document."""

    def __init__(self, trace_cache: Path, out: Callable[[str], Path]) -> None:
        self._trace_cache = trace_cache
        self._out = out
        self._documents: dict[tuple[str, str, Options], ResultDocument] = {}

    def __call__(self, policy: str, backend: str, options: Options) -> ResultDocument:
        from worker.engine import analyze

        key = (policy, backend, options)
        if key not in self._documents:
            out = self._out(f"{policy}-{backend}")
            self._documents[key] = analyze(policy, backend, options, out, trace_cache=self._trace_cache)
        return self._documents[key]
