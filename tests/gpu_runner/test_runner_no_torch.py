"""Everything the runner does before it needs the ExecuTorch runtime is torch-free: the modules, the
``coverfarm`` parser, the bundle's address check and manifest, and the host probe's system parts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runnerhelp import ROOT

CHECK = """
import sys
from pathlib import Path
import coverfarm_cli
import coverfarm_cli.runner
import gpu_runner.bundle_run, gpu_runner.probe, coverfarm.device_result, gpu_runner.runtime, farmrun.board
coverfarm_cli.build_parser()
bundle = Path(sys.argv[1])
assert gpu_runner.bundle_run.verify(bundle) == bundle.name
coverfarm.bundle_manifest.load_manifest(bundle)
farmrun.board.board(), gpu_runner.probe.vulkan_devices(), gpu_runner.probe.thermal_zones()
loaded = sorted(name for name in sys.modules if name == "torch" or name.startswith("torch."))
assert not loaded, loaded[:5]
"""


def test_runner_modules_and_checks_do_not_import_torch(tiny_bundles: dict[str, Path]) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECK, str(tiny_bundles["xnnpack"])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


IMPORTS = """
import importlib.metadata as md
import sys
import coverfarm_cli, coverfarm_cli.runner, farmrun.signing, coverfarm.device_result
import gpu_runner.bundle_run, gpu_runner.native.runtime, gpu_runner.probe, gpu_runner.replicas
coverfarm_cli.build_parser()
dists = md.packages_distributions()
tops = {name.split(".")[0] for name in sys.modules} - set(sys.stdlib_module_names)
print("\\n".join(sorted({d for top in tops for d in dists.get(top, [])})))
"""
# httpx imports its own command line (click, rich, pygments) when they are installed, and runs without
# them; setuptools' import hook is the virtualenv's, not the runner's.
NOT_NEEDED = {"click", "rich", "pygments", "markdown-it-py", "mdurl", "setuptools", "coverfarm"}


def _name(requirement: str) -> str:
    return requirement.split("==")[0].strip().lower().replace("_", "-")


def _pins(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return {_name(line): line.split("==")[1].strip() for line in lines if "==" in line}


def test_the_runners_requirements_name_every_package_it_imports_at_the_locked_versions() -> None:
    """requirements/runner.txt is what a device host installs: every third-party package the runner's
    command, bundle run, native runtime, probe and result signing import is in it, pinned as lock.txt."""
    runner = _pins(ROOT / "requirements" / "runner.txt")
    lock = _pins(ROOT / "requirements" / "lock.txt")
    assert {name: lock.get(name) for name in runner} == runner
    result = subprocess.run(
        [sys.executable, "-c", IMPORTS], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    imported = {_name(line) for line in result.stdout.split()}
    assert "cryptography" in imported and "numpy" in imported  # the check sees the runner's imports
    assert imported - NOT_NEEDED <= set(runner), imported - NOT_NEEDED - set(runner)
