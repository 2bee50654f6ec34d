"""What a run does with a bundle that is not what its manifest says: each is a failed result with the
cause and its class (``bundle`` or ``crashed``), never an exception, on a copy of the farm's XNNPACK
health-check bundle changed in one way (and verified against the changed copy's own sha256)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from coverfarm.device_result import DeviceResult, TimingRules
from coverfarm.digest import bundle_digest
from gpu_runner.bundle_run import run_bundle

HEALTH = Path(__file__).resolve().parents[2] / "orchestrator" / "artifacts" / "health" / "xnnpack"
QUICK = TimingRules(warmup=0, min_chunks=1, min_s=0.0, replicas=1)


def changed(tmp_path: Path, change: Callable[[Path], None]) -> DeviceResult:
    bundle = tmp_path / "bundle"
    shutil.copytree(HEALTH, bundle)
    change(bundle)
    sha = bundle_digest(bundle) if (bundle / "manifest.json").exists() else "0" * 64
    return run_bundle(bundle, expected_sha256=sha, runtime="python", rules=QUICK)


def manifest_edit(edit: Callable[[dict[str, object]], None]) -> Callable[[Path], None]:
    def change(bundle: Path) -> None:
        manifest = json.loads((bundle / "manifest.json").read_text())
        edit(manifest)
        (bundle / "manifest.json").write_text(json.dumps(manifest))

    return change


def corrupt(name: str) -> Callable[[Path], None]:
    return lambda bundle: (bundle / name).write_bytes(b"not a zip file")


def reshaped_reference(bundle: Path) -> None:
    with np.load(bundle / "references.npz") as data:
        arrays = {key: data[key] for key in data.files}
    arrays = {key: np.zeros((3, 3), dtype=value.dtype) for key, value in arrays.items()}
    np.savez(bundle / "references.npz", **arrays)  # type: ignore[arg-type]


def unfed(manifest: dict[str, object]) -> None:
    manifest["plan"]["calls"][0]["inputs"] = ["nothing-made-this"]  # type: ignore[index]


def two_outputs(manifest: dict[str, object]) -> None:
    manifest["plan"]["calls"][0]["outputs"] = ["out", "extra"]  # type: ignore[index]


def unknown_program(manifest: dict[str, object]) -> None:
    manifest["plan"]["calls"][0]["program"] = "missing"  # type: ignore[index]


@pytest.mark.parametrize(
    ("change", "kind", "cause"),
    [
        (lambda b: (b / "manifest.json").unlink(), "bundle", "is not a bundle (no manifest.json)"),
        (corrupt("manifest.json"), "bundle", "is not a readable bundle manifest"),
        (manifest_edit(unknown_program), "bundle", "the plan calls programs the manifest lacks: missing"),
        (corrupt("testcase.npz"), "bundle", "testcase.npz of the bundle is unreadable"),
        (corrupt("frames.npz"), "bundle", "frames.npz of the bundle is unreadable"),
        (reshaped_reference, "crashed", "output out of frame 0 has shape [1, 8], the reference [3, 3]"),
        (manifest_edit(unfed), "bundle", "the plan feeds health with ['nothing-made-this'], which nothing"),
        (manifest_edit(two_outputs), "crashed", "program health returned 1 outputs, the plan names 2"),
    ],
    ids=[
        "no-manifest",
        "bad-manifest",
        "unknown-program",
        "bad-testcase",
        "bad-frames",
        "shape",
        "feed",
        "output-count",
    ],
)
def test_a_changed_bundle_fails_with_its_cause(
    tmp_path: Path, change: Callable[[Path], None], kind: str, cause: str
) -> None:
    result = changed(tmp_path, change)
    assert result.status == "failed", result
    assert result.error is not None and cause in result.error, result.error
    assert result.failure is not None and result.failure.kind == kind
    assert result.latency is None


def test_a_wrong_sha_is_refused_before_anything_is_loaded(tmp_path: Path) -> None:
    result = run_bundle(HEALTH, expected_sha256="f" * 64, runtime="python", rules=QUICK)
    assert result.status == "failed" and result.failure is not None and result.failure.kind == "bundle"
    assert result.error is not None and "is refused: its content hashes to" in result.error
    assert result.testcase == [] and result.probe is None


def outside_program(tmp_path: Path) -> Path:
    """A program beside the bundle, not in it: the health bundle's own, so it would run and pass."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    shutil.copyfile(HEALTH / "programs" / "health.pte", outside / "evil.pte")
    return outside / "evil.pte"


def pte_at(path: str) -> Callable[[Path], None]:
    def edit(manifest: dict[str, object]) -> None:
        manifest["programs"][0]["pte"] = path  # type: ignore[index]

    return manifest_edit(edit)


def symlinked_out(bundle: Path) -> None:
    """``programs/health.pte`` a link to a program outside: the digest hashes what it points at now."""
    (bundle / "programs" / "health.pte").unlink()
    (bundle / "programs" / "health.pte").symlink_to(outside_program(bundle.parent))


def linked_folder(bundle: Path) -> None:
    (bundle / "elsewhere").symlink_to(outside_program(bundle.parent).parent, target_is_directory=True)
    pte_at("elsewhere/evil.pte")(bundle)


def linked_references(bundle: Path) -> None:
    """A file no manifest field names, ``references.npz``, a link to a copy outside: read, never hashed
    again."""
    outside = bundle.parent / "outside" / "references.npz"
    outside.parent.mkdir(exist_ok=True)
    shutil.copyfile(bundle / "references.npz", outside)
    (bundle / "references.npz").unlink()
    (bundle / "references.npz").symlink_to(outside)


def raw_input_at(path: str) -> Callable[[Path], None]:
    def edit(manifest: dict[str, object]) -> None:
        manifest["programs"][0]["raw_inputs"] = [path]  # type: ignore[index]

    return manifest_edit(edit)


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        (pte_at("../outside/evil.pte"), "'../outside/evil.pte' climbs out of the bundle (..)"),
        (pte_at("programs/../../outside/evil.pte"), "climbs out of the bundle (..)"),
        (pte_at("{outside}"), "is absolute: a bundle names its files relative to itself"),
        (symlinked_out, "programs[0].pte 'programs/health.pte' leads outside the bundle (to "),
        (linked_folder, "programs[0].pte 'elsewhere/evil.pte' leads outside the bundle (to "),
        (pte_at("programs"), "programs[0].pte 'programs' is not a file of the bundle its sha256 covers"),
        (pte_at("programs/missing.pte"), "'programs/missing.pte' is not a file of the bundle its sha256"),
        (raw_input_at("../../etc/passwd"), "'../../etc/passwd' climbs out of the bundle (..)"),
        (linked_references, "the bundle's references.npz is a link to "),
    ],
    ids=["dotdot", "dotdot-in", "absolute", "symlink-file", "symlink-dir", "folder", "missing", "raw", "npz"],
)
def test_a_manifest_path_outside_the_bundle_is_refused_before_any_program_loads(
    tmp_path: Path, change: Callable[[Path], None], cause: str
) -> None:
    """The bundle's sha256 is the device path's trust anchor: a program it does not cover is never run,
    even when the sha256 given is the edited bundle's own."""
    program = outside_program(tmp_path)

    def edited(bundle: Path) -> None:
        change(bundle)
        text = (bundle / "manifest.json").read_text().replace("{outside}", str(program))
        (bundle / "manifest.json").write_text(text)

    result = changed(tmp_path, edited)
    assert result.status == "failed", result.status
    assert result.failure is not None and result.failure.kind == "bundle"
    assert result.error is not None and cause in result.error, result.error
    assert result.testcase == [] and result.latency is None
