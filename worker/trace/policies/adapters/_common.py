"""Helpers the adapters share: building a LeRobot policy offline, exporting, recording the config.

Policies are built with LeRobot's own factory (``make_policy_config`` / ``get_policy_class``) from the
type's default config, given the input and output features of the environment the defaults are tuned
for, and with random weights from ``torch.manual_seed(seed)``; or they are loaded from a local
checkpoint directory with the policy class's ``from_pretrained``. Always on CPU, fp32, eval mode.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from lerobot.configs import FeatureType, PolicyFeature, PreTrainedConfig
from lerobot.policies.factory import get_policy_class, make_policy_config
from lerobot.policies.pretrained import PreTrainedPolicy

from worker.trace.policies.base import Call, ChunkPlan, TracedProgram

Features = Mapping[str, tuple[FeatureType, tuple[int, ...]]]


def policy_features(features: Features) -> dict[str, PolicyFeature]:
    return {name: PolicyFeature(type=kind, shape=shape) for name, (kind, shape) in features.items()}


def default_config(policy_type: str, features: Features, overrides: Mapping[str, Any] | None = None) -> Any:
    """The policy type's default config on ``features`` (actions out, the rest in), on the CPU, with
    ``overrides``."""
    io = policy_features(features)
    return make_policy_config(
        policy_type,
        input_features={k: v for k, v in io.items() if v.type is not FeatureType.ACTION},
        output_features={k: v for k, v in io.items() if v.type is FeatureType.ACTION},
        device="cpu",
        **dict(overrides or {}),
    )


def field_default(config_cls: type, field: str) -> str:
    """A config dataclass's default for ``field`` (say, the backbone checkpoint a policy asks the hub for)."""
    default: str = config_cls.__dataclass_fields__[field].default  # type: ignore[attr-defined]
    return default


def build_policy(
    policy_type: str,
    *,
    seed: int,
    checkpoint: Path | None,
    features: Features,
    overrides: Mapping[str, Any] | None = None,
) -> PreTrainedPolicy:
    """The policy from its default config (plus ``overrides``) with seeded random weights, or a checkpoint.

    ``overrides`` are what building offline needs (no ImageNet backbone download); they apply to a
    checkpoint's config too, whose own weights replace whatever the constructor initialised.
    """
    policy_cls = get_policy_class(policy_type)
    if checkpoint is not None:
        path = Path(checkpoint)
        if not (path / "config.json").is_file():
            raise ValueError(f"checkpoint {str(path)!r} is not a readable policy directory (no config.json)")
        try:
            config = PreTrainedConfig.from_pretrained(str(path), local_files_only=True)
            if config.type != policy_type:
                raise ValueError(f"it holds a {config.type!r} policy, not {policy_type!r}")
            for key, value in (overrides or {}).items():
                setattr(config, key, value)
            config.device = "cpu"
            policy = policy_cls.from_pretrained(str(path), config=config, local_files_only=True)
        except Exception as error:
            raise ValueError(f"checkpoint {str(path)!r} could not be loaded: {error}") from error
    else:
        config = default_config(policy_type, features, overrides)
        torch.manual_seed(seed)
        policy = policy_cls(config=config)
    policy = policy.to(device="cpu", dtype=torch.float32)
    policy.eval()
    return policy


def config_dict(policy: PreTrainedPolicy, **extra: object) -> dict[str, object]:
    """The policy config as a JSON-able dict, with the adapter's notes under ``extra``."""
    config = policy.config
    data = _jsonable(config)
    assert isinstance(data, dict)
    data["type"] = config.type
    data.update({key: _jsonable(value) for key, value in extra.items()})
    return data


