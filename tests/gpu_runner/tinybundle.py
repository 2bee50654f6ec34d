"""Build tiny bundles with the engine's own functions (test-only: imports torch and the worker).

Imported by conftest.py, or run as a script (``python tinybundle.py OUT xnnpack vulkan``, which prints
``{backend: bundle path}`` as JSON). In the XNNPACK bundle two programs exercise the plan: ``obs`` runs
once and feeds ``step``, which runs twice with the timesteps as plan constants, like a denoising
policy. The Vulkan bundle holds ``obs`` alone: it only has to show that loading it fails.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

from coverfarm.result import Options, ResultDocument, StageResult, StageStatus
from worker.bundle.write import write_bundle
from worker.child.events import EventLog
from worker.lower.stage import write_program
from worker.trace.policies.base import Call, ChunkPlan, TracedPolicy, TracedProgram
from worker.trace.stage import write_trace


class Obs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 8)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(state))


class ObsWithCpuOp(Obs):
    """``Obs`` with a running sum XNNPACK does not take (``aten.cumsum``), so it stays on the CPU."""

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(super().forward(state), dim=1)


class Step(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mix = torch.nn.Linear(8, 8)

    def forward(self, features: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return x - 0.5 * torch.tanh(self.mix(features) + x) * t


def traced_policy(two_programs: bool = True, cpu_op: bool = False) -> TracedPolicy:
    """``obs`` then ``step`` twice; or ``obs`` alone (lowering for Vulkan takes ~15 s per program);
    ``cpu_op``: ``obs`` ends with an op the backend leaves on the CPU."""
    torch.manual_seed(0)
    obs, step = (ObsWithCpuOp() if cpu_op else Obs()).eval(), Step().eval()
    state, noise, t = torch.randn(1, 4), torch.randn(1, 8), torch.tensor([0.7])
    plan = ChunkPlan(
        frame_inputs=("observation.state", "noise"),
        calls=(
            Call("obs", ("observation.state",), ("features",)),
            Call("step", ("features", "noise", "t.00"), ("x.1",)),
            Call("step", ("features", "x.1", "t.01"), ("action",)),
        ),
        outputs=("action",),
        constants={"t.00": torch.tensor([0.9]), "t.01": torch.tensor([0.4])},
    )
    if not two_programs:
        plan = ChunkPlan(plan.frame_inputs, plan.calls[:1], ("features",))

    def make_frame(i: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(100 + i)
        return {
            "observation.state": torch.randn(1, 4, generator=generator),
            "noise": torch.randn(1, 8, generator=generator),
        }

    traced = TracedPolicy(
        policy="tiny",
        programs=[
            TracedProgram("obs", torch.export.export(obs, (state,)), ("observation.state",), ("features",)),
            TracedProgram(
                "step",
                torch.export.export(step, (state @ torch.ones(4, 8), noise, t)),
                ("features", "x", "t"),
                ("x.next",),
            ),
        ],
        plan=plan,
        eager={"obs": obs, "step": step},
        make_frame=make_frame,
    )
    if not two_programs:
        traced.programs = traced.programs[:1]
    return traced


class Chain(torch.nn.Module):
    """A chain of ops the runtime runs on its portable kernels when lowered with no partitioner:
    linear, relu, ``* scale``, cumsum, linear, tanh. ``scale`` is the op a numerics test alters."""

    def __init__(self, scale: float = 2.0) -> None:
        super().__init__()
        self.a, self.b, self.scale = torch.nn.Linear(4, 8), torch.nn.Linear(8, 8), scale

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        y = torch.cumsum(torch.relu(self.a(state)) * self.scale, dim=1)
        return torch.tanh(self.b(y))


def chain_policy() -> TracedPolicy:
    """``Chain`` as a one-program policy (``obs``)."""
    from worker.bundle.health import single_program

    torch.manual_seed(0)
    return single_program(
        "obs",
        Chain(),
        lambda i: (torch.randn(1, 4, generator=torch.Generator().manual_seed(100 + i)),),
        "tiny",
        inputs=("observation.state",),
    )


def _altered(policy: TracedPolicy, name: str, lowering: str) -> bytes:
    """The program ``name`` of ``policy`` with one op's output altered, lowered as ``lowering`` lowers:
    ``Chain``'s scale 2.0 → 2.5 (its ``mul``), or ``Obs``'s linear weights × 1.5 (XNNPACK's first call)."""
    from executorch.exir import to_edge_transform_and_lower

    model = policy.eager[name]
    if isinstance(model, Chain):
        altered: torch.nn.Module = Chain(scale=2.5)
        altered.load_state_dict(model.state_dict())
    else:
        altered = type(model)()
        altered.load_state_dict({k: v * 1.5 for k, v in model.state_dict().items()})
    (program,) = [p for p in policy.programs if p.name == name]
    example = tuple(policy.make_frame(0)[n] for n in program.input_names)
    exported = torch.export.export(altered.eval(), example)
    parts = [] if lowering == "portable" else [partitioner(lowering)]
    return bytes(to_edge_transform_and_lower(exported, partitioner=parts).to_executorch().buffer)


def build_numerics(out: Path, lowering: str = "xnnpack", altered: bool = False) -> str:
    """A bundle with ETRecords for numerics runs: ``xnnpack``, the two-program bundle with a CPU-left
    cumsum (``profiled``); ``portable``, ``Chain`` lowered with no partitioner (every op on the runtime's
    portable kernels; its manifest says xnnpack, whose runtime runs it). ``altered``: ``obs``'s program
    computes one op differently from the eager model its ETRecord and references come from."""
    from executorch.exir import to_edge_transform_and_lower

    traced = chain_policy() if lowering == "portable" else traced_policy(cpu_op=True)
    work = Path(tempfile.mkdtemp(prefix=f"numerics-{lowering}.", dir=out))
    trace_dir, lowered = work / "trace", work / "lowered"
    trace_dir.mkdir()
    lowered.mkdir()
    log = EventLog(work / "events.jsonl")
    trace = write_trace(traced, trace_dir, log, 4)
    log.close()
    for program in traced.programs:
        parts = [] if lowering == "portable" else [partitioner(lowering)]
        edge = to_edge_transform_and_lower(program.exported, partitioner=parts, generate_etrecord=True)
        write_program(edge, lowered, program.name, etrecord=True)
    if altered:
        (lowered / "obs.pte").write_bytes(_altered(traced, "obs", lowering))
    doc = ResultDocument(
        policy="tiny",
        backend="xnnpack",
        options=Options(etrecord=True),
        trace=StageResult(status=StageStatus.OK),
    )
    return write_bundle(doc, trace, trace_dir, lowered, out / "bundles").path


def partitioner(backend: str) -> object:
    """The backend's own partitioner with its defaults, as the lower stage makes it."""
    from worker.lower.backends import get_backend

    return get_backend(backend).make_partitioner()


def build(out: Path, backends: list[str], profiled: bool = False) -> dict[str, str]:
    """``profiled``: ``obs`` leaves an op on the CPU and the bundle carries ETRecords, for profiles."""
    from executorch.exir import to_edge_transform_and_lower

    bundles = {}
    for backend in backends:
        traced = traced_policy(two_programs=backend != "vulkan", cpu_op=profiled)
        work = Path(tempfile.mkdtemp(prefix=f"tiny-{backend}.", dir=out))
        trace_dir, lowered = work / "trace", work / "lowered"
        trace_dir.mkdir()
        lowered.mkdir()
        log = EventLog(work / "events.jsonl")
        trace = write_trace(traced, trace_dir, log, 16)
        log.close()
        for program in traced.programs:
            edge = to_edge_transform_and_lower(
                program.exported, partitioner=[partitioner(backend)], generate_etrecord=profiled
            )
            write_program(edge, lowered, program.name, etrecord=profiled)
        options = Options(etrecord=profiled)
        doc = ResultDocument(
            policy="tiny", backend=backend, options=options, trace=StageResult(status=StageStatus.OK)
        )
        bundles[backend] = write_bundle(doc, trace, trace_dir, lowered, out / "bundles").path
    return bundles


if __name__ == "__main__":
    print(json.dumps(build(Path(sys.argv[1]), sys.argv[2:])))
