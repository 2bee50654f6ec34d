"""The device runners' health-check bundle: one tiny program, built with the engine's own bundle writer.

A new (or recovering) runner must run the bundle of one of its classes' backend and match its
references before it takes work (docs/design.md, "Users and their three jobs"). The farm ships one per
backend, built by this module under ``orchestrator/artifacts/health/<backend>/`` (XNNPACK and Vulkan,
the same program lowered with each backend's stock partitioner) so that the orchestrator, which never
imports torch, can serve it; ``python -m worker.bundle.health orchestrator/artifacts/health/vulkan vulkan``
rebuilds one (after an ExecuTorch upgrade, say) and prints where it went. The Vulkan one is lowered
here with the wheel's ``VulkanPartitioner``; the wheel has no Vulkan runtime, so it runs only on a
runner whose runtime registers ``VulkanBackend``. Imports torch and ExecuTorch: CPU worker side only.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from coverfarm.result import ResultDocument, StageResult, StageStatus
from coverfarm.versions import versions
from worker.bundle.write import write_bundle
from worker.child.events import EventLog
from worker.lower.backends import get_backend
from worker.trace.policies.base import Call, ChunkPlan, TracedPolicy, TracedProgram
from worker.trace.stage import write_trace

HEALTH_POLICY = "health-check"
FRAMES = 4


class HealthModel(torch.nn.Module):
    """Two linear layers with a ReLU between: enough for the runtime to load a delegate, pass a tensor
    from one op to the next inside it and compute something (a few KB on every backend)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(state)))


def single_program(
    name: str,
    model: torch.nn.Module,
    examples: Callable[[int], tuple[torch.Tensor, ...]],
    policy: str,
    inputs: tuple[str, ...] | None = None,
) -> TracedPolicy:
    """``model`` as a one-program policy whose frame ``i`` feeds it ``examples(i)`` (frame 0 is also
    the traced example), its inputs named ``inputs`` (default ``in0``, ``in1``, ...)."""
    model = model.eval()
    inputs = inputs or tuple(f"in{i}" for i in range(len(examples(0))))
    call = Call(name, inputs, ("out",))
    plan = ChunkPlan(frame_inputs=inputs, calls=(call,), outputs=("out",), constants={})

    def make_frame(i: int) -> dict[str, torch.Tensor]:
        return dict(zip(inputs, examples(i), strict=True))

    return TracedPolicy(
        policy=policy,
        programs=[TracedProgram(name, torch.export.export(model, examples(0)), inputs, ("out",))],
        plan=plan,
        eager={name: model},
        make_frame=make_frame,
    )


def traced() -> TracedPolicy:
    torch.manual_seed(0)
    return single_program(
        "health",
        HealthModel(),
        lambda i: (torch.randn(1, 8, generator=torch.Generator().manual_seed(i)),),
        HEALTH_POLICY,
        inputs=("state",),
    )


def build(out: Path, backend: str, policy: TracedPolicy | None = None) -> Path:
    """Write the bundle of ``policy`` (default: the health check) lowered for ``backend`` with the
    backend's stock partitioner as ``out`` (replaced), and return it."""
    from executorch.exir import to_edge_transform_and_lower

    policy = policy or traced()
    with tempfile.TemporaryDirectory(prefix="health.") as work_name:
        work = Path(work_name)
        trace_dir, lowered = work / "trace", work / "lowered"
        trace_dir.mkdir()
        lowered.mkdir()
        log = EventLog(work / "events.jsonl")
        trace = write_trace(policy, trace_dir, log, FRAMES)
        log.close()
        for program in policy.programs:
            edge = to_edge_transform_and_lower(
                program.exported, partitioner=[get_backend(backend).make_partitioner()]
            )
            (lowered / f"{program.name}.pte").write_bytes(edge.to_executorch().buffer)
        doc = ResultDocument(
            policy=policy.policy,
            backend=backend,
            trace=StageResult(status=StageStatus.OK),
            versions=versions(backend),
        )
        bundle = write_bundle(doc, trace, trace_dir, lowered, work / "bundles")
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(bundle.path, out)
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "xnnpack"))
