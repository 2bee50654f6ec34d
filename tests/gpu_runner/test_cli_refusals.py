"""`coverfarm runner run-bundle` as a real subprocess, given bundles it must refuse: each refusal is one
line on stderr and a non-zero exit (the result document still goes to --out, its summary to stdout),
and a bundle set with one refused bundle exits non-zero naming it, after writing every result."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from runnerhelp import ROOT

from coverfarm.digest import bundle_digest

HEALTH = ROOT / "orchestrator" / "artifacts" / "health" / "xnnpack"
QUICK = ["--runtime", "python", "--warmup", "0", "--min-chunks", "1", "--min-seconds", "0", "--replicas", "1"]


def coverfarm(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COVERFARM_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "coverfarm_cli", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def one_error_line(run: subprocess.CompletedProcess[str]) -> str:
    lines = run.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("coverfarm: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    return errors[0]


def health_copy(where: Path, name: str | None = None) -> Path:
    """The farm's XNNPACK health-check bundle, copied under its own sha256 (or ``name``)."""
    bundle = where / (name or bundle_digest(HEALTH))
    shutil.copytree(HEALTH, bundle)
    return bundle


def test_a_tampered_manifest_is_one_line_on_stderr(tmp_path: Path) -> None:
    bundle = health_copy(tmp_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["tolerance"]["atol"] = 1.0
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "result.json"
    run = coverfarm(tmp_path / "home", "runner", "run-bundle", str(bundle), "--out", str(out), *QUICK)
    assert run.returncode == 1
    line = one_error_line(run)
    assert f"bundle {bundle}: failed (bundle): bundle {bundle} is refused: its content hashes to" in line, (
        line
    )
    assert json.loads(out.read_text())["status"] == "failed"  # the result document is still written
    assert json.loads(run.stdout)["status"] == "failed"  # and its summary is the command's output


def test_a_truncated_program_is_one_line_on_stderr(tmp_path: Path) -> None:
    bundle = health_copy(tmp_path, "bundle")
    program = bundle / "programs" / "health.pte"
    program.write_bytes(program.read_bytes()[:200])
    out = tmp_path / "result.json"
    run = coverfarm(tmp_path / "home", "runner", "run-bundle", str(bundle), "--out", str(out),
                    "--sha256", bundle_digest(bundle), *QUICK)  # fmt: skip
    assert run.returncode == 1
    line = one_error_line(run)
    assert f"bundle {bundle}: failed (refused_at_load): program health failed to load" in line, line
    assert f"(the result is in {out})" in line


def test_a_manifest_path_out_of_the_bundle_is_one_line_on_stderr(tmp_path: Path) -> None:
    bundle = health_copy(tmp_path, "bundle")
    (tmp_path / "outside").mkdir()
    shutil.copyfile(bundle / "programs" / "health.pte", tmp_path / "outside" / "evil.pte")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["programs"][0]["pte"] = "../outside/evil.pte"
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    run = coverfarm(tmp_path / "home", "runner", "run-bundle", str(bundle), "--out", str(tmp_path / "r.json"),
                    "--sha256", bundle_digest(bundle), *QUICK)  # fmt: skip
    assert run.returncode == 1
    assert "'../outside/evil.pte' climbs out of the bundle (..)" in one_error_line(run)


def bundle_set(folder: Path, shas: list[str]) -> None:
    entries = [{"bundle_sha256": sha, "policy": f"p{i}", "backend": "xnnpack", "cells": [i]}
               for i, sha in enumerate(shas)]  # fmt: skip
    document = {"url": "http://farm", "sweep_id": 1, "device_class": "cpu-x86_64-xnnpack", "bundles": entries}
    (folder / "bundles.json").write_text(json.dumps(document))


def test_a_dotdot_name_in_a_bundle_set_is_one_line_on_stderr(tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    bundle_set(bundles, ["../outside"])
    run = coverfarm(tmp_path / "home", "runner", "run-bundle", str(bundles), "--out", str(tmp_path / "out"),
                    "--unsigned", *QUICK)  # fmt: skip
    assert run.returncode == 2
    line = one_error_line(run)
    assert (
        "bundles.json is not a bundle set written by `coverfarm sweep bundles`: bundles.0.bundle_sha256:"
        in line
    )
    assert "'../outside'" in line
    assert not (tmp_path / "out").exists()


def test_a_bundle_set_with_one_refused_bundle_exits_non_zero_naming_it(tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    good = health_copy(bundles)
    forged = "ab" * 32
    health_copy(bundles, forged)  # content that does not hash to its name
    bundle_set(bundles, [good.name, forged])
    out = tmp_path / "results"
    run = coverfarm(tmp_path / "home", "runner", "run-bundle", str(bundles), "--out", str(out), "--unsigned",
                    *QUICK)  # fmt: skip
    assert run.returncode == 1, run.stderr
    line = one_error_line(run)
    assert line.startswith(
        f"coverfarm: error: 1 of 2 bundles did not run ok: {forged[:12]} (p1) failed (bundle):"
    )
    assert "(p0)" not in line
    # Every result is written, the refused one's included.
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{good.name}.json", f"{forged}.json"])
    assert json.loads((out / f"{good.name}.json").read_text())["status"] == "ok"
    assert "2 results in" in run.stdout
