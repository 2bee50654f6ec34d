"""The orchestrator, the queue module, the Celery app and the worker's task module never import torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from farmkit import ROOT

CHECK = """
import sys
import {module}
{extra}
loaded = sorted(name for name in sys.modules if name == "torch" or name.startswith("torch."))
assert not loaded, loaded[:5]
"""


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("orchestrator.app", "orchestrator.app.create_app()"),
        ("dashboard.app", "dashboard.app.create_app()"),
        ("coverfarm.queues", ""),
        ("farmrun.celery_app", ""),
        ("coverfarm_cli", "coverfarm_cli.build_parser()"),
        ("orchestrator.jobs.tasks", ""),  # the engine is imported by the first job, not by the module
    ],
)
def test_module_does_not_import_torch(module: str, extra: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECK.format(module=module, extra=extra)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
