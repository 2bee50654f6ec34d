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
import gpu_runner.bundle_run, gpu_runner.probe, coverfarm.device_result, gpu_runner.runtime
coverfarm_cli.build_parser()
bundle = Path(sys.argv[1])
assert gpu_runner.bundle_run.verify(bundle) == bundle.name
gpu_runner.manifest.load_manifest(bundle)
gpu_runner.probe.board(), gpu_runner.probe.vulkan_devices(), gpu_runner.probe.thermal_zones()
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
