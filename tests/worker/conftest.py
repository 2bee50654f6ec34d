"""Session fixtures for the engine's real-policy tests: the trace cache, and each real-policy cell
analyzed once for the session (``analyzed``) with its document shared by every test that checks it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from enginedocs import Analyzed, SessionDocuments


@pytest.fixture(scope="session")
def trace_cache() -> Path:
    """The session's trace cache (tests/conftest.py): each policy is traced once for all its backends."""
    return Path(os.environ["COVERFARM_TRACE_CACHE"])


@pytest.fixture(scope="session")
def analyzed(trace_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Analyzed:
    return SessionDocuments(trace_cache, tmp_path_factory.mktemp)
