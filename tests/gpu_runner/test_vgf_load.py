"""A real VGF program (two linears, lowered with the wheel's VgfPartitioner) loaded by the wheel's runtime:
where it cannot load here, the failure quotes what the runtime logged (through Python's stderr, or on file
descriptor 2), not only its error code."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from gpu_runner.runtime import RuntimeFailure, load_program, runtime_log, unavailable_backends
from worker.lower.backends import get_backend


class TwoLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


@pytest.fixture(scope="module")
def vgf_pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from executorch.exir import to_edge_transform_and_lower

    ep = torch.export.export(TwoLinear().eval(), (torch.randn(2, 8),))
    lowered = to_edge_transform_and_lower(ep, partitioner=[get_backend("vgf").make_partitioner()])
    pte = tmp_path_factory.mktemp("vgf") / "forward.pte"
    pte.write_bytes(lowered.to_executorch().buffer)
    return pte


def test_a_refused_vgf_program_says_why_in_the_runtimes_words(vgf_pte: Path) -> None:
    if "VgfBackend" not in unavailable_backends(["VgfBackend"]):
        # Available (a Vulkan device with Arm's ML extensions): the wheel's runtime still refuses blobs
        # of the VGF format the installed model converter writes (docs/design.md, "Arm VGF").
        expected = "Failed to create VGF header decoder"
    else:
        expected = "Backend VgfBackend is not available."
    with pytest.raises(RuntimeFailure) as refused:
        load_program("forward", vgf_pte, "vgf")
    failure = refused.value.failure
    assert failure is not None and failure.kind == "refused_at_load"
    assert failure.message.startswith("Failed to load method forward, error: ")
    assert "; the runtime said: " in failure.cause and expected in failure.cause
    assert "VgfBackend" in failure.cause.split("; the runtime said: ")[1]


def test_what_the_runtime_logs_is_collected_and_passed_on(capfd: pytest.CaptureFixture[str]) -> None:
    with runtime_log() as said:
        print("[method.cpp:90] Backend VgfBackend is not available.", file=sys.stderr)
        os.write(2, b"[VGFSetup.cpp:1497] Failed to create VGF header decoder\nnot a log line\n")
    assert said == [
        "[method.cpp:90] Backend VgfBackend is not available.",
        "[VGFSetup.cpp:1497] Failed to create VGF header decoder",
    ]
    err = capfd.readouterr().err
    assert "is not available.\n" in err and err.endswith("header decoder\nnot a log line\n")
