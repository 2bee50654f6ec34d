"""VLA-JEPA: a ``prefix`` program (the Qwen3-VL vision-language model over the images and the prompt, once,
giving the embodied-action tokens' hidden states) and a ``denoise_step`` program (the flow-matching DiT
action head) run ``num_inference_timesteps`` (4) times.

``VLAJEPAModel`` asks the hub for Qwen3-VL-2B-Instruct (``Qwen3VLForConditionalGeneration.from_pretrained``
and ``AutoProcessor.from_pretrained`` in ``Qwen3VLInterface``) and, with the world model enabled (the
default), for the V-JEPA 2 ViT-L video encoder and its video processor (``AutoModel`` /
``AutoVideoProcessor.from_pretrained``). Offline the adapter builds both from their published configs
(``worker.trace.policies.offline.qwen3_vl`` and ``vjepa2``) with ``_from_config``, random weights from the
seed, in the dtype the policy loads them in (``torch_dtype``: bf16); the fp32 cast of ``build_policy`` is
undone, parameter by parameter, back to the dtypes the constructor gave. The action head and the world-model
predictor are LeRobot's own modules in fp32. The video encoder and the predictor only serve the training
loss: ``predict_action_chunk`` never runs them, so no program contains them.

The frame is what the policy makes of the observation before its backbone: LeRobot's VLA-JEPA
preprocessor (without dataset statistics), then the policy's own ``_prepare_model_inputs`` and
``Qwen3VLInterface.build_inputs`` (the prompt template with the task, 24 action tokens and 32
embodied-action tokens), whose processor is ``worker.trace.policies.offline.qwen3_vl``'s stand-in with the
real image processing: a 256×256 camera is 16×16 patches, 64 visual tokens. Features are LIBERO's layout (the
policy's defaults: an 8-dim state, 7-dim actions) with two 3×256×256 cameras.

The prefix runs ``VLAJEPAModel._qwen_last_decoder_hidden`` (the language model's last decoder layer, before
the final norm, caught by the policy's own forward hook) under the policy's bf16 autocast and returns the
embodied-action tokens' hidden states in fp32, as ``predict_action`` hands them to the action head (the final
norm and the vocabulary logits that the model's forward computes and the policy discards are dead code: the
exported program still holds them, ``to_edge`` drops them). One step is one iteration of
``VLAJEPAActionHead.predict_action``: ``(conditioning, state, actions, t) -> (actions + dt · v, chunk)`` with
``t`` the discretised time ``int(k / steps · action_num_timestep_buckets)`` (plan constants); the chunk is the
actions themselves. The initial noise (the one ``torch.randn`` of ``predict_action``) is a frame input;
``eager_chunk`` hands it to the policy's own ``predict_action_chunk``, which runs on the frame's raw
observation (the policy tokenizes inside).

With fake weights (``weights: fake``) the policy builds under ``worker.trace.fake_weights.building_fake``,
which skips ``torch.distributions``' parameter checks: the action head's training-time ``Beta`` cannot check
fake values.

Static variants (the ``prefix`` program only; ``torch.export`` cannot trace the originals with static
shapes). The policy's own ``predict_action_chunk`` runs the original code; the static prefix is checked
equal to the original ``_encode_qwen`` on the example frame (``check_static_prefix``), and the tests compare
the plan with ``predict_action_chunk``. The Qwen3-VL pieces are shared with groot
(``worker.trace.policies.adapters._qwen3_vl``; groot's docstring describes each):

* ``image_grid_thw`` is a constant of the program; the vision tower's per-image counts are Python ints;
  ``fast_pos_embed_interpolate``'s index and weight tables are constants built once by its own code.
* The multimodal RoPE position ids (``compute_3d_position_ids``, through ``get_rope_index``'s Python walk
  over the token types) are a frame input, computed on the host by that same method of the model.
* ``get_placeholder_mask``'s count check is done on the host; DeepStack's boolean-mask add is a
  ``torch.where``.
* ``_encode_qwen`` gathers the embodied-action tokens with ``nonzero`` of the ids (a data-dependent
  size); their positions are fixed by the prompt's layout, found on the host (checked contiguous) and a
  constant slice of the program.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from lerobot.configs import FeatureType

from worker.trace.fake_weights import is_fake, real_tensors
from worker.trace.policies.adapters._along_plan import Program, predicted_chunk
from worker.trace.policies.adapters._common import (
    prefix_then_steps_plan,
    recorded_dtypes,
    restore_dtypes,
)
from worker.trace.policies.adapters._qwen3_vl import static_pos_embed, static_qwen3_vl
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.adapters._skeleton import TASK, Along, Declared
from worker.trace.policies.adapters.groot import discretized_times
from worker.trace.policies.base import Call, TracedPolicy
from worker.trace.policies.observation import example_observation, standard_normal
from worker.trace.policies.offline import qwen3_vl, vjepa2
from worker.trace.policies.offline.hub import known, redirected

PROGRAM_INPUTS = ("input_ids", "attention_mask", "pixel_values", "position_ids")
PREFIX_OUTPUTS = ("conditioning",)
STEP_INPUTS = ("conditioning", "state")

SUBSTITUTION = (
    "Qwen3VL backbone: image_grid_thw a program constant fixed by the image size, and the per-image counts "
    "the vision tower reads from it through tensors (.tolist() split sizes, repeat_interleave length) Python "
    "ints; fast_pos_embed_interpolate's bilinear index/weight tables (Python lists from .tolist()) constants "
    "built once by its own code; compute_3d_position_ids (get_rope_index: itertools.groupby over .tolist(), "
    "boolean selection) -> position ids a frame input computed on the host by the same method; "
    "get_placeholder_mask's inputs_embeds[mask].numel() check -> checked on the host; DeepStack's "
    "hidden[mask, :] += embeds -> torch.where(mask, hidden + embeds[cumsum(mask) - 1], hidden); "
    "the embodied-action tokens' gather "
    "(nonzero of the ids) -> a constant slice found on the host (checked equal to the original _encode_qwen "
    "on the example frame)"
)
VLA_JEPA = Declared(
    "vla_jepa",
    {
        "observation.images.image": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.images.image2": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.state": (FeatureType.STATE, (8,)),
        "action": (FeatureType.ACTION, (7,)),
    },
    substitutions=[SUBSTITUTION],
)


def _offline_qwen3_vl(dtypes: dict[str, torch.dtype]) -> Any:
    """A stand-in for ``Qwen3VLForConditionalGeneration`` whose ``from_pretrained`` builds locally."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    class OfflineQwen3VL:
        @staticmethod
        def from_pretrained(
            pretrained_model_name_or_path: str, *, torch_dtype: torch.dtype | None = None
        ) -> Any:
            """``from_pretrained`` without the download: the architecture from the offline config, random
            weights (``_from_config``) in the dtype asked for."""
            name = str(pretrained_model_name_or_path)
            config = Qwen3VLConfig(**copy.deepcopy(known(qwen3_vl.CONFIGS, name)))
            model = Qwen3VLForConditionalGeneration._from_config(config, dtype=torch_dtype)
            dtypes.update(recorded_dtypes(model))
            return model

    return OfflineQwen3VL


