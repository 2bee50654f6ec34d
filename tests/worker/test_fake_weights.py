"""Fake weights give exactly the coverage of real weights: everything but export, for act on both
backends and for vqbet (blockers, a batched convolution kept on the CPU, 21 programs) on Vulkan (the
fake-weight path is the same up to the partitioner, which is the backend's own). The
policy is built under a FakeTensorMode (``worker.trace.fake_weights``), so these numbers can be computed for
policies whose real weights do not fit the worker."""

from __future__ import annotations

from typing import Any

import pytest
from enginedocs import SESSION_OPTIONS, Analyzed

from coverfarm import tracker
from coverfarm.result import ResultDocument, StageStatus

pytestmark = pytest.mark.real_policy


def coverage(doc: ResultDocument) -> dict[str, Any]:
    """Every column but export, and the blockers with their counts, heavy math and what-if counts."""
    return {
        "ops": doc.ops.model_dump(),
        "heavy_macs": doc.heavy_macs.model_dump(),
        "programs": (doc.programs.count, doc.programs.connected_groups),
        "blockers": [(b.op, b.reason, b.count, b.macs, b.programs_if_supported) for b in doc.blockers],
        "per_program": [p.model_dump(exclude={"pt2", "pte", "delegates"}) for p in doc.program_list],
    }


@pytest.mark.parametrize("backend", ["xnnpack", "vulkan"])
def test_fake_weights_give_the_real_coverage(backend: str, analyzed: Analyzed) -> None:
    # The real-weight document is the one the engine's own act tests check (tests/worker/enginedocs.py).
    real = analyzed("act", backend, SESSION_OPTIONS)
    fake = analyzed("act", backend, SESSION_OPTIONS.model_copy(update={"weights": "fake"}))
    assert real.partition.status is fake.partition.status is StageStatus.OK, (real.partition, fake.partition)
    assert real.ops.total and real.ops.on_backend is not None
    assert coverage(fake) == coverage(real)
    assert tracker.row(fake)[:4] == tracker.row(real)[:4]

    assert real.export.status is StageStatus.OK and real.bundle is not None
    assert real.weights is not None and real.weights.mode == "real"
    assert fake.weights is not None and fake.weights.mode == "fake"
    assert fake.weights.parameter_bytes == real.weights.parameter_bytes > 0
    assert fake.export.status is StageStatus.NOT_RUN and fake.bundle is None
    assert fake.export.error is not None
    needs = fake.weights.needs_worker_gb
    assert fake.export.error.message == f"fake weights: export needs real weights (≥ {needs} GB worker)"
    assert tracker.export_cell(fake) == f"needs ≥ {needs} GB worker"
    assert fake.trace_info is not None and fake.trace_info.frames == 0  # no eager references
    for doc in (real, fake):
        assert {"trace", "partition"} <= set(doc.memory)
        assert all(value > 0 for value in doc.memory.values())
    assert "export" in real.memory


def test_fake_weights_give_vqbets_partial_vulkan_coverage(analyzed: Analyzed) -> None:
    real = analyzed("vqbet", "vulkan", SESSION_OPTIONS)
    fake = analyzed("vqbet", "vulkan", SESSION_OPTIONS.model_copy(update={"weights": "fake"}))
    assert real.partition.status is fake.partition.status is StageStatus.OK, (real.partition, fake.partition)
    assert real.heavy_macs.on_backend is not None and 0 < real.heavy_macs.on_backend < real.heavy_macs.total
    assert real.blockers and real.programs.count is not None and real.programs.count > 1
    assert coverage(fake) == coverage(real)
    assert tracker.row(fake)[:4] == tracker.row(real)[:4]
    assert fake.weights is not None and fake.weights.mode == "fake"
