"""A STAND-IN for worker.engine.analyze that also makes a bundle, for the device runner tests only.

It returns the farm stand-in's result document (tests/farm/standin_engine.py) and, on xnnpack, a real
XNNPACK bundle: the farm's health-check bundle with the cell's policy written into its manifest (so each
policy has its own address). No torch, no lowering: the device side is what these tests measure.

``diffusion``'s bundle is tampered in the artifact store before the worker stores it (the store keeps
what it already holds), so that a runner fetches content that does not match its address.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from standin_engine import analyze as standin

from coverfarm.digest import bundle_digest
from coverfarm.result import Bundle, Options, ResultDocument
from coverfarm.settings import get_settings
from orchestrator.artifacts.health import SHIPPED

TAMPERED_POLICY = "diffusion"


def make_bundle(policy: str, root: Path) -> Bundle:
    staging = root / f".staging-{policy}"
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(SHIPPED / "xnnpack", staging)
    manifest = json.loads((staging / "manifest.json").read_text())
    manifest["policy"] = policy
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    sha = bundle_digest(staging)
    final = root / sha
    if final.exists():
        shutil.rmtree(staging)
    else:
        staging.rename(final)
    return Bundle(sha256=sha, path=str(final))


def _tamper_in_store(bundle: Bundle) -> None:
    stored = get_settings().artifacts_dir / bundle.sha256
    if not stored.exists():
        shutil.copytree(bundle.path, stored)
        references = stored / "references.npz"
        data = bytearray(references.read_bytes())
        data[-20] ^= 0xFF
        references.write_bytes(bytes(data))


def analyze(
    policy: str,
    backend: str,
    options: Options,
    out_dir: Path,
    progress: Callable[[str], None] | None = None,
) -> ResultDocument:
    doc = standin(policy, backend, options, out_dir, progress)
    if backend != "xnnpack" or doc.export.status != "ok":
        return doc
    bundle = make_bundle(policy, out_dir)
    if policy == TAMPERED_POLICY:
        _tamper_in_store(bundle)
    return doc.model_copy(update={"bundle": bundle})