def _offline_video_encoder(dtypes: dict[str, torch.dtype]) -> Any:
    """A stand-in for ``AutoModel`` whose ``from_pretrained`` builds the V-JEPA 2 encoder locally."""
    from transformers import VJEPA2Config, VJEPA2Model

    class OfflineAutoModel:
        @staticmethod
        def from_pretrained(
            pretrained_model_name_or_path: str, *, torch_dtype: torch.dtype | None = None
        ) -> Any:
            """``AutoModel.from_pretrained`` of a V-JEPA 2 checkpoint without the download: the architecture
            from the offline config, random weights (``_from_config``) in the dtype asked for."""
            name = str(pretrained_model_name_or_path)
            config = VJEPA2Config(**copy.deepcopy(known(vjepa2.CONFIGS, name)))
            model = VJEPA2Model._from_config(config, dtype=torch_dtype)
            dtypes.update(recorded_dtypes(model))
            return model

    return OfflineAutoModel


def _processor(name: str) -> Any:
    return known(qwen3_vl.PROCESSORS, name, "processor")()


def _video_processor(name: str) -> Any:
    from transformers import VJEPA2VideoProcessor

    return VJEPA2VideoProcessor(**copy.deepcopy(known(vjepa2.VIDEO_PROCESSORS, name, "video processor")))


