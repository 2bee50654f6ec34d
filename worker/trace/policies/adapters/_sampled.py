"""The trace of a policy whose action chunk samples (tdmpc's CEM planner, vqbet's code sampling).

One ``forward`` program takes the observation and every random draw the policy makes for one chunk, in the
order the policy makes them (``draw.00``, ``draw.01``, …); see ``_randomness``. A frame's draws are
recorded by running the policy's own code on the global RNG seeded per frame, so frame ``i`` is
reproducible and the multinomial substitution is checked against ``torch.multinomial`` on every frame made.
At trace time the exported program's eager module, fed frame 0's recorded draws, must give exactly what the
policy's own code gave while recording (the substitution's test on the example input). ``reset`` runs
before every chunk (outside the graph), so the policy's warm-start state (tdmpc's previous CEM mean)
never leaks from one chunk into the next: every chunk is computed as by a freshly reset policy.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from worker.trace.fake_weights import is_fake
from worker.trace.policies.adapters._common import export_program, single_program_plan
from worker.trace.policies.adapters._randomness import ReplayProgram, SubstitutionMismatch, draw_seed, record
from worker.trace.policies.base import TracedPolicy

MULTINOMIAL_SUBSTITUTION = (
    "torch.multinomial(p, 1) -> argmax(p / q) with q the Exp(1) draw torch.multinomial makes internally, "
    "passed in as an input (checked to pick the same index as torch.multinomial on every recorded frame)"
)


def trace_sampling_policy(
    name: str,
    *,
    policy: torch.nn.Module,
    observation: Callable[[int], dict[str, torch.Tensor]],
    chunk_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    reset: Callable[[], None],
    seed: int,
    checkpoint: Path | None,
    config: dict[str, object],
    substitutions: list[str],
) -> TracedPolicy:
    def recorded(index: int) -> tuple[dict[str, torch.Tensor], torch.Tensor, list[torch.Tensor]]:
        obs = observation(index)
        reset()
        result, draws, _ = record(lambda: chunk_fn(dict(obs)), draw_seed(seed, index))
        reset()
        return obs, result, draws

    obs0, expected, draws0 = recorded(0)
    obs_names = tuple(obs0)
    draw_names = tuple(f"draw.{k:02d}" for k in range(len(draws0)))
    input_names = obs_names + draw_names

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        obs, _, draws = recorded(index) if index else (obs0, expected, draws0)
        obs, draws = {k: v.clone() for k, v in obs.items()}, [d.clone() for d in draws]
        if len(draws) != len(draw_names):
            raise RuntimeError(
                f"{name} made {len(draws)} draws for frame {index}, expected {len(draw_names)}"
            )
        return {**obs, **dict(zip(draw_names, draws, strict=True))}

    module = ReplayProgram(policy, obs_names, chunk_fn, reset)
    frame0 = make_frame(0)
    with torch.no_grad():
        replayed = module(*frame0.values())
    # Fake weights (``weights: fake``) hold no values to compare: the check runs with real ones.
    if not is_fake(replayed) and not torch.equal(replayed, expected):
        raise SubstitutionMismatch(
            f"{name}: the policy's code fed its recorded draws gave another chunk than it drew itself "
            f"(max abs difference {float((replayed - expected).abs().max()):.3g})"
        )
    with warnings.catch_warnings():
        # tdmpc's plan keeps its CEM mean on the policy for warm starts (reset() clears it again below).
        warnings.filterwarnings("ignore", message=r"The tensor attribute .* was assigned during export")
        program = export_program("forward", module, tuple(frame0.values()), input_names, ("action",))
    return TracedPolicy(
        policy=name,
        programs=[program],
        plan=single_program_plan(input_names, ("action",)),
        eager={"forward": module},
        make_frame=make_frame,
        eager_chunk=None,
        config=config,
        substitutions=substitutions,
        seed=seed,
        checkpoint=None if checkpoint is None else str(checkpoint),
    )
