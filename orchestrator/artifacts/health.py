"""The health-check bundles the farm ships (built by ``python -m worker.bundle.health``), served from the
store.

The orchestrator cannot build a bundle (it never imports torch), so the bundles live in the source tree,
under ``health/<backend>/``, and are put into the artifact store under their sha256 the first time a
runner asks. XNNPACK and Vulkan have one each (the same two-linear program, the Vulkan one lowered with
the wheel's ``VulkanPartitioner``); a class whose backend has none leaves its runner quarantined with
that reason. OpenVINO has none: its CPU plugin computes in bf16 where the CPU has it, and the health
bundle then misses fp32's tolerance (docs/design.md, "Adding a backend"). VGF has none: executorch
1.5.1's runtime refuses the VGF blobs the installed model converter writes (docs/design.md, "Arm VGF").
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from coverfarm.digest import bundle_digest
from orchestrator.artifacts.store import ArtifactStore

SHIPPED = Path(__file__).resolve().parent / "health"


@cache
def _shipped_sha(backend: str) -> str | None:
    folder = SHIPPED / backend
    return bundle_digest(folder) if (folder / "manifest.json").is_file() else None


def health_bundle(store: ArtifactStore, backend: str) -> str | None:
    """The sha256 of ``backend``'s health-check bundle, stored; None when the farm ships none."""
    sha = _shipped_sha(backend)
    if sha is None:
        return None
    if not store.has(sha):
        store.put(SHIPPED / backend, sha)
    return sha