@dataclass
class BuiltDtypes:
    """The dtypes the constructor gave the backbone's and the video encoder's parameters and buffers."""

    qwen: dict[str, torch.dtype] = dataclasses.field(default_factory=dict)
    video_encoder: dict[str, torch.dtype] = dataclasses.field(default_factory=dict)


@contextlib.contextmanager
def offline_vla_jepa(dtypes: BuiltDtypes) -> Iterator[None]:
    """Build VLA-JEPA's Qwen3-VL backbone and V-JEPA 2 encoder without the hub while the policy is built.

    Upstream behaviour worked around: ``Qwen3VLInterface.__init__`` calls
    ``Qwen3VLForConditionalGeneration.from_pretrained`` and ``AutoProcessor.from_pretrained`` of
    ``qwen_model_name``, and ``VLAJEPAModel.__init__`` ``AutoModel.from_pretrained`` and
    ``AutoVideoProcessor.from_pretrained`` of ``jepa_encoder_name`` (whole checkpoints), though the
    architectures are fixed by their configs.
    """
    from lerobot.policies.vla_jepa import modeling_vla_jepa, qwen_interface

    with (
        mock.patch.object(qwen_interface, "Qwen3VLForConditionalGeneration", _offline_qwen3_vl(dtypes.qwen)),
        mock.patch.object(modeling_vla_jepa, "AutoModel", _offline_video_encoder(dtypes.video_encoder)),
        redirected(qwen_interface, {"AutoProcessor": _processor}),
        redirected(modeling_vla_jepa, {"AutoVideoProcessor": _video_processor}),
    ):
        yield


@dataclass(frozen=True)
class Prompt:
    """What the prompt's layout fixes, found on the host: the embodied-action tokens' span."""

    start: int
    end: int


def find_prompt(input_ids: torch.Tensor, embodied_id: int, count: int) -> Prompt:
    """The embodied-action tokens' span in ``input_ids`` (batch 1): ``count`` contiguous tokens."""
    with real_tensors():
        positions: list[int] = (input_ids[0] == embodied_id).nonzero().flatten().tolist()
    if input_ids.shape[0] != 1 or len(positions) != count:
        raise ValueError(f"vla_jepa: the prompt must hold {count} embodied-action tokens (batch 1)")
    if positions != list(range(positions[0], positions[0] + count)):
        raise ValueError(f"vla_jepa: the embodied-action tokens are not contiguous: {positions}")
    return Prompt(positions[0], positions[0] + count)


class _Prefix(torch.nn.Module):
    """Frame inputs -> the embodied-action tokens' hidden states (fp32): ``predict_action``'s
    ``_encode_qwen``."""

    def __init__(self, policy: Any, prompt: Prompt, image_grid_thw: list[list[int]]) -> None:
        super().__init__()
        self.owner = policy  # the step's name for the policy too: the programs share their weight names
        self.prompt = prompt
        self.grid = image_grid_thw
        qwen = policy.model.qwen.model
        self.pos_embed = static_pos_embed(qwen.model.visual, image_grid_thw)
        with real_tensors():  # a constant of the program: the vision tower reads it with .tolist()
            self.image_grid_thw = torch.tensor(image_grid_thw, dtype=torch.long)

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        from lerobot.policies.vla_jepa.modeling_vla_jepa import _get_autocast_context

        batch = dict(zip(PROGRAM_INPUTS, args, strict=True))
        model = self.owner.model
        qwen_inputs = {
            "input_ids": batch["input_ids"],
            "attention_mask": batch["attention_mask"],
            "pixel_values": batch["pixel_values"],
            "image_grid_thw": self.image_grid_thw,
            "position_ids": batch["position_ids"],
        }
        device_type = batch["input_ids"].device.type
        with (
            _get_autocast_context(device_type, torch.bfloat16),
            static_qwen3_vl(model.qwen.model.model, self.grid, self.pos_embed),
        ):
            last_hidden = model._qwen_last_decoder_hidden(qwen_inputs)
            embodied = last_hidden[:, self.prompt.start : self.prompt.end, :]
        return embodied.float()


