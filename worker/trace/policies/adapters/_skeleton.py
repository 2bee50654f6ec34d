"""The skeleton the vision-language-action adapters share: a declarative description of the policy and one
driver that turns it, built, into a ``TracedPolicy``.

An adapter declares its policy once (``Declared``: the LeRobot policy type, the features it is traced on,
the substitutions every trace of it makes) and, from the built policy, what is its own (``Along``: its
programs, the chunk plan that runs them, the frame maker, the policy's own chunk, its notes beside the
recorded config). ``Declared.build`` builds the policy inside the adapter's offline pieces (its stand-ins
for what the policy's constructor asks the hub for); ``Declared.trace`` exports the programs along the plan
(``trace_along_plan``) and records the config with the task every adapter prompts with (``TASK``) and the
adapter's notes; ``Declared.register`` registers the adapter function (``trace_<name>_with``) under the
declared name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from worker.trace.policies.adapters._along_plan import Environment, Program, trace_along_plan
from worker.trace.policies.adapters._common import Features, build_policy, config_dict
from worker.trace.policies.base import ChunkPlan, TracedPolicy
from worker.trace.policies.registry import Adapter, register

TASK = "pick up the red cube and place it in the box"


@dataclass(frozen=True)
class Along:
    """What an adapter makes of its built policy: ``programs`` (each once, in the traced policy's order)
    exported along ``plan`` over frame 0 (``frame``, by default ``make_frame(0)``); ``eager_chunk`` the
    policy's own chunk; ``notes`` the adapter's notes recorded beside the config after ``TASK`` (or with
    ``task`` where they place it), asked for once the programs are exported; ``substitutions`` those of
    this trace beside the declared ones."""

    programs: Sequence[Program]
    plan: ChunkPlan
    make_frame: Callable[[int], dict[str, torch.Tensor]]
    eager_chunk: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None
    notes: Callable[[], Mapping[str, object]] = dict
    frame: Environment | None = None
    substitutions: Sequence[str] = ()
    tolerance: tuple[float, float] = (1e-3, 1e-3)


@dataclass(frozen=True)
class Declared:
    """A policy as its adapter declares it: LeRobot's ``policy_type`` traced on ``features``, every trace
    making ``substitutions``; ``name`` is the traced policy's (by default the type)."""

    policy_type: str
    features: Features
    substitutions: Sequence[str] = field(default_factory=tuple)
    name: str | None = None

    def build(
        self,
        *,
        seed: int,
        checkpoint: Path | None,
        overrides: Mapping[str, Any] | None = None,
        offline: contextlib.AbstractContextManager[object] | None = None,
        features: Features | None = None,
    ) -> Any:
        """The policy (``build_policy``) with config ``overrides``, built inside ``offline``: the adapter's
        stand-ins for what the policy's constructor asks the hub for; on ``features``, by default the
        declared ones."""
        with contextlib.nullcontext() if offline is None else offline:
            return build_policy(
                self.policy_type,
                seed=seed,
                checkpoint=checkpoint,
                features=self.features if features is None else features,
                overrides=overrides,
            )

    def trace(self, policy: Any, along: Along, *, seed: int, checkpoint: Path | None) -> TracedPolicy:
        """The traced policy: ``along``'s programs exported along its plan, the config recorded with
        ``TASK`` and ``along``'s notes, the declared substitutions before ``along``'s."""
        return trace_along_plan(
            self.name or self.policy_type,
            along.programs,
            along.plan,
            frame=along.make_frame(0) if along.frame is None else along.frame,
            make_frame=along.make_frame,
            eager_chunk=along.eager_chunk,
            seed=seed,
            checkpoint=checkpoint,
            config=lambda: config_dict(policy, **_with_task(along.notes())),
            substitutions=[*self.substitutions, *along.substitutions],
            tolerance=along.tolerance,
        )

    def register(self, adapter: Adapter) -> None:
        """Register ``adapter`` (called with ``seed`` and ``checkpoint`` only) under the traced name."""
        register(self.name or self.policy_type)(adapter)


def _with_task(notes: Mapping[str, object]) -> dict[str, object]:
    """``TASK`` first, then the notes; where the notes name the task themselves, where they place it."""
    return dict(notes) if "task" in notes else {"task": TASK, **notes}
