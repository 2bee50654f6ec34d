"""The torch-free catalog of names agrees with the engine's registries."""

from __future__ import annotations

from coverfarm import catalog
from worker.backends import BACKENDS
from worker.policies.registry import supported


def test_catalog_matches_the_engine() -> None:
    assert list(catalog.POLICIES) == supported()
    assert list(catalog.BACKENDS) == sorted(BACKENDS)
