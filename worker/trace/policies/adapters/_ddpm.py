"""Denoising policies as an ``observation`` program (once) and a ``denoise_step`` program (N times).

The step maps ``(cond, x_t, t, z_t) -> (x_{t-1}, chunk)``: the policy's noise predictor followed by the
DDPM update of diffusers' ``DDPMScheduler.step``. diffusers indexes its tables with a Python timestep,
branches on it (``prev_t >= 0``, ``t > 0``) and draws the variance noise itself; here ``t`` is a tensor
input and the per-timestep coefficients are precomputed with the scheduler's own tensors and formulas,
then gathered by ``t``, and the variance noise ``z_t`` is an input (zero weight at ``t = 0``, where
diffusers adds none). ``chunk`` is the ``n_action_steps`` slice of ``x_{t-1}`` that
``predict_action_chunk`` returns; the plan takes it from the last step.

Timesteps are plan constants (``t.00`` …); the initial noise ``noise`` and the variance noises
``step_noise.00`` … are frame inputs. The order in which the policy's own sampling loop draws its noise is
the order of these inputs, so ``eager_chunk`` replays them into the policy's loop (see ``_randomness``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from worker.trace.policies.adapters._common import export_program
from worker.trace.policies.adapters._randomness import replay
from worker.trace.policies.base import Call, ChunkPlan, TracedPolicy
from worker.trace.policies.observation import standard_normal

SUBSTITUTION = (
    "diffusers DDPMScheduler.step (Python-int timestep indexing and branches, its own randn) -> the same "
    "update with per-timestep coefficients precomputed from the scheduler's tensors and gathered by the "
    "timestep input, the variance noise as an input (equal to the policy's own sampling loop given the same "
    "noise)"
)

NoisePredictor = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class DDPMStep(torch.nn.Module):
    """One denoising step with the DDPM update inside: ``(cond, x_t, t, z_t) -> (x_{t-1}, chunk)``."""

    def __init__(
        self,
        owner: torch.nn.Module,
        predict_noise: NoisePredictor,
        scheduler: Any,  # a diffusers DDPMScheduler
        num_inference_steps: int,
        chunk: slice,
    ) -> None:
        super().__init__()
        config = scheduler.config
        if config.variance_type != "fixed_small" or config.thresholding:
            raise NotImplementedError("only DDPM with fixed_small variance and no thresholding is traced")
        if config.prediction_type not in ("epsilon", "sample"):
            raise NotImplementedError(f"DDPM prediction_type {config.prediction_type!r} is not traced")
        self.owner = owner
        self.predict_noise = predict_noise
        self.epsilon = config.prediction_type == "epsilon"
        self.clip = float(config.clip_sample_range) if config.clip_sample else None
        self.chunk = chunk
        scheduler.set_timesteps(num_inference_steps)
        self.timesteps: list[int] = [int(t) for t in scheduler.timesteps]
        tables = {name: torch.zeros(config.num_train_timesteps) for name in _TABLES}
        for t in self.timesteps:
            for name, value in _coefficients(scheduler, t).items():
                tables[name][t] = value
        for name, table in tables.items():
            self.register_buffer(name, table, persistent=False)

    def forward(
        self, cond: torch.Tensor, sample: torch.Tensor, t: torch.Tensor, noise: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        def at(table: torch.Tensor) -> torch.Tensor:
            return table[t].reshape(-1, *([1] * (sample.dim() - 1)))

        sqrt_beta_prod, sqrt_alpha_prod, original_coeff, current_coeff, noise_std = (
            self.get_buffer(name) for name in _TABLES
        )

        model_output = self.predict_noise(sample, t, cond)
        if self.epsilon:
            original = (sample - at(sqrt_beta_prod) * model_output) / at(sqrt_alpha_prod)
        else:
            original = model_output
        if self.clip is not None:
            original = original.clamp(-self.clip, self.clip)
        previous = at(original_coeff) * original + at(current_coeff) * sample
        previous = previous + at(noise_std) * noise
        return previous, previous[:, self.chunk]


_TABLES = ("sqrt_beta_prod", "sqrt_alpha_prod", "original_coeff", "current_coeff", "noise_std")


def _coefficients(scheduler: Any, t: int) -> dict[str, torch.Tensor]:
    # The same float32 tensor arithmetic as DDPMScheduler.step and _get_variance, for one timestep.
    prev_t = int(scheduler.previous_timestep(t))
    alpha_prod_t = scheduler.alphas_cumprod[t]
    alpha_prod_t_prev = scheduler.alphas_cumprod[prev_t] if prev_t >= 0 else scheduler.one
    beta_prod_t = 1 - alpha_prod_t
    beta_prod_t_prev = 1 - alpha_prod_t_prev
    current_alpha_t = alpha_prod_t / alpha_prod_t_prev
    current_beta_t = 1 - current_alpha_t
    std = scheduler._get_variance(t) ** 0.5 if t > 0 else torch.tensor(0.0)
    return {
        "sqrt_beta_prod": beta_prod_t ** (0.5),
        "sqrt_alpha_prod": alpha_prod_t ** (0.5),
        "original_coeff": (alpha_prod_t_prev ** (0.5) * current_beta_t) / beta_prod_t,
        "current_coeff": current_alpha_t ** (0.5) * beta_prod_t_prev / beta_prod_t,
        "noise_std": std,
    }


def trace_denoiser(
    name: str,
    *,
    observation_module: torch.nn.Module,
    observation_names: tuple[str, ...],
    make_observation: Callable[[int], dict[str, torch.Tensor]],
    step: DDPMStep,
    noise_shape: tuple[int, ...],
    policy_chunk: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    draws_initial_noise: bool,
    seed: int,
    checkpoint: Path | None,
    config: dict[str, object],
) -> TracedPolicy:
    """Export both programs and build the plan; ``policy_chunk`` is the policy's own sampling for a frame."""
    n = len(step.timesteps)
    step_noise = tuple(f"step_noise.{k:02d}" for k in range(n))

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        frame = make_observation(index)
        frame["noise"] = standard_normal(noise_shape, seed=seed, index=index, name="noise")
        for k, key in enumerate(step_noise):
            if step.timesteps[k] > 0:
                frame[key] = standard_normal(noise_shape, seed=seed, index=index, name=key)
            else:
                frame[key] = torch.zeros(noise_shape)  # diffusers adds no noise at t = 0
        return frame

    frame = make_frame(0)
    obs_args = tuple(frame[key] for key in observation_names)
    observation = export_program("observation", observation_module, obs_args, observation_names, ("cond",))
    with torch.no_grad():
        cond = observation_module(*obs_args)
    t0 = torch.full((noise_shape[0],), step.timesteps[0], dtype=torch.long)
    step_args = (cond, frame["noise"], t0, frame[step_noise[0]])
    denoise = export_program(
        "denoise_step", step, step_args, ("cond", "x", "t", "noise"), ("x_prev", "action")
    )

    samples = ["noise", *(f"x.{k + 1:02d}" for k in range(n))]
    constants = {
        f"t.{k:02d}": torch.full((noise_shape[0],), t, dtype=torch.long) for k, t in enumerate(step.timesteps)
    }
    calls = [Call("observation", observation_names, ("cond",))]
    for k in range(n):
        chunk_name = "action" if k == n - 1 else f"action.{k + 1:02d}"
        calls.append(
            Call(
                "denoise_step",
                ("cond", samples[k], f"t.{k:02d}", step_noise[k]),
                (samples[k + 1], chunk_name),
            )
        )
    plan = ChunkPlan(
        frame_inputs=(*observation_names, "noise", *step_noise),
        calls=tuple(calls),
        outputs=("action",),
        constants=constants,
    )

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        draws = [frame[key] for k, key in enumerate(step_noise) if step.timesteps[k] > 0]
        if draws_initial_noise:
            draws.insert(0, frame["noise"])
        with torch.no_grad():
            return {"action": replay(lambda: policy_chunk(frame), draws)}

    return TracedPolicy(
        policy=name,
        programs=[observation, denoise],
        plan=plan,
        eager={"observation": observation_module, "denoise_step": step},
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        config=config,
        substitutions=[SUBSTITUTION],
        seed=seed,
        checkpoint=None if checkpoint is None else str(checkpoint),
    )
