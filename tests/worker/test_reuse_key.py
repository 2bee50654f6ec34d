"""The real engine's reuse key: what changes it (options, backend, weights resolution, versions, the
engine's code) and what does not."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

import worker.engine
from coverfarm.result import Options
from coverfarm.reuse import reuse_key
from worker.engine import ENGINE_SOURCES, engine_code_digest, stack_fields


def key(backend: str = "xnnpack", **options: object) -> str:
    return reuse_key(stack_fields, "act", backend, Options.model_validate(options))


def test_an_option_added_later_leaves_the_keys_of_stored_results_at_its_default() -> None:
    """``etrecord`` and ``workarounds`` came after results were stored: at their defaults they are not in
    the key, so those results are still found (the key as computed before them); a workaround asked is."""
    plain = {"policy": "act", "backend": "xnnpack", "options": Options().model_dump(mode="json")}
    del plain["options"]["etrecord"], plain["options"]["workarounds"]
    expected = hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()
    assert reuse_key(lambda _p, _o: {}, "act", "xnnpack", Options()) == expected
    rewritten = Options(workarounds=("group_norm_4d",))
    assert reuse_key(lambda _p, _o: {}, "act", "vulkan", rewritten) != reuse_key(
        lambda _p, _o: {}, "act", "vulkan", Options()
    )


def test_the_key_names_the_cell_its_options_and_how_auto_weights_resolve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COVERFARM_WORKER_MEMORY_GB", "24")
    base = key()
    assert key() == base
    changed = [
        key("vulkan"),
        key(force_fp16=True),
        key(lowering="stock"),
        key(constant_prop=False),
        key(seed=1),
        key(timeout_s=1200.0),
        key(weights="real"),
        key(etrecord=True),
    ]
    assert len({base, *changed}) == len(changed) + 1
    # auto resolves against this worker's memory; real and fake do not depend on it.
    real = key(weights="real")
    monkeypatch.setenv("COVERFARM_WORKER_MEMORY_GB", "64")
    assert key() != base
    assert key(weights="real") == real


def test_the_key_changes_with_the_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COVERFARM_WORKER_MEMORY_GB", "24")
    base = key()
    from coverfarm.versions import versions

    bumped = {**versions(), "executorch": "99.0"}
    monkeypatch.setattr(worker.engine, "versions", lambda *_backends: bumped)
    assert key() != base


def test_the_engine_digest_covers_the_code_that_lowers_and_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "worker"
    shutil.copytree(worker.engine.WORKER, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(worker.engine, "WORKER", copy)
    digest = engine_code_digest.__wrapped__
    assert digest() == engine_code_digest()  # the copy is the same code
    not_lowering = copy / "trace" / "policies" / "act.py"
    not_lowering.write_text("# not the engine's lowering code\n", encoding="utf-8")
    assert digest() == engine_code_digest()
    for name in ENGINE_SOURCES:
        path = copy / name
        target = next(iter(sorted(path.rglob("*.py")))) if path.is_dir() else path
        before = digest()
        target.write_text(target.read_text() + "\n# changed\n")
        assert digest() != before, name
