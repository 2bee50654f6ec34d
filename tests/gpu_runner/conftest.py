"""Tiny XNNPACK and Vulkan bundles, built once per session by the engine's own functions
(tinybundle.py), so the runner is tested on exactly the format the engine writes.

Building them imports torch into the test process; that is fine here: the runner's torch-freeness is
checked in child processes (test_runner_no_torch.py, test_runner_bundles.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tinybundle import build

    return {
        backend: Path(path)
        for backend, path in build(tmp_path_factory.mktemp("tiny"), ["xnnpack", "vulkan", "openvino"]).items()
    }