class _Step(torch.nn.Module):
    """One iteration of ``VLAJEPAActionHead.predict_action``: ``(conditioning, state, actions, t)`` to
    ``(actions', chunk)``."""

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.owner = policy

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        conditioning, state, actions, timesteps = args
        head = self.owner.model.action_model
        state = state.float()
        dt = 1.0 / max(head.num_inference_timesteps, 1)
        hidden_states = head._build_inputs(conditioning, actions, state, timesteps)
        pred = head.model(hidden_states=hidden_states, encoder_hidden_states=conditioning, timestep=timesteps)
        pred_velocity = head.action_decoder(pred[:, -head.action_horizon :])
        actions = actions + dt * pred_velocity
        return actions, actions.to(dtype=torch.float32)


def _digest(tensor: torch.Tensor) -> str:
    with real_tensors():
        return hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()


def trace_vla_jepa_with(
    *, seed: int, checkpoint: Path | None, overrides: Mapping[str, Any] | None = None
) -> TracedPolicy:
    """The adapter, with ``VLAJEPAConfig`` overrides (the tests' small configs use the same code path)."""
    from lerobot.policies.vla_jepa.processor_vla_jepa import make_vla_jepa_pre_post_processors

    dtypes = BuiltDtypes()
    policy: Any = VLA_JEPA.build(
        seed=seed, checkpoint=checkpoint, overrides=overrides, offline=offline_vla_jepa(dtypes)
    )
    config = policy.config
    if config.resize_images_to is not None:
        raise NotImplementedError("vla_jepa is traced with the cameras' own size (resize_images_to=None)")
    model = policy.model
    restore_dtypes(model.qwen.model, dtypes.qwen)
    if model.video_encoder is not None:
        restore_dtypes(model.video_encoder, dtypes.video_encoder)
    qwen = model.qwen.model.model  # Qwen3VLModel
    preprocessor, _ = make_vla_jepa_pre_post_processors(config)
    observations: dict[str, dict[str, Any]] = {}  # the raw observation of each frame, by its pixels

    def preprocess(index: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """Frame ``index``'s raw observation and the backbone's inputs the policy makes of it."""
        with real_tensors():
            observation: dict[str, Any] = example_observation(config.input_features, index, seed=seed)
            observation["task"] = TASK
            batch: dict[str, Any] = preprocessor(dict(observation))
            inputs = policy._prepare_model_inputs(batch, training=False)
            qwen_inputs = model.qwen.build_inputs(
                images=inputs["images"],
                instructions=inputs["instructions"],
                action_prompt=model.replace_prompt,
                embodied_prompt=model.embodied_replace_prompt,
            )
            qwen_inputs["position_ids"] = qwen.compute_3d_position_ids(
                input_ids=qwen_inputs["input_ids"],
                inputs_embeds=None,
                image_grid_thw=qwen_inputs["image_grid_thw"],
                attention_mask=qwen_inputs["attention_mask"],
                mm_token_type_ids=qwen_inputs["mm_token_type_ids"],
            )
            qwen_inputs["state"] = inputs["state"]
        return observation, dict(qwen_inputs)

    observation0, inputs0 = preprocess(0)
    count = config.num_embodied_action_tokens_per_instruction
    prompt = find_prompt(inputs0["input_ids"], model.embodied_action_token_id, count)
    with real_tensors():
        image_grid_thw: list[list[int]] = inputs0["image_grid_thw"].tolist()
        image_tokens = int((inputs0["input_ids"] == qwen.config.image_token_id).sum())
    merge = qwen.visual.spatial_merge_size**2
    if image_tokens != sum(t * h * w for t, h, w in image_grid_thw) // merge:
        raise ValueError(f"vla_jepa: {image_tokens} image tokens in the prompt for grids {image_grid_thw}")

    noise_shape = (1, config.chunk_size, config.action_dim)

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        observation, inputs = (observation0, inputs0) if index == 0 else preprocess(index)
        if index:
            with real_tensors():
                grid = inputs["image_grid_thw"].tolist()
            if find_prompt(inputs["input_ids"], model.embodied_action_token_id, count) != prompt or (
                grid != image_grid_thw
            ):
                raise ValueError(f"vla_jepa: frame {index}'s prompt layout differs from frame 0's")
        frame = {key: inputs[key] for key in (*PROGRAM_INPUTS, "state")}
        frame["noise"] = standard_normal(noise_shape, seed=seed, index=index, name="noise")
        observations[_digest(frame["pixel_values"])] = observation
        return frame

    frame0 = make_frame(0)
    steps = int(config.num_inference_timesteps)
    plan = prefix_then_steps_plan(
        Call("prefix", PROGRAM_INPUTS, PREFIX_OUTPUTS),
        STEP_INPUTS,
        first_sample="noise",
        sample="actions",
        chunk="chunk",
        times=[
            torch.full((1,), t, dtype=torch.long)
            for t in discretized_times(steps, config.action_num_timestep_buckets)
        ],
        frame_inputs=(*PROGRAM_INPUTS, "state", "noise"),
    )
    fake = is_fake(next(iter(model.parameters())))

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``predict_action_chunk`` on the frame's raw observation (the policy tokenizes it itself)."""
        observation = observations.get(_digest(frame["pixel_values"]))
        if observation is None:
            raise KeyError("vla_jepa: eager_chunk takes the frames make_frame made")
        return predicted_chunk(policy, preprocessor(dict(observation)), draws=[frame["noise"]])

    along = Along(
        [
            # Fake weights: the exported program (static split sizes) gives the step's example inputs; the
            # eager prefix reads per-image counts from fake tensors, which hold no values. Fake weights hold
            # no values to compare either: the static prefix is checked with real ones.
            Program(
                "prefix",
                _Prefix(policy, prompt, image_grid_thw),
                outputs_from="exported" if fake else "eager",
                check=None if fake else lambda outs: check_static_prefix(policy, observation0, outs[0]),
            ),
            Program("denoise_step", _Step(policy), (*STEP_INPUTS, "actions", "t"), ("actions_next", "chunk")),
        ],
        plan,
        frame=frame0,
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        notes=lambda: dict(
            processor=f"stand-in ({config.qwen_model_name}: Qwen3-VL image processing, tokenizer vocabulary "
            f"{qwen3_vl.WORDS.vocab_size} with VLA-JEPA's action tokens)",
            image_grid_thw=image_grid_thw,
            embodied_span=[prompt.start, prompt.end],
            backbone_dtype=str(qwen.get_input_embeddings().weight.dtype),
        ),
    )
    return VLA_JEPA.trace(policy, along, seed=seed, checkpoint=checkpoint)


def check_static_prefix(policy: Any, observation: Mapping[str, Any], static: torch.Tensor) -> None:
    """The static prefix equals ``predict_action``'s own ``_encode_qwen`` on ``observation`` (run through
    the policy's preprocessing), or ``SubstitutionMismatch``."""
    from lerobot.policies.vla_jepa.processor_vla_jepa import make_vla_jepa_pre_post_processors

    preprocessor, _ = make_vla_jepa_pre_post_processors(policy.config)
    with torch.no_grad():
        inputs = policy._prepare_model_inputs(preprocessor(dict(observation)), training=False)
        embodied, _ = policy.model._encode_qwen(
            inputs["images"], inputs["instructions"], need_action_tokens=False
        )
    if not torch.equal(embodied.float(), static):
        raise SubstitutionMismatch("vla_jepa: the static prefix's conditioning differs from _encode_qwen's")


VLA_JEPA.register(trace_vla_jepa_with)