def _jsonable(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, PolicyFeature):
        return {"type": value.type.value, "shape": list(value.shape)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def export_program(
    name: str,
    module: torch.nn.Module,
    example: Sequence[torch.Tensor],
    input_names: Sequence[str],
    output_names: Sequence[str],
) -> TracedProgram:
    """``torch.export`` one program (non-strict: LeRobot code is plain Python around tensor ops)."""
    module.eval()
    with torch.no_grad():
        exported = torch.export.export(module, tuple(example), strict=False)
    return TracedProgram(name, exported, tuple(input_names), tuple(output_names))


def prefix_then_steps_plan(
    prefix: Call,
    step_inputs: Sequence[str],
    *,
    first_sample: str,
    sample: str,
    chunk: str,
    times: Sequence[torch.Tensor],
    constants: Mapping[str, torch.Tensor] | None = None,
    frame_inputs: Sequence[str] | None = None,
    per_step: Mapping[str, Sequence[torch.Tensor]] | None = None,
) -> ChunkPlan:
    """A prefix call once, then ``denoise_step`` once per time: step k reads ``step_inputs``, the current
    sample, ``t.kk`` and each ``per_step`` name's ``<name>.kk`` (a scheduler's step size, say), and writes
    the next sample (``<sample>.kk+1``; the first is ``first_sample``) and the chunk so far
    (``<chunk>.kk+1``, the last one ``action``). The frame is ``frame_inputs``, by default the prefix's
    inputs and ``noise`` (a policy whose prefix draws from the noise itself, or whose steps read frame
    inputs the prefix does not, names its own); the times and the per-step values are plan constants
    beside ``constants``."""
    steps = len(times)
    per_step = per_step or {}
    for name, values in per_step.items():
        if len(values) != steps:
            raise ValueError(f"{steps} times but {len(values)} values of {name!r}")
    samples = [first_sample, *(f"{sample}.{k + 1:02d}" for k in range(steps))]
    calls = [prefix]
    for k in range(steps):
        chunk_name = "action" if k == steps - 1 else f"{chunk}.{k + 1:02d}"
        extra = tuple(f"{name}.{k:02d}" for name in per_step)
        calls.append(
            Call(
                "denoise_step", (*step_inputs, samples[k], f"t.{k:02d}", *extra), (samples[k + 1], chunk_name)
            )
        )
    plan_constants = {**(constants or {}), **{f"t.{k:02d}": t for k, t in enumerate(times)}}
    for name, values in per_step.items():
        plan_constants.update({f"{name}.{k:02d}": value for k, value in enumerate(values)})
    return ChunkPlan(
        frame_inputs=(*prefix.inputs, "noise") if frame_inputs is None else tuple(frame_inputs),
        calls=tuple(calls),
        outputs=("action",),
        constants=plan_constants,
    )


def single_program_plan(input_names: Sequence[str], output_names: Sequence[str]) -> ChunkPlan:
    """The default plan: one ``forward`` call computes the chunk from the frame's inputs."""
    return ChunkPlan(
        frame_inputs=tuple(input_names),
        calls=(Call("forward", tuple(input_names), tuple(output_names)),),
        outputs=tuple(output_names),
    )


class Positional(torch.nn.Module):
    """Calls ``fn(dict(zip(names, args)))``: a dict-taking policy method as a positional program."""

    def __init__(
        self, owner: torch.nn.Module, names: Sequence[str], fn: Callable[[dict[str, torch.Tensor]], Any]
    ) -> None:
        super().__init__()
        self.owner = owner  # registers the policy's parameters with the exported program
        self.names = tuple(names)
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(dict(zip(self.names, args, strict=True)))


def restore_dtypes(module: torch.nn.Module, dtypes: Mapping[str, torch.dtype]) -> None:
    """Give ``module``'s parameters and buffers back the dtypes in ``dtypes`` (tied weights stay tied)."""
    replaced: dict[int, torch.Tensor] = {}
    for prefix, sub in module.named_modules():
        for table in (sub._parameters, sub._buffers):
            for key, tensor in table.items():
                name = f"{prefix}.{key}" if prefix else key
                if tensor is None or dtypes.get(name, tensor.dtype) == tensor.dtype:
                    continue
                if id(tensor) not in replaced:
                    with torch.no_grad():
                        value = tensor.detach().to(dtypes[name])
                    if isinstance(tensor, torch.nn.Parameter):
                        value = torch.nn.Parameter(value, requires_grad=tensor.requires_grad)
                    replaced[id(tensor)] = value
                table[key] = replaced[id(tensor)]


def recorded_dtypes(module: torch.nn.Module) -> dict[str, torch.dtype]:
    """Every parameter's and buffer's dtype, by name (tied tensors under each of their names)."""
    dtypes = {key: value.dtype for key, value in module.named_parameters(remove_duplicate=False)}
    dtypes.update({key: value.dtype for key, value in module.named_buffers(remove_duplicate=False)})
    return dtypes
