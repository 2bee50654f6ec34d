"""The shipped health-check bundles: each is what ``worker.bundle.health`` lowers today, and wholly delegated.

The Vulkan one is lowered here with the wheel's real ``VulkanPartitioner``; the wheel has no Vulkan
runtime, so what can be checked here is the program itself: one delegate call to ``VulkanBackend`` and no
portable operator left, and a manifest the runner reads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from executorch.exir._serialize._program import deserialize_pte_binary

from coverfarm.bundle_manifest import load_manifest
from coverfarm.digest import bundle_digest
from orchestrator.artifacts.health import SHIPPED
from worker.bundle import health

DELEGATE = {"vulkan": "VulkanBackend", "xnnpack": "XnnpackBackend"}
REBUILD = "rebuild it: python -m worker.bundle.health orchestrator/artifacts/health/{0} {0}"


def delegation(pte: Path) -> tuple[list[str], list[str]]:
    """The delegates' backend ids and the kinds of instruction of the program's one method."""
    plan = deserialize_pte_binary(pte.read_bytes()).program.execution_plan[0]
    return [d.id for d in plan.delegates], [
        type(i.instr_args).__name__ for c in plan.chains for i in c.instructions
    ]


@pytest.mark.parametrize("backend", ["vulkan", "xnnpack"])
def test_shipped_health_bundle_is_the_lowered_program(backend: str, tmp_path: Path) -> None:
    shipped = SHIPPED / backend
    manifest = load_manifest(shipped)
    assert (manifest.policy, manifest.backend) == (health.HEALTH_POLICY, backend)
    (program,) = manifest.programs
    assert [(t.name, t.shape) for t in program.inputs + program.outputs] == [
        ("state", [1, 8]),
        ("out", [1, 8]),
    ]
    assert sum(f.stat().st_size for f in shipped.rglob("*") if f.is_file()) < 32_000  # a few KB
    # Every instruction is the one delegate call: no op fell back to the portable kernels.
    assert delegation(shipped / program.pte) == ([DELEGATE[backend]], ["DelegateCall"])

    built = health.build(tmp_path / backend, backend)
    load_manifest(built)
    assert (built / program.pte).read_bytes() == (shipped / program.pte).read_bytes(), REBUILD.format(backend)
    for name in ("frames.npz", f"inputs/{program.name}/0.bin"):  # seeded inputs: the same bytes anywhere
        assert (built / name).read_bytes() == (shipped / name).read_bytes(), REBUILD.format(backend)
    # Eager outputs are the CPU's float arithmetic: another CPU's kernels may round the last bit otherwise.
    for name in ("testcase.npz", "references.npz"):
        with np.load(built / name) as ours, np.load(shipped / name) as theirs:
            assert ours.files == theirs.files, REBUILD.format(backend)
            for key in ours.files:
                assert ours[key].dtype == theirs[key].dtype and ours[key].shape == theirs[key].shape
                np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_each_backend_ships_its_own_bundle() -> None:
    shas = {backend: bundle_digest(SHIPPED / backend) for backend in DELEGATE}
    assert len(set(shas.values())) == len(shas)
