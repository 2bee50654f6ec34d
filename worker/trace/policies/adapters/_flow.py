"""Flow-matching policies as a ``prefix`` program (once) and an Euler ``denoise_step`` program (N times).

The openpi-style policies (smolvla, pi0, pi05) compute one action chunk as: embed the images, the
language tokens and the state, run the vision-language model once over that prefix and keep its
key/value cache, then integrate the action expert's velocity field from t = 1 (noise) to t = 0 in
``num_steps`` forward-Euler steps (``lerobot.policies.common.flow_matching.euler_integrate``), each step
reading the cache. Here the cache leaves the prefix program as two stacked tensors (keys and values,
``[layers, batch, heads, length, head_dim]``) plus the prefix's padding mask, and the step program maps
``(cache…, x_t, t) -> (x_t + dt · v_t, chunk)``: the policy's own ``denoise_step`` followed by the Euler
update, so the device side only feeds ``x`` back. The times ``t.00`` … are plan constants, computed
exactly as ``euler_integrate`` computes them; the initial noise is a frame input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from worker.trace.policies.adapters._along_plan import Program
from worker.trace.policies.adapters._common import prefix_then_steps_plan
from worker.trace.policies.adapters._skeleton import Along
from worker.trace.policies.base import Call
from worker.trace.policies.observation import standard_normal

Velocity = Callable[..., torch.Tensor]


def euler_times(num_steps: int) -> list[torch.Tensor]:
    """The time tensors ``euler_integrate`` passes to the velocity at each step (batch 1)."""
    dt = -1.0 / num_steps
    return [torch.tensor(1.0 + step * dt, dtype=torch.float32).expand(1).clone() for step in range(num_steps)]


class EulerStep(torch.nn.Module):
    """``(cache…, x_t, t) -> (x_t + dt · v_t, chunk)`` with ``v_t = velocity(cache…, x_t, t)``."""

    def __init__(
        self,
        owner: torch.nn.Module,
        velocity: Velocity,
        num_steps: int,
        chunk: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        super().__init__()
        self.owner = owner  # registers the policy's parameters with the exported program
        self.velocity = velocity
        self.dt = -1.0 / num_steps
        self.chunk = chunk

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        *cache, x_t, t = args
        v_t = self.velocity(*cache, x_t, t)
        x_next = x_t + self.dt * v_t
        return x_next, self.chunk(x_next)


def flow_matching(
    *,
    prefix: torch.nn.Module,
    prefix_inputs: Sequence[str],
    prefix_outputs: Sequence[str],
    step: EulerStep,
    num_steps: int,
    make_observation: Callable[[int], dict[str, torch.Tensor]],
    noise_shape: tuple[int, ...],
    eager_chunk: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None,
    seed: int,
    notes: Callable[[], Mapping[str, object]],
) -> Along:
    """The prefix and step programs along the plan that runs the prefix once and the step ``num_steps``
    times (``Declared.trace`` exports them)."""
    prefix_inputs, prefix_outputs = tuple(prefix_inputs), tuple(prefix_outputs)

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        frame = make_observation(index)
        frame["noise"] = standard_normal(noise_shape, seed=seed, index=index, name="noise")
        return frame

    plan = prefix_then_steps_plan(
        Call("prefix", prefix_inputs, prefix_outputs),
        prefix_outputs,
        first_sample="noise",
        sample="x",
        chunk="action",
        times=euler_times(num_steps),
    )
    return Along(
        [
            Program("prefix", prefix),
            Program("denoise_step", step, (*prefix_outputs, "x", "t"), ("x_next", "action")),
        ],
        plan,
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        notes=notes,
    )


def stacked_cache(cache: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A transformers ``DynamicCache``'s per-layer keys and values as two stacked tensors."""
    keys = torch.stack([layer.keys for layer in cache.layers])
    values = torch.stack([layer.values for layer in cache.layers])
    return keys, values


def dynamic_cache(keys: torch.Tensor, values: torch.Tensor) -> Any:
    """The ``DynamicCache`` that ``stacked_cache`` flattened, rebuilt layer by layer."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer in range(keys.shape[0]):
        cache.update(keys[layer], values[layer], layer)
    return cache
